#include "runtime/artifact.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "support/check.h"
#include "support/hash.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// A name of its own per process and call, beside `path`, renamed onto it when complete.
fs::path temp_name(const fs::path& path) {
  static std::atomic<unsigned> calls{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp{}.{}", static_cast<long>(::getpid()), calls++);
  return tmp;
}

void rename_into_place(const fs::path& tmp, const fs::path& path) {
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    user_error("export: cannot write {}: {}", path.string(), ec.message());
  }
}

void write_file(const fs::path& path, std::string_view bytes) {
  fs::path tmp = temp_name(path);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      user_error("export: cannot write {} ({} bytes)", path.string(), bytes.size());
    }
  }
  rename_into_place(tmp, path);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  COIL_USER_CHECK(in.good(), "cannot read {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json blob_json(const WeightsBlob& b) {
  return {{"offset", b.offset}, {"bytes", b.bytes}};
}

WeightsBlob blob_from(const json& j) {
  return {j.at("offset").get<int64_t>(), j.at("bytes").get<int64_t>()};
}

}  // namespace

const char* export_coil_version() {
  return COIL_PROJECT_VERSION;
}

json value_spec_json(const ValueSpec& s) {
  return {{"name", s.name},
          {"dtype", dtype_name(s.dtype)},
          {"shape", s.shape},
          {"source_name", s.source_name}};
}

ValueSpec value_spec_from_json(const json& j) {
  std::string name = j.at("dtype").get<std::string>();
  auto dtype = parse_dtype(name);
  if (!dtype) throw json::other_error::create(501, "unknown dtype '" + name + "'", &j);
  return {j.at("name").get<std::string>(), *dtype, j.at("shape").get<std::vector<int64_t>>(),
          j.value("source_name", std::string())};
}

json run_check_json(const RunCheck& c) {
  return {{"kind", run_check_kind_name(c.kind)}, {"op", c.op}};
}

RunCheck run_check_from_json(const json& j) {
  std::string name = j.at("kind").get<std::string>();
  auto kind = parse_run_check_kind(name);
  if (!kind) throw json::other_error::create(501, "unknown run check '" + name + "'", &j);
  return {*kind, j.at("op").get<std::string>()};
}

void write_export(const fs::path& dir, ExportManifest m, const fs::path& module_so,
                  const std::vector<WeightsSource>& constants, WeightsSource packed) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  COIL_USER_CHECK(!ec, "export: cannot create {}: {}", dir.string(), ec.message());

  std::string module = read_file(module_so);
  m.info.module_bytes = static_cast<int64_t>(module.size());
  m.module_xxh3 = checksum(module);

  // weights.bin: each constant at an aligned offset, then the packed region.
  int64_t size = 0;
  m.constants.clear();
  for (const WeightsSource& c : constants) {
    m.constants.push_back({size, c.bytes});
    size = align_up(size + c.bytes);
  }
  m.packed = {size, packed.bytes};
  size += packed.bytes;
  std::string weights(static_cast<size_t>(size), '\0');
  for (size_t i = 0; i < constants.size(); ++i)
    if (constants[i].bytes > 0)
      std::memcpy(weights.data() + m.constants[i].offset, constants[i].data,
                  static_cast<size_t>(constants[i].bytes));
  if (packed.bytes > 0)
    std::memcpy(weights.data() + m.packed.offset, packed.data, static_cast<size_t>(packed.bytes));
  m.info.weights_bytes = size;
  m.weights_xxh3 = checksum(weights);

  nlohmann::ordered_json j;
  j["format"] = kExportFormat;
  j["coil_version"] = export_coil_version();
  j["isa"] = m.info.isa;
  j["cpu_features"] = m.info.cpu_features;
  json inputs = json::array(), outputs = json::array(), checks = json::array();
  for (const ValueSpec& s : m.inputs) inputs.push_back(value_spec_json(s));
  for (const ValueSpec& s : m.outputs) outputs.push_back(value_spec_json(s));
  for (const RunCheck& c : m.run_checks) checks.push_back(run_check_json(c));
  j["inputs"] = nlohmann::ordered_json(inputs);
  j["outputs"] = nlohmann::ordered_json(outputs);
  j["run_checks"] = nlohmann::ordered_json(checks);
  j["arena_bytes"] = m.info.arena_bytes;
  j["module"] = {{"file", "module.so"}, {"bytes", m.info.module_bytes}, {"xxh3", m.module_xxh3}};
  json blobs = json::array();
  for (const WeightsBlob& b : m.constants) blobs.push_back(blob_json(b));
  j["weights"] = {{"file", "weights.bin"},
                  {"bytes", m.info.weights_bytes},
                  {"xxh3", m.weights_xxh3},
                  {"constants", nlohmann::ordered_json(blobs)},
                  {"packed", nlohmann::ordered_json(blob_json(m.packed))}};
  j["kernels"] = m.info.kernels;

  write_file(dir / "module.so", module);
  write_file(dir / "weights.bin", weights);
  write_file(dir / "manifest.json", j.dump(2) + "\n");
}

ExportManifest read_export_manifest(const fs::path& dir) {
  fs::path path = dir / "manifest.json";
  std::error_code ec;
  COIL_USER_CHECK(fs::is_directory(dir, ec),
                  "{}: not a directory (an exported model is the directory `coil export MODEL -o "
                  "DIR` writes)",
                  dir.string());
  COIL_USER_CHECK(fs::exists(path, ec), "{}: no manifest.json: not a model `coil export` wrote",
                  dir.string());
  ExportManifest m;
  try {
    json j = json::parse(read_file(path));
    m.info.format = j.at("format").get<std::string>();
    COIL_USER_CHECK(m.info.format == kExportFormat,
                    "{}: format '{}', this runtime reads '{}': export the model again with this "
                    "version of coil",
                    path.string(), m.info.format, kExportFormat);
    m.info.coil_version = j.at("coil_version").get<std::string>();
    COIL_USER_CHECK(m.info.coil_version == export_coil_version(),
                    "{}: exported by coil {}, this runtime is coil {} (the module calls coil's "
                    "own libraries, whose interface changes between versions): export it again",
                    path.string(), m.info.coil_version, export_coil_version());
    m.info.isa = j.at("isa").get<std::string>();
    m.info.cpu_features = j.at("cpu_features").get<std::vector<std::string>>();
    for (const json& s : j.at("inputs")) m.inputs.push_back(value_spec_from_json(s));
    for (const json& s : j.at("outputs")) m.outputs.push_back(value_spec_from_json(s));
    for (const json& c : j.at("run_checks")) m.run_checks.push_back(run_check_from_json(c));
    m.info.arena_bytes = j.at("arena_bytes").get<int64_t>();
    const json& module = j.at("module");
    m.info.module_bytes = module.at("bytes").get<int64_t>();
    m.module_xxh3 = module.at("xxh3").get<std::string>();
    const json& weights = j.at("weights");
    m.info.weights_bytes = weights.at("bytes").get<int64_t>();
    m.weights_xxh3 = weights.at("xxh3").get<std::string>();
    for (const json& b : weights.at("constants")) m.constants.push_back(blob_from(b));
    m.packed = blob_from(weights.at("packed"));
    m.info.kernels = j.at("kernels").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    user_error("{}: not a valid manifest: {}", path.string(), e.what());
  }
  for (const WeightsBlob& b : m.constants)
    COIL_USER_CHECK(b.offset >= 0 && b.bytes >= 0 && b.offset + b.bytes <= m.info.weights_bytes,
                    "{}: a constant at offset {} of {} bytes lies outside weights.bin ({} bytes)",
                    path.string(), b.offset, b.bytes, m.info.weights_bytes);
  COIL_USER_CHECK(m.packed.offset >= 0 && m.packed.bytes >= 0 &&
                      m.packed.offset + m.packed.bytes <= m.info.weights_bytes,
                  "{}: the packed weights lie outside weights.bin", path.string());
  return m;
}

}  // namespace coil

#include "driver/model_cache.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/text_format.h"
#include "runtime/artifact.h"
#include "runtime/code_cache.h"
#include "runtime/remote_cache.h"
#include "runtime/toolchain.h"
#include "support/check.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/log.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kVersion = "coil-model-cache-v2";

// The GNU build ID of the loaded object whose base address is `base` (a hash of its contents
// that the linker writes into a note), as hex, or "" when it has none.
std::string build_id_of(const void* base) {
  struct Search {
    const void* base;
    std::string id;
  } search{base, ""};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        bool match = false;
        for (int i = 0; i < info->dlpi_phnum && !match; ++i)
          match = info->dlpi_phdr[i].p_type == PT_LOAD && info->dlpi_phdr[i].p_offset == 0 &&
                  reinterpret_cast<const void*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr) ==
                      s->base;
        if (!match) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const auto* desc =
                reinterpret_cast<const unsigned char*>(name + align4(note->n_namesz));
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              for (unsigned k = 0; k < note->n_descsz; ++k) s->id += fmt::format("{:02x}", desc[k]);
              return 1;
            }
            p = reinterpret_cast<const char*>(desc) + align4(note->n_descsz);
          }
        }
        return 1;
      },
      &search);
  return search.id;
}

// The binary holding this code (the coil executable, or libcoil_c.so in Python): a rebuilt
// coil may generate other code for the same graph, so its identity is part of the key. Its GNU
// build ID (a hash of its contents the linker writes, read from memory: no file is read), else
// the XXH3 of its bytes (about 20 ms for coil's 5 MB on a VM's disk); never its path or time:
// the machines of a fleet that share a remote cache (runtime/remote_cache.h) install coil in
// different places.
const std::string& coil_binary_identity() {
  static const std::string identity = [] {
    Dl_info info{};
    bool found = ::dladdr(reinterpret_cast<void*>(&coil_binary_identity), &info) != 0;
    if (found && info.dli_fbase) {
      std::string id = build_id_of(info.dli_fbase);
      if (!id.empty()) return "build-id " + id;
    }
    std::string path =
        found && info.dli_fname && info.dli_fname[0] == '/' ? info.dli_fname : "/proc/self/exe";
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    COIL_ASSERT(in.good(), "model cache: cannot read coil's own binary {}", path);
    std::string bytes(static_cast<size_t>(in.tellg()), '\0');
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    COIL_ASSERT(in.good(), "model cache: cannot read coil's own binary {}", path);
    return "binary " + checksum(bytes);
  }();
  return identity;
}

// A log channel that prints what the stages do is on in this process: COIL_LOGS, or
// set_log_channels (the CLI, tests), which COIL_LOGS does not show.
bool stage_logs_enabled() {
  std::stringstream logs(env(EnvVar::logs));
  std::string channel;
  while (std::getline(logs, channel, ',')) {
    if (!channel.empty() && channel != "perf" && channel != "cache") return true;
  }
  bool on = false;
#define COIL_STAGE_CHANNEL_ON(name, doc)                                                       \
  on = on || (LogChannel::name != LogChannel::perf && LogChannel::name != LogChannel::cache && \
              log_enabled(LogChannel::name));
  COIL_LOG_CHANNELS(COIL_STAGE_CHANNEL_ON)
#undef COIL_STAGE_CHANNEL_ON
  return on;
}

bool bypasses_cache(const CompileOptions& options) {
  if (!options.debug_dir.empty() || !env(EnvVar::debug_dir).empty()) return true;
  if (!env(EnvVar::testing_inject_bug).empty()) return true;
  if (!env(EnvVar::testing_amx_emulate).empty()) return true;
  // Log channels that print what the stages do need the stages to run.
  return stage_logs_enabled();
}

fs::path entry_path(const std::string& key, const char* extension = ".json") {
  return cache_root() / "models" / key.substr(0, 2) / (key + extension);
}

// Writes `text` to `path` through a temp file renamed into place; false when it could not.
bool write_atomically(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  // A name of its own per process and call: threads of one process may store the same key.
  static std::atomic<unsigned> calls{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp{}.{}", static_cast<long>(::getpid()), calls++);
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) {
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

json plan_json(const KernelCallPlan& plan) {
  json kernels = json::array();
  for (const KernelCallPlan::Kernel& k : plan.kernels) {
    json args = json::array();
    for (const KernelCallPlan::Arg& a : k.args)
      args.push_back({a.param, static_cast<int>(a.kind), a.external_index, a.arena_offset,
                      a.packed_slot, a.bytes, a.is_output});
    kernels.push_back({{"name", k.name},
                       {"origins", k.origins},
                       {"traffic", {k.bytes_read, k.bytes_written, k.ops}},
                       {"args", args},
                       {"run_error", k.run_error}});
  }
  return {{"kernels", kernels}, {"packed_slots", plan.packed_slots}};
}

KernelCallPlan plan_from(const json& j) {
  KernelCallPlan plan;
  plan.packed_slots = j.at("packed_slots").get<int>();
  for (const json& k : j.at("kernels")) {
    KernelCallPlan::Kernel kernel;
    kernel.name = k.at("name").get<std::string>();
    kernel.origins = k.at("origins").get<std::vector<std::string>>();
    const json& t = k.at("traffic");
    kernel.bytes_read = t.at(0).get<int64_t>();
    kernel.bytes_written = t.at(1).get<int64_t>();
    kernel.ops = t.at(2).get<int64_t>();
    for (const json& a : k.at("args")) {
      KernelCallPlan::Arg arg;
      arg.param = a.at(0).get<std::string>();
      arg.kind = static_cast<BufferKind>(a.at(1).get<int>());
      arg.external_index = a.at(2).get<int>();
      arg.arena_offset = a.at(3).get<int64_t>();
      arg.packed_slot = a.at(4).get<int>();
      arg.bytes = a.at(5).get<int64_t>();
      arg.is_output = a.at(6).get<bool>();
      kernel.args.push_back(std::move(arg));
    }
    kernel.run_error = k.at("run_error").get<bool>();
    plan.kernels.push_back(std::move(kernel));
  }
  return plan;
}

}  // namespace

std::optional<std::string> model_cache_key(const Graph& graph, const CompileOptions& options) {
  if (options.device != "cpu" || bypasses_cache(options)) return std::nullopt;
  KeyHasher h;
  h.add(kVersion);
  h.add(coil_binary_identity());
  h.add(graph_fingerprint(graph));
  // The frontend's names of inputs and outputs are not in the text format: they only label the
  // entry's ValueSpecs, but a graph that differs in them must not get the other's labels.
  for (int id : graph.inputs()) h.add("source " + graph.node(id).source_name);
  for (const GraphOutput& o : graph.outputs()) h.add("source " + o.source_name);
  for (const auto& [symbol, value] : options.sizes) h.add(fmt::format("{}={}", symbol, value));
  h.add("isa=" + options.isa);
  h.add(fmt::format("fusion={} store_all={} autotune={}", options.fusion,
                    options.store_all_intermediates, options.autotune));
  h.add("mode=" + options.mode);
  h.add("precision=" + options.precision);
  for (EnvVar v : {EnvVar::cpu_isa, EnvVar::matmul, EnvVar::compile_debug, EnvVar::vmath_dir})
    h.add(env(v));
  h.add(host_cpu_flags());
  // Not the thread count (issue 20): the code never depends on it (the parallel rule uses a
  // fixed hint, OpenMP reads the count at run time), so one entry serves every count. Autotuning
  // measured its choices at the first compile's count; they stay right for any other, if not
  // always the fastest there.
  return h.hex();
}

namespace {

// The remote copy of entry `key` (runtime/remote_cache.h) written as the local one; false when
// there is none.
bool fetch_remote_entry(const std::string& key) {
  RemoteCache* remote = RemoteCache::current();
  if (!remote) return false;
  std::optional<std::string> payload = remote->get(RemoteCache::Kind::model, key);
  if (!payload) return false;
  auto files = unpack_files(*payload);
  if (!files || files->size() != 2 || (*files)[0].first != "entry.json" ||
      (*files)[1].first != "source.cpp")
    return false;
  return write_atomically(entry_path(key, ".cpp"), (*files)[1].second) &&
         write_atomically(entry_path(key), (*files)[0].second);
}

}  // namespace

std::optional<ModelCacheEntry> load_model_cache_entry(const std::string& key) {
  std::ifstream in(entry_path(key));
  if (!in && fetch_remote_entry(key)) in.open(entry_path(key));
  if (!in) return std::nullopt;
  ModelCacheEntry e;
  try {
    json j = json::parse(in);
    if (j.at("version").get<std::string>() != kVersion) return std::nullopt;
    e.code_key = j.at("code_key").get<std::string>();
    e.isa = j.at("isa").get<std::string>();
    e.cpu_features = j.at("cpu_features").get<std::vector<std::string>>();
    e.compiler = j.at("compiler").get<std::string>();
    for (const json& s : j.at("inputs")) e.inputs.push_back(value_spec_from_json(s));
    for (const json& s : j.at("outputs")) e.outputs.push_back(value_spec_from_json(s));
    for (const json& c : j.at("run_checks")) e.run_checks.push_back(run_check_from_json(c));
    e.kernel_calls = plan_from(j.at("kernel_calls"));
    e.arena_bytes = j.at("arena_bytes").get<int64_t>();
    e.constant_nodes = j.at("constant_nodes").get<std::vector<int>>();
    std::ifstream src(entry_path(key, ".cpp"), std::ios::binary);
    if (!src) return std::nullopt;
    std::stringstream text;
    text << src.rdbuf();
    e.source = text.str();
  } catch (const json::exception& ex) {
    COIL_LOG(cache, "model cache entry {} unreadable ({}): compiling", key, ex.what());
    return std::nullopt;
  }
  // Another compiler on PATH than the one that built the module: the cold path rebuilds with
  // it (its code-cache key differs). No compiler at all: a deployment, the module is used.
  std::string compiler = compiler_fingerprint();
  if (!compiler.empty() && compiler != e.compiler) {
    COIL_LOG(cache, "model cache entry {} was built by {}, the compiler now is {}: compiling", key,
             e.compiler, compiler);
    return std::nullopt;
  }
  return e;
}

void store_model_cache_entry(const std::string& key, const ModelCacheEntry& e) {
  json j;
  j["version"] = kVersion;
  j["code_key"] = e.code_key;
  j["isa"] = e.isa;
  j["cpu_features"] = e.cpu_features;
  j["compiler"] = e.compiler;
  j["inputs"] = json::array();
  for (const ValueSpec& s : e.inputs) j["inputs"].push_back(value_spec_json(s));
  j["outputs"] = json::array();
  for (const ValueSpec& s : e.outputs) j["outputs"].push_back(value_spec_json(s));
  j["run_checks"] = json::array();
  for (const RunCheck& c : e.run_checks) j["run_checks"].push_back(run_check_json(c));
  j["kernel_calls"] = plan_json(e.kernel_calls);
  j["arena_bytes"] = e.arena_bytes;
  j["constant_nodes"] = e.constant_nodes;

  // The listing first: an entry is visible (its JSON renamed into place) only with it. A full
  // disk costs the next process a cold compile, nothing more.
  std::string text = j.dump() + "\n";
  if (write_atomically(entry_path(key, ".cpp"), e.source)) write_atomically(entry_path(key), text);
  if (RemoteCache* remote = RemoteCache::current())
    remote->put(RemoteCache::Kind::model, key,
                pack_files({{"entry.json", text}, {"source.cpp", e.source}}));
}

std::vector<std::shared_ptr<const Tensor>> graph_constants(const Graph& graph) {
  std::vector<std::shared_ptr<const Tensor>> out;
  for (const auto& n : graph.nodes())
    if (n->op_name() == "constant") out.push_back(n->data);
  return out;
}

std::optional<std::vector<int>> constant_positions(
    const Graph& graph, const std::vector<std::shared_ptr<const Tensor>>& constants) {
  std::vector<std::shared_ptr<const Tensor>> given = graph_constants(graph);
  std::vector<int> out;
  for (const auto& c : constants) {
    int found = -1;
    for (size_t i = 0; i < given.size() && found < 0; ++i)
      if (given[i]->data() == c->data() && given[i]->dtype() == c->dtype() &&
          given[i]->shape() == c->shape())
        found = static_cast<int>(i);
    if (found < 0) return std::nullopt;
    out.push_back(found);
  }
  return out;
}

}  // namespace coil

#include "driver/debug_dir.h"

#include <fstream>

#include <fmt/format.h>

#include "support/check.h"
#include "support/env.h"
#include "support/hash.h"

namespace coil {

namespace fs = std::filesystem;

namespace {

thread_local DebugDir* t_current = nullptr;

}  // namespace

fs::path debug_dir_root(const CompileOptions& options) {
  if (!options.debug_dir.empty()) return options.debug_dir;
  return fs::path(env(EnvVar::debug_dir));
}

std::unique_ptr<DebugDir> DebugDir::open(const Graph& graph, const CompileOptions& options,
                                         std::string_view variant) {
  fs::path root = debug_dir_root(options);
  if (root.empty()) return nullptr;
  // The options that change the generated code, so that a graph compiled two ways (fusion on
  // and off, two ISAs) gets two folders.
  std::vector<std::string> key = {to_text(graph),
                                  options.device,
                                  options.isa,
                                  options.precision,
                                  options.fusion ? "fuse" : "nofuse",
                                  options.store_all_intermediates ? "all" : "",
                                  options.autotune ? "tune" : ""};
  for (const auto& [name, value] : options.sizes) key.push_back(fmt::format("{}={}", name, value));
  if (!variant.empty()) key.push_back(fmt::format("variant {}", variant));
  fs::path dir = root / ("graph-" + hash_fields(key).substr(0, 12));
  std::error_code ec;
  fs::remove_all(dir, ec);  // a stale folder of an earlier compile of the same graph
  fs::create_directories(dir, ec);
  COIL_USER_CHECK(!ec, "debug directory {}: cannot create it: {}", dir.string(), ec.message());
  std::unique_ptr<DebugDir> out(new DebugDir(dir));
  if (!variant.empty()) out->write("variant.txt", std::string(variant) + "\n");
  return out;
}

DebugDir::DebugDir(fs::path path)
    : path_(std::move(path)),
      capture_({LogChannel::fusion, LogChannel::plan, LogChannel::autotune}),
      outer_(t_current) {
  t_current = this;
}

DebugDir::~DebugDir() {
  t_current = outer_;
}

DebugDir* DebugDir::current() {
  return t_current;
}

void DebugDir::write(const fs::path& file, std::string_view text) const {
  fs::path p = path_ / file;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary);
  out << text;
  out.close();
  COIL_USER_CHECK(!ec && out.good(), "debug directory: cannot write {}", p.string());
}

void DebugDir::after_pass(std::string_view pass, std::string_view extension,
                          std::string_view text) {
  write(fmt::format("{:02}-{}.{}", next_pass_++, pass, extension), text);
}

void DebugDir::write_logs() const {
  write("fusion.txt", capture_.text(LogChannel::fusion));
  write("plan.txt", capture_.text(LogChannel::plan));
  write("autotune.txt", capture_.text(LogChannel::autotune));
}

}  // namespace coil

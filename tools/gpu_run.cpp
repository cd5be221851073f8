#include "gpu_run.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "runtime/code_cache.h"
#include "runtime/toolchain.h"
#include "support/check.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/npy.h"

namespace coil::cli {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

/// The interpreter: $COIL_PYTHON (a path, or a name looked up on PATH), default python3.
std::string find_python() {
  std::string name = env(EnvVar::python);
  bool from_env = !name.empty();
  if (!from_env) name = "python3";
  if (name.find('/') != std::string::npos) {
    COIL_USER_CHECK(::access(name.c_str(), X_OK) == 0 && !fs::is_directory(name),
                    "COIL_PYTHON={}: not an executable file (it should name a Python with torch "
                    "and triton)",
                    name);
    return name;
  }
  std::stringstream path(env_string("PATH"));
  for (std::string dir; std::getline(path, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate))
      return candidate.string();
  }
  user_error(
      "--device cuda runs the generated module with Python, but '{}' is not on PATH: set "
      "COIL_PYTHON to a Python with torch (a CUDA build) and triton",
      name);
}

/// coil's python/ directory (coil_runtime) for the child's PYTHONPATH: $COIL_PYTHONPATH, else
/// the source tree's python/ (COIL_SOURCE_PYTHON_DIR, set by CMake) if it is still there, else
/// ./python (a binary built elsewhere, run from a checkout of the repository).
std::string find_python_dir() {
  std::string given = env(EnvVar::pythonpath);
  if (!given.empty()) return given;
  std::vector<fs::path> tried;
#ifdef COIL_SOURCE_PYTHON_DIR
  tried.emplace_back(COIL_SOURCE_PYTHON_DIR);
#endif
  tried.push_back(fs::absolute("python"));
  for (const auto& d : tried) {
    std::error_code ec;
    if (fs::is_directory(d / "coil_runtime", ec)) return d.string();
  }
  std::vector<std::string> names;
  for (const auto& d : tried) names.push_back(d.string());
  user_error(
      "--device cuda needs coil's Python runtime (python/coil_runtime), found in none of {}: set "
      "COIL_PYTHONPATH to the python/ directory of a coil checkout",
      fmt::join(names, ", "));
}

/// The last `n` lines of `text`.
std::string tail_lines(const std::string& text, size_t n) {
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (size_t k = 0; k < n && pos != std::string::npos && pos > 0; ++k)
    pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

/// Turns a failed run.py into a coil::Error that says what to do.
[[noreturn]] void python_failed(const ProcessResult& r, const std::string& python,
                                const std::string& python_dir, const fs::path& module,
                                const std::string& rerun, const fs::path& work) {
  const std::string& out = r.output;
  auto has = [&](const char* s) { return out.find(s) != std::string::npos; };
  std::string kept = fmt::format("the inputs are kept in {}; to rerun: {}", work.string(), rerun);
  auto env_error = [&](const char* s) {  // the inputs would not help: remove them
    if (!has(s)) return false;
    std::error_code ec;
    fs::remove_all(work, ec);
    return true;
  };
  if (env_error("No module named 'torch'"))
    user_error(
        "--device cuda: {} has no torch; set COIL_PYTHON to a Python with torch (a CUDA "
        "build) and triton",
        python);
  if (env_error("No module named 'triton'"))
    user_error(
        "--device cuda: {} has no triton (pip install triton, or set COIL_PYTHON to a "
        "Python with torch and triton)",
        python);
  if (env_error("No module named 'coil_runtime'"))
    user_error(
        "--device cuda: {} does not hold coil_runtime; set COIL_PYTHONPATH to coil's "
        "python/ directory",
        python_dir);
  std::smatch m;
  static const std::regex no_cuda("error: (no CUDA device[^\\n]*)");
  if (std::regex_search(out, m, no_cuda) && env_error("error: no CUDA device"))
    user_error("--device cuda needs an NVIDIA GPU, and {} sees none ({}); the module is in {}",
               python, m.str(1), module.parent_path().string());
  if (r.status == 2) {  // run.py's usage and input errors: its "error: ..." lines
    std::string lines;
    std::stringstream ss(out);
    for (std::string l; std::getline(ss, l);)
      if (l.rfind("error: ", 0) == 0 || l.rfind("usage: ", 0) == 0) lines += "\n  " + l;
    user_error("the Python runtime refused the run (exit 2):{}\n{}",
               lines.empty() ? "\n" + tail_lines(out, 20) : lines, kept);
  }
  user_error("the Python runtime failed (exit {}); the end of its output:\n{}\n{}", r.status,
             tail_lines(out, 25), kept);
}

}  // namespace

GpuModule write_gpu_module(const Prepared& p) {
  fs::path root = cache_root() / "cuda";
  fs::path tmp =
      root / fmt::format("tmp-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
  CompileOptions o = p.options;
  o.output_dir = tmp;
  GpuModule m;
  m.report = generate_gpu_module(p.graph, o);
  m.dir = root / checksum(m.report.source).substr(0, 16);
  std::error_code ec;
  if (fs::exists(m.dir / "module.py", ec)) {
    m.cache_hit = true;
    fs::remove_all(tmp, ec);
    return m;
  }
  fs::rename(tmp, m.dir, ec);
  if (ec) {  // another process won the race (or a stale partial directory is in the way)
    if (!fs::exists(m.dir / "module.py")) {
      fs::remove_all(m.dir, ec);
      fs::rename(tmp, m.dir);
    } else {
      fs::remove_all(tmp, ec);
    }
  }
  return m;
}

std::vector<ValueSpec> graph_outputs(const Prepared& p) {
  std::vector<ValueSpec> v;
  for (const auto& o : p.graph.outputs()) {
    const Node& n = p.graph.node(o.node);
    std::vector<int64_t> shape;
    for (const auto& d : n.type.shape) {
      auto c = d.as_const();
      auto b = c ? p.options.sizes.end() : p.options.sizes.find(d.symbol_name());
      shape.push_back(c ? *c : b != p.options.sizes.end() ? b->second : -1);
    }
    v.push_back({o.name, n.type.dtype, shape, o.source_name});
  }
  return v;
}

GpuResult run_gpu_module(const Prepared& p, const GpuModule& gm, int runs, int warmup,
                         const std::string& trace) {
  std::string python = find_python();
  std::string python_dir = find_python_dir();
  fs::path work = cache_root() / "cuda" /
                  fmt::format("run-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
  fs::create_directories(work / "inputs");
  std::vector<std::string> argv{python, "-m", "coil_runtime.run", (gm.dir / "module.py").string(),
                                "--inputs"};
  const auto& ids = p.graph.inputs();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& name = p.graph.node(ids[i]).name;
    fs::path f = work / "inputs" / fmt::format("{}-{}.npy", i, name);
    write_npy(f, p.inputs[i]);
    argv.push_back(name + "=" + f.string());
  }
  argv.insert(argv.end(), {"--outputs-dir", (work / "outputs").string(), "--json"});
  if (runs > 0)
    argv.insert(argv.end(), {"--bench", std::to_string(runs), "--warmup", std::to_string(warmup)});
  if (!trace.empty())
    argv.insert(argv.end(), {"--profile", "--trace", fs::absolute(trace).string()});

  std::string old_path = env_string("PYTHONPATH");
  std::string py_path = python_dir + (old_path.empty() ? "" : ":" + old_path);
  ::setenv("PYTHONPATH", py_path.c_str(), 1);
  std::string rerun = fmt::format("PYTHONPATH={} {}", py_path, command_string(argv));
  ProcessResult r = run_process(argv);
  if (r.status != 0) python_failed(r, python, python_dir, gm.dir / "module.py", rerun, work);

  // The last line that parses as a JSON object is run.py's report; other lines (logs) are
  // passed on.
  GpuResult res;
  std::stringstream ss(r.output);
  std::vector<std::string> other;
  for (std::string l; std::getline(ss, l);) {
    if (!l.empty() && l[0] == '{') {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (!j.is_discarded() && j.contains("outputs")) {
        res.report = j;
        continue;
      }
    }
    other.push_back(l);
  }
  for (const auto& l : other) fmt::print(stderr, "{}\n", l);  // logs: stdout stays parseable
  COIL_USER_CHECK(res.report.is_object(),
                  "the Python runtime printed no JSON report; its output:\n{}\nto rerun: {}",
                  tail_lines(r.output, 25), rerun);
  std::vector<ValueSpec> specs = graph_outputs(p);
  const auto& outs = res.report["outputs"];
  COIL_USER_CHECK(outs.size() == specs.size(), "the module returned {} outputs, the graph has {}",
                  outs.size(), specs.size());
  for (const auto& o : outs) res.outputs.push_back(read_npy(o["file"].get<std::string>()));
  std::error_code ec;
  fs::remove_all(work, ec);
  return res;
}

void export_gpu_module(const Prepared& p, const std::string& dir) {
  CompileOptions o = p.options;
  o.output_dir = dir;
  CompileReport report = generate_gpu_module(p.graph, o);
  std::string python = find_python();
  std::string python_dir = find_python_dir();
  fs::path module = fs::path(dir) / "module.py";
  std::vector<std::string> argv{python, "-m", "coil_runtime.aot", module.string(), "--out", dir};
  std::string old_path = env_string("PYTHONPATH");
  std::string py_path = python_dir + (old_path.empty() ? "" : ":" + old_path);
  ::setenv("PYTHONPATH", py_path.c_str(), 1);
  std::string rerun = fmt::format("PYTHONPATH={} {}", py_path, command_string(argv));
  ProcessResult r = run_process(argv);
  if (r.status == 3) {  // aot.py: what a launch plan cannot express
    std::string lines;
    std::stringstream ss(r.output);
    for (std::string l; std::getline(ss, l);)
      if (l.rfind("error: ", 0) == 0) lines += (lines.empty() ? "" : "; ") + l.substr(7);
    unsupported_error("{}", lines.empty() ? tail_lines(r.output, 10) : lines);
  }
  if (r.status != 0) python_failed(r, python, python_dir, module, rerun, dir);
  // The module knows its inputs by position: the manifest gets the graph's names.
  fs::path manifest_path = fs::path(dir) / "gpu_manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  const auto& ins = p.graph.inputs();
  const auto& outs = p.graph.outputs();
  COIL_ASSERT(manifest["inputs"].size() == ins.size() && manifest["outputs"].size() == outs.size(),
              "GPU export: the module's inputs or outputs differ from the graph's");
  for (size_t i = 0; i < ins.size(); ++i) {
    manifest["inputs"][i]["name"] = p.graph.node(ins[i]).name;
    manifest["inputs"][i]["source_name"] = p.graph.node(ins[i]).source_name;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    manifest["outputs"][i]["name"] = outs[i].name;
    manifest["outputs"][i]["source_name"] = outs[i].source_name;
  }
  std::ofstream(manifest_path) << manifest.dump(1) << "\n";
  fmt::print("exported {} kernels for {} to {}: {}", report.kernels.size(), "cuda", dir,
             tail_lines(r.output, 1));
}

void print_gpu_module(const GpuModule& gm) {
  fmt::print("module: {}/module.py ({} kernels, generated in {:.1f} ms{})\n", gm.dir.string(),
             gm.report.kernels.size(), gm.report.total_seconds * 1e3,
             gm.cache_hit ? ", unchanged" : "");
  std::fflush(stdout);  // before the child's output and any error
}

}  // namespace coil::cli

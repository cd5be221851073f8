// The `coil` command-line tool's commands (tools/coil_main.cpp parses the arguments).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace coil::cli {

/// The exit codes of every command (README.md, docs/errors.md).
enum ExitCode : int {
  kExitOk = 0,           // success
  kExitCheckFailed = 1,  // a check or comparison failed (check, demo)
  kExitUsage = 2,        // a bad command line, file, model or environment: coil::Error
  kExitUnsupported = 3,  // a valid model or option coil cannot handle: coil::UnsupportedError
  kExitInternal = 4,     // a bug in coil: coil::InternalError or any other exception
};

/// Options shared by compile/run/check/bench.
struct ModelArgs {
  std::string model;                // a .coil text graph or an .onnx model
  std::vector<std::string> sizes;   // "s0=128"
  std::vector<std::string> inputs;  // "x=path.npy"
  uint64_t seed = 0;
  std::string device = "cpu";          // cpu | cuda
  std::string precision = "highest";   // highest | high (CompileOptions::precision)
  std::string mode = "default";        // default | max-autotune (CompileOptions::mode)
  std::string remote_cache;            // redis://HOST:PORT/DB (CompileOptions::remote_cache)
  bool quiet = false;                  // no progress line (support/progress.h)
  std::string debug_dir;               // CompileOptions::debug_dir (--debug-dir)
  bool save_kernel_values = false;     // run/check: CompiledModel::save_kernel_values first
  bool write_graph = false;            // compile: CompileOptions::write_graph
  bool graph_without_weights = false;  // compile: write_graph with graph_weights = false
};

/// `coil minify`'s own options (tools/minify.cpp).
struct MinifyArgs {
  std::string output;  // REPRO.coil
  int jobs = 2;        // candidates evaluated at once, each in a forked child
  int max_evaluations = 200;
  int timeout_s = 60;  // per candidate
  int threads = 2;     // OpenMP threads of the compiled kernels
};

int cmd_demo(int runs);
int cmd_ops(bool markdown);
int cmd_compile(const ModelArgs& a, const std::string& out_dir);
int cmd_export(const ModelArgs& a, const std::string& out_dir);
/// MODEL may be a directory `coil export` wrote: then it runs with the runtime alone.
int cmd_run(const ModelArgs& a, const std::string& out_dir);
int cmd_check(const ModelArgs& a, const std::vector<std::string>& expects, double rtol,
              double atol);
/// `coil bench`'s options beyond the model's.
struct BenchArgs {
  int threads = 0, runs = 20, warmup = 3;
  bool json = false;
  bool profile = false;              // per-kernel table and a Chrome trace
  std::string trace = "trace.json";  // where --profile writes the trace
};
int cmd_bench(const ModelArgs& a, const BenchArgs& b);
int cmd_minify(const ModelArgs& a, const MinifyArgs& m);
/// Throws a coil::InternalError, or a std::exception of no coil class (the hidden command
/// `coil debug-internal-error` that tests the exit code of each).
int cmd_debug_internal_error(bool std_exception);

}  // namespace coil::cli

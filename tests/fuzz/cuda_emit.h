// coil_fuzz --emit-cuda DIR: the first stage of the Triton mode (tests/fuzz/README.md,
// "Triton"). Each graph (or batch of graphs, compiled as one: fuzz/batch.h) becomes a case
// directory (fuzz/cuda_case.h) holding its Triton modules, inputs and reference outputs;
// tests/fuzz/run_triton.py then runs the cases on a GPU. Nothing here needs a GPU, torch or
// triton: generating a module is code generation only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace coil::fuzz {

/// One graph to emit: generated (key = its index) or read from a .coil case (key = its name).
struct EmitItem {
  std::string key;
  std::string command;         // the coil_fuzz command that runs it on the CPU
  std::filesystem::path file;  // empty for a generated graph
  uint64_t graph_seed = 0;
};

struct CudaEmitOptions {
  std::filesystem::path dir;  // the case directories go here
  std::filesystem::path out;  // failures.tsv, saved failing cases, summary.json; default DIR/emit
  int batch = 1;              // graphs per case
  int jobs = 1;               // cases emitted at once, each in a forked child
  int timeout_s = 60;         // per case
  double time_limit = 0;      // start no more cases after this many seconds (0: no limit)
  bool quiet = false;
};

/// Emits every item; prints a summary (graphs per class, cases) and writes it to
/// OUT/summary.json. Exit status: 0 when no graph failed (an unsupported or rejected graph is
/// not a failure), 1 otherwise.
int run_cuda_emit(const std::vector<EmitItem>& items, const CudaEmitOptions& options);

}  // namespace coil::fuzz

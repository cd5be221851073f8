// `coil run|check|bench --device cuda`: the generated Triton module, run on the model's inputs
// by python/coil_runtime/run.py in a child process (a Python with torch and triton), its
// outputs read back. See docs/user-guide.md for COIL_PYTHON and COIL_PYTHONPATH.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "prepare.h"

namespace coil::cli {

struct GpuModule {
  std::filesystem::path dir;  // holds module.py, report.json, graph.coil
  CompileReport report;
  bool cache_hit = false;  // the same module was already there
};

/// Generates the module into <cache>/cuda/<hash of module.py>/ (written to a temporary
/// directory, then renamed: concurrent runs of one model do not see half-written files).
GpuModule write_gpu_module(const Prepared& p);

/// The generated module's directory, for the user.
void print_gpu_module(const GpuModule& gm);

/// The graph's outputs (name, dtype, bound shape) in order.
std::vector<ValueSpec> graph_outputs(const Prepared& p);

struct GpuResult {
  std::vector<Tensor> outputs;  // read back from the files run.py wrote
  nlohmann::json report;        // run.py's --json line
};

/// Runs the module on p.inputs through `python -m coil_runtime.run --json` (plus --bench
/// runs/--warmup when runs > 0, and --profile --trace `trace` when `trace` is not empty), and
/// reads its outputs back.
GpuResult run_gpu_module(const Prepared& p, const GpuModule& gm, int runs = 0, int warmup = 0,
                         const std::string& trace = "");

/// `coil export MODEL --device cuda -o DIR`: the module written to DIR, then exported ahead of
/// time by `python -m coil_runtime.aot` (cubins and a launch plan that coil::GpuExportedModel
/// runs with no Python; docs/deploy.md). Prints the exporter's summary line.
void export_gpu_module(const Prepared& p, const std::string& dir);

}  // namespace coil::cli

// The front half of compile(): graph -> decomposed graph -> loop IR -> schedule -> C++ source,
// without invoking the C++ compiler. Golden tests and `coil compile` use it directly.
#pragma once

#include <chrono>

#include "codegen/cpp/cpp_module.h"
#include "codegen/triton/triton_module.h"
#include "coil/coil.h"
#include "ir/ir.h"
#include "sched/scheduler.h"

namespace coil {

struct IsaInfo;

/// Records the wall time of each compile stage into the report (COIL_LOGS=perf prints them).
class StageTimer {
 public:
  explicit StageTimer(CompileReport& r) : report_(r), start_(clock::now()), last_(start_) {}
  /// Ends the stage that began at the last mark (or at construction).
  void mark(const char* stage);
  /// Sets the report's total.
  void finish();

 private:
  using clock = std::chrono::steady_clock;
  CompileReport& report_;
  clock::time_point start_, last_;
};

/// The vector ISA generated code targets: options.isa, else the host's (runtime/isa.h).
const IsaInfo& target_isa(const CompileOptions& options);

/// CompileOptions::mode must be "default" or "max-autotune" (coil::Error naming it otherwise).
void check_mode(const std::string& mode);

/// "<graph>" of the generated module's header: its inputs and outputs with their types.
std::string describe_graph(const Graph& graph);

struct GeneratedProgram {
  Graph graph;  // decomposed, sizes bound
  IrProgram program;
  Schedule schedule;
  CppModule module;     // device "cpu"
  TritonModule triton;  // device "cuda"
};

/// A size-generic compile (driver/dynamic_model.h): the graph's size symbols, in this order,
/// are renamed ks0, ks1, ... and stay symbolic through lowering, scheduling and the C++ code,
/// which takes their values per call. The caller holds a sym::SizeHintScope with the values of
/// ks0, ... that the planning heuristics use.
struct SizeGeneric {
  std::vector<std::string> symbols;
};

/// Runs every stage up to code generation for options.device; `timer` (optional) records each
/// stage's time. The GPU target skips matmul autotuning (it measures CPU candidates) and keeps
/// matmul epilogues out of templates (they are library calls there).
GeneratedProgram generate_program(const Graph& graph, const CompileOptions& options,
                                  StageTimer* timer = nullptr,
                                  const SizeGeneric* size_generic = nullptr);

/// generate_program for device "cuda": where `options.sizes` leaves some of the graph's input
/// sizes unbound, one size-generic Triton module (its kernels take the sizes as arguments, its
/// wrapper binds them from the inputs and checks its guards per call; docs/dynamic-shapes.md),
/// refused (coil::UnsupportedError) where its text would depend on the sizes.
GeneratedProgram generate_gpu_program(const Graph& graph, const CompileOptions& options,
                                      StageTimer* timer = nullptr);

}  // namespace coil

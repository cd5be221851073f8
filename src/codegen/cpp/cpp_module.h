// The whole generated C++ translation unit of a graph: the runtime header include, every
// kernel, and the wrapper `coil_graph_run` that binds buffers and calls kernels in order.
// One graph compiles into one shared object.
#pragma once

#include <string>
#include <vector>

#include "codegen/cpp/cpp_kernel.h"
#include "sched/scheduler.h"

namespace coil {

/// Signature of the generated entry point. `inputs`, `outputs` and `constants` hold one data
/// pointer per graph input, output and constant; `arena` holds MemoryPlan::arena_bytes.
using GraphRunFn = void (*)(void* const* inputs, void* const* outputs, void* const* constants,
                            char* arena);
inline constexpr const char* kGraphRunSymbol = "coil_graph_run";

struct CppModule {
  std::string source;
  std::vector<CppKernelSource> kernels;  // in call order
};

CppModule generate_cpp_module(const IrProgram& program, const Schedule& schedule,
                              const CppTarget& target);

}  // namespace coil

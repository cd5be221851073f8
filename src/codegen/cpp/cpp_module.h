// The whole generated C++ source of a graph: the runtime header include, every kernel, and the
// wrapper `coil_graph_run` that binds buffers and calls kernels in order. One graph compiles
// into one shared object, from one translation unit or, for a large module, from several
// compiled in parallel (split_translation_units; runtime/code_cache.h links them).
#pragma once

#include <string>
#include <vector>

#include "codegen/cpp/cpp_kernel.h"
#include "kernels/coil_module_abi.h"
#include "sched/scheduler.h"

namespace coil {

struct CppModule {
  /// The module as one translation unit: the listing that goldens, module.cpp and logs show.
  std::string source;
  std::string prelude;   // the start of `source`, before the first kernel
  std::string includes;  // the start of `prelude`: what every translation unit starts with
  std::string wrapper;   // the end of `source`, after the last kernel: packing, coil_graph_run
  bool has_run_checks = false;  // kernels report into the run's coil_run_error (a parameter)

  std::vector<CppKernelSource> kernels;  // in call order
  bool uses_extern_libraries = false;    // link with oneDNN / OpenBLAS (kernels/coil_extern.h)
};

CppModule generate_cpp_module(const IrProgram& program, const Schedule& schedule,
                              const CppTarget& target);

/// The byte offsets of the arena buffers of a size-generic module at the sizes `schedule` was
/// planned for: the `arena_offsets` its coil_graph_run_sized takes.
std::vector<int64_t> arena_offsets(const IrProgram& program, const Schedule& schedule);

/// Kernel source bytes a translation unit of its own is worth. Each unit pays a fixed cost (g++
/// start, the precompiled header's load, coil_extern.h: 0.44 s, AVX-512, AMD EPYC) and a split
/// module a link (0.17 s); kernels compile at about 75 KB/s. A unit of 20 KB takes 0.27 s on its
/// kernels, less than its fixed cost, but on free cores the fixed costs are paid in parallel and
/// the latency still drops (efficientnet_b0, 150 KB: 7 units on 16 cores). Modules under 40 KB
/// stay one unit; a 2-core machine splits larger ones into 2 whatever the size.
inline constexpr size_t kMinTranslationUnitBytes = 20000;

/// The number of translation units to compile `m` as with `threads` compile threads: one per
/// kMinTranslationUnitBytes of kernel source, at most `threads` and the kernel count, at least 1.
int translation_unit_count(const CppModule& m, int threads);

/// `m` as `parts` translation units that link into one shared object with the symbols of
/// `m.source`: each holds a run of kernels (in call order, balanced by source size) after
/// `m.includes`; the last one also holds the wrapper, with declarations of the kernels the
/// others define. The run-time check state is shared between them with hidden visibility, so
/// the shared object exports what the single unit exports. `parts` == 1 gives {m.source}.
std::vector<std::string> split_translation_units(const CppModule& m, int parts);

}  // namespace coil

// Standalone kernel repros (the seed's favourite debugging tip: a generated kernel saved as a
// .cpp with a main() compiles and runs alone in seconds). For every kernel of a CPU module the
// debug directory (driver/debug_dir.h) gets
//
//   kernels/<kernel>/kernel.cpp   the module's prelude, the kernel as generated, and a main()
//                                 that loads or generates its arguments, runs it, compares
//                                 its outputs with the saved ones, and prints time and GB/s
//   kernels/<kernel>/coil_repro.h main()'s helpers (loading, random inputs, compare, timing)
//   kernels/<kernel>/include/     the kernel runtime headers (coil_vec.h, ...)
//   kernels/<kernel>/run.sh       builds kernel.cpp with g++ alone (coil's flags) and runs it;
//                                 exit 0 when every saved output matches (or none is saved)
//   kernels/<kernel>/data/        the arguments of one real call, when saved (below):
//                                 <param>.bin before the call, <param>.expected.bin after it
//
// Without data/ main() generates its inputs (floats uniform in [-1, 1), integers 0, booleans
// random; packed weights random) and only times the kernel. The values of a real call are saved
// by CompiledModel::save_kernel_values (CLI: --save-kernel-values of `coil check` and
// `coil run`): it runs the module kernel by kernel (driver/kernel_calls.h), as coil_graph_run
// does, and writes what each kernel reads before it runs and what it wrote after.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_module.h"
#include "codegen/triton/triton_module.h"
#include "driver/kernel_calls.h"
#include "ir/ir.h"
#include "runtime/toolchain.h"
#include "sched/scheduler.h"

namespace coil {

class DebugDir;

/// Writes kernels/<kernel>/ for every kernel of `module` into `dir`.
void write_cpu_kernel_repros(const DebugDir& dir, const IrProgram& program,
                             const Schedule& schedule, const CppModule& module,
                             const CompileFlags& flags);

/// Writes kernels/<kernel>/kernel.py (and coil_runtime/, the launcher it imports) for every
/// Triton kernel of `module`: it generates inputs, runs the kernel and benchmarks it with
/// torch and triton only (Inductor's `python output_code.py -k`).
void write_triton_kernel_repros(const DebugDir& dir, const TritonModule& module);

/// Runs the kernels one by one, writing each kernel's arguments into its repro below
/// `graph_dir` (the DebugDir's path): data/<param>.bin before its call, and for outputs
/// data/<param>.expected.bin after it.
void save_kernel_values(const KernelCaller& kernels, const std::filesystem::path& graph_dir);

}  // namespace coil

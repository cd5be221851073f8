// CppKernel: prints one fused kernel (sched/fusion.h: nests under shared outer loops) as one
// readable `extern "C"` C++ function. Scalar code; explicit SIMD comes with CppVecKernel.
//
// Parallelism (Inductor's rule, inductor.md §1.7): OpenMP on the outermost loops, as many as
// needed to give >= 2x threads of parallel iterations without chunks under 512 elements; no
// nested regions; the thread count is never written into the source (OpenMP reads it at run
// time). The rule uses a fixed hint of kParallelThreadsHint threads so that the generated code
// is the same on every machine.
//
// Reductions are bitwise identical for any thread count: each output element is reduced by
// one thread in loop order, or, when a lone reduction has too few outputs to parallelize over,
// its outermost reduction loop is cut into a fixed number of chunks (a function of the sizes
// only) whose partials are combined in chunk order.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_args.h"
#include "codegen/kernel_names.h"
#include "sched/scheduler.h"

namespace coil {

constexpr int kParallelThreadsHint = 16;
/// Inductor's cpp.min_chunk_size: fewer elements per thread than this are not worth a thread.
constexpr int64_t kMinChunkSize = 512;
/// A reduction with fewer outputs than the thread hint and at least this many reduced
/// elements per output is split into chunks over its outermost reduction loop.
constexpr int64_t kSplitReductionMinElements = 8192;
/// Elements per chunk of a split reduction (before rounding to whole r0 iterations).
constexpr int64_t kSplitReductionChunkElements = 32768;
/// Local row buffers up to this many bytes in total live on the stack of each outer
/// iteration; larger ones are allocated once per thread.
constexpr int64_t kMaxStackLocalBytes = 32 * 1024;

/// A loop nest that re-reads the row an earlier nest of its kernel read, and calls vector math
/// on it, prefetches the row this many bytes ahead (at least the next row), for rows of at most
/// kPrefetchMaxRowBytes (cpp_kernel.cpp: mark_revisited_rows).
constexpr int64_t kPrefetchAheadBytes = 8 * 1024;
constexpr int64_t kPrefetchMaxRowBytes = 16 * 1024;

/// Number of leading loops to parallelize (0 = serial), Inductor's decide_parallel_depth.
int decide_parallel_depth(const std::vector<int64_t>& ranges, int64_t total_work, int threads);

/// A constant operand that the module packs once at load time (coil_graph_pack). The packed
/// copy is a kernel parameter of its own (`param`, after the KernelArgs), so that the kernel's
/// other reads of `buffer` (a matmul's A operand reading the same constant as B, say) still see
/// the plain layout. `setup`, then `pack` with {src} and {dst} replaced by typed pointers, fills
/// `elements` (a C++ expression) of `elem_type`.
struct PackedOperand {
  int buffer = -1;
  std::string param;  // packed_ptr0, ...
  std::string elem_type;
  std::string setup, pack, elements;
  /// Its position in the module's packed region (coil_graph_packed_layout), set by
  /// generate_cpp_module; copies shared between kernels have the same slot.
  int slot = -1;
  /// Two kernels share a packed copy only when they pack the same buffer the same way.
  std::string layout_key() const {
    return std::to_string(buffer) + "|" + elem_type + "|" + setup + "|" + pack + "|" + elements;
  }
};

struct CppKernelSource {
  std::string name;       // cpp_fused_<ops>_<n>
  std::string code;       // the function definition
  std::string signature;  // its first line, `extern "C" void <name>(<params>)`
  std::vector<KernelArg> args;
  std::vector<std::string> origins;   // graph nodes, "t3 (add)"
  std::vector<PackedOperand> packed;  // constants packed at load time, parameters after `args`
  // The last parameter is `coil::RunError& coil_run_error`, the record of the call's first
  // failing run-time check (every kernel of a module with run-time checks takes it).
  bool run_error = false;
  /// The size symbols the kernel reads ("ks0", ...; a size-generic module's, CppTarget::
  /// size_symbols): `const int64_t` parameters after all the others.
  std::vector<std::string> size_params;
};

/// Target of generated CPU code.
struct CppTarget {
  /// f32 lanes of the ISA's vectors (coil::kFloatLanes under its macro); 1 disables SIMD.
  int vec_lanes = 1;
  /// A size-generic module (driver/dynamic_model.h): the number of size symbols ks0, ks1, ...
  /// that its expressions may hold, whose values the module takes per call
  /// (coil_graph_run_sized). 0: every size is a constant (coil_graph_run).
  int size_symbols = 0;
};

/// The name of size symbol `i` in a size-generic module's code, "ks<i>" (Inductor's name).
std::string size_symbol_name(int i);

/// Generates kernel `k` of `schedule`.
CppKernelSource generate_cpp_kernel(const IrProgram& program, const Schedule& schedule, size_t k,
                                    const CppTarget& target);

}  // namespace coil

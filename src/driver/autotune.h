// Autotuning of matmuls: for each f32 matmul of a program, the choice between coil's template
// (fused epilogue, packed weights) and a library GEMM (oneDNN's dnnl_sgemm, OpenBLAS's
// cblas_sgemm, each followed by a separate epilogue kernel) is made by timing every candidate
// on the real shape, here, at compile time — as Inductor's max-autotune does.
//
//   * The template is timed through a small benchmark module built from the same runtime
//     header and ISA flags as generated code (compiled once per machine, through the code
//     cache); the libraries through runtime/extern_timing.h. All at the thread count the
//     model will run with (omp_get_max_threads()).
//   * The template keeps a matmul unless a library is more than kLibraryMargin faster: the
//     template also fuses the epilogue, which the library path pays for separately.
//   * Results are cached on disk (<cache>/autotune/<key>: candidates and their times), keyed by
//     the ISA, shape, operand transposes, whether B is packed at load time and the thread count;
//     a second compile of the same shape costs a file read. Processes compiling the same shape
//     at once time it once, under a per-key flock (<key>.lock); the first timings written win
//     (link(), never replaced), so that every process of a deployment runs the same kernels.
//   * COIL_LOGS=autotune prints every candidate and its time; COIL_MATMUL=template|dnnl|openblas
//     forces a choice (auto: measure, the default).
//
// Only two-dimensional (after batch folding) f32 products whose operands a BLAS can address
// (one unit stride each) have candidates; batched and bf16 products always use the template.
#pragma once

#include "ir/ir.h"

namespace coil {

struct IsaInfo;

/// A library must be this much faster than the template to be chosen.
constexpr double kLibraryMargin = 0.05;

struct AutotuneOptions {
  bool enabled = true;  // false: the template everywhere, nothing timed (golden tests)
};

/// Sets MatmulSpec::impl of every matmul of `program`, and turns the computations given to a
/// library into Extern computations.
void autotune_matmuls(IrProgram& program, const IsaInfo& isa, const AutotuneOptions& options);

/// The fastest sample (seconds) of the template on an M x N x K product on `isa` (A with strides
/// a_rs, a_cs; B packed ahead when `b_packed_ahead`, else packed in each call), for tests and
/// benches.
double time_template_matmul(const IsaInfo& isa, int64_t m, int64_t n, int64_t k, bool a_transposed,
                            bool b_packed_ahead, int reps = 5, double max_seconds = 0.1);

}  // namespace coil

// Autotuning of matmuls: for each f32 matmul of a program, the choice between coil's template
// (fused epilogue, packed weights) and a library GEMM (oneDNN's dnnl_sgemm, OpenBLAS's
// cblas_sgemm, each followed by a separate epilogue kernel). Two modes (CompileOptions::mode,
// as torch.compile's):
//
//   * max-autotune: every candidate is timed on the real shape, here, at compile time, as
//     Inductor's max-autotune does (the template through a small benchmark module built from
//     the same runtime header and ISA flags as generated code, once per machine; the libraries
//     through runtime/extern_timing.h; all at the thread count the model will run with,
//     omp_get_max_threads()).
//   * default: decide without timing wherever the answer is known, and time little where it
//     is not. In order: the timings of an earlier full search of the shape; the decision of a
//     measured shape of the same size bucket (sizes rounded up to powers of two; written by
//     every measurement to <cache>/autotune-buckets/); the template when B is a constant and
//     the model runs on at most kTemplateUntimedMaxThreads threads (packed once at load; on the
//     products measured on 2 cores, docs/benchmarks.md, the libraries were no faster and they
//     cannot fuse the epilogue) or the product is smaller than kQuickTimingMinFlops; otherwise
//     a quick search: the template against oneDNN, the fastest of kQuickSamples samples each
//     after a warm-up call.
//
// In both, the template keeps a matmul unless a library is more than kLibraryMargin faster: the
// template also fuses the epilogue, which the library path pays for separately. Timings are
// cached on disk (<cache>/autotune/<key>: candidates and their times), keyed by the ISA, shape,
// operand transposes, whether B is packed at load time and the thread count; a second compile of
// the same shape costs a file read. Processes compiling the same shape at once time it once,
// under a per-key flock (<key>.lock); the first timings written win (link(), never replaced), so
// that every process of a deployment runs the same kernels. COIL_LOGS=autotune prints every
// decision, its candidates and times or the heuristic that made it;
// COIL_MATMUL=template|dnnl|openblas forces a choice (auto: the mode decides, the default).
//
// Only two-dimensional (after batch folding) f32 products whose operands a BLAS can address
// (one unit stride each) have candidates; batched and bf16 products always use the template.
#pragma once

#include "ir/ir.h"

namespace coil {

struct IsaInfo;

/// A library must be this much faster than the template to be chosen.
constexpr double kLibraryMargin = 0.05;

/// Default mode: with a constant B, the template is kept untimed up to this many threads. On the
/// 2-core machine of docs/benchmarks.md the libraries were no faster there; on the 16-core GPU
/// host oneDNN beat the template on a GPT block's products (1.23 against 1.38 ms a call), so
/// more threads time the choice (quick search).
constexpr int kTemplateUntimedMaxThreads = 2;

/// Default mode's quick search: samples per candidate (the fastest counts; fewer when they
/// would take more than 50 ms together).
constexpr int kQuickSamples = 3;

/// Default mode: products of fewer operations than this (2*M*N*K) keep the template untimed:
/// their candidates differ by microseconds, and the template fuses the epilogue.
constexpr double kQuickTimingMinFlops = double{1 << 20};

/// Default mode: a product of at most kPerCallPackMaxRows rows of A against a B that the
/// template packs per call (an input, not a constant) of at least kPerCallPackMinElements goes
/// to oneDNN untimed, however small: the template reads and writes all of B to pack it for at
/// most 8 uses of each element, where oneDNN reads B in place. Measured with max-autotune (AMD
/// EPYC, 2 cores, B [768, 512]): M = 1, 2, 4, 8 the template 64-88 us, oneDNN 12-54 us (1 and 2
/// threads); M = 16 the template 83 us, oneDNN 94. A 125M Llama's decode step through
/// coil.torch has twelve 1x512x768 products (weights are inputs there) that the small-product
/// rule above kept on the template.
constexpr int64_t kPerCallPackMaxRows = 8;
constexpr int64_t kPerCallPackMinElements = int64_t{1} << 16;

struct AutotuneOptions {
  bool enabled = true;  // false: the template everywhere, nothing timed (golden tests)
  /// CompileOptions::mode: "default" (cached decisions, heuristics, a quick search where
  /// neither decides) or "max-autotune" (every candidate timed on every new shape).
  std::string mode = "default";
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

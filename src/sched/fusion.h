// Fusion: which computations share one kernel (Inductor's Scheduler.fuse_nodes, CPU flavour).
//
// A kernel is a list of loop nests that share their first `outer_depth` loops:
//
//   for x0 in rows:                 <- outer loops, parallelized
//       nest 1: max over r0         <- each nest runs its remaining loops
//       nest 2: for x1: e = exp(x - max)
//       nest 3: sum of e over r0
//       nest 4: for x1: out = e / sum
//
// Four kinds of fusion build it (same-loop, prologue, outer-loop, epilogue), and what they keep
// inside one kernel stays out of memory:
//   * same-loop: computations with identical loops share one nest and one body (horizontal
//     fusion of sum and sum of squares; a pointwise consumer reading its producer at the very
//     index it was stored, which the body then forwards without a load);
//   * prologue: a pointwise nest over [rows, D] followed by a reduction over the same D reading
//     it element by element joins the reduction's loop (softmax's exp(x - max) is computed,
//     stored for later and summed in one pass);
//   * outer-loop: computations whose loops start with the same outer loops become successive
//     nests (softmax, layer_norm: reductions with their pointwise prologue and epilogue);
//   * epilogue: pointwise computations over a matmul template's output join it as its epilogue
//     (nests[0] is the template, nests[1] the merged epilogue body), applied to each output
//     tile while it is in cache. Extern calls (library kernels) fuse with nothing, except two
//     attention calls over the same scores: a logsumexp joins its forward's call as a second
//     result (a training forward makes one pass, not two), and the gradient of v joins the
//     gradient of k (the backward's key-block loop computes P once for both)
//     (attention_calls_share_a_pass);
//   * and intermediates read only inside one kernel become per-row local buffers that never
//     touch memory.
// Legality: only a computation whose inputs are all computed may join (so no cycle and no
// read before write); a buffer passed between nests must be row-partitioned: the rows an outer
// iteration writes are exactly the rows the same iteration reads. Every decision is logged
// (COIL_LOGS=fusion), refusals with their reason.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sched/dependencies.h"
#include "sym/analyzer.h"

namespace coil {

/// A kernel may hold at most this many computations (Inductor: max_fusion_size = 64) ...
constexpr int kMaxFusedComputations = 64;
/// ... and at most this many body ops, so that generated functions stay compilable and readable.
constexpr int kMaxFusedOps = 600;
/// Outer-loop fusion needs at least this many outer iterations when the rows are long:
/// otherwise the fused row loop could not be parallelized, while the unfused reductions can be
/// (split into chunks).
constexpr int64_t kMinFusedRows = 16;
constexpr int64_t kLongRowElements = 8192;

struct LoopNest {
  std::vector<int> computations;  // identical loops; bodies merged in this order
  /// Pointwise prologues merged into a reduction's loop: their innermost loop variable is
  /// renamed to the reduction's (x_k -> r0), per computation.
  std::map<int, std::map<sym::Expr, sym::Expr>> reindex;
};

struct KernelGroup {
  std::vector<LoopNest> nests;
  int outer_depth = 0;             // leading loops shared by all nests
  std::vector<int> local_buffers;  // intermediates that live in one outer iteration only

  std::vector<int> computations() const;
};

struct FusionOptions {
  bool enabled = true;  // false: one computation per kernel
  /// Pointwise epilogues join a matmul template's kernel (both targets: the GPU prints the group
  /// as a triton_tem kernel with the epilogue on the accumulator tile).
  bool fuse_into_templates = true;
};

std::vector<KernelGroup> fuse_computations(const IrProgram& program, const DependencyGraph& deps,
                                           const FusionOptions& options = {});

/// Whether `lse` (an attention_lse computation) is the logsumexp of the rows of `forward` (an
/// attention forward): the same q, k, mask, sizes, scale and causal flag, so the forward's
/// running max and sum are lse's. Such a pair shares one kernel: nests[0] the forward,
/// nests[1] the logsumexp, one call writing both (kernels/coil_attention.h `forward(..., lse)`,
/// the Triton forward template's lse store).
bool attention_pairs_with_logsumexp(const ComputedBuffer& forward, const ComputedBuffer& lse);

/// Whether `grad_v` (an attention_grad wrt v) and `grad_k` (wrt k) differentiate the same
/// attention call (the same q, k, v, mask, out, grad_out, lse, sizes, scale and causal flag),
/// so that one key-block loop computes P (for dV = P^T dO) and dS (for dK = dS^T Q) once. Such
/// a pair shares one kernel: nests[0] the gradient of k, nests[1] that of v
/// (kernels/coil_attention.h `backward_kv`, the Triton grad_kv template).
bool attention_pairs_with_grad_v(const ComputedBuffer& grad_k, const ComputedBuffer& grad_v);

/// Either pair above, `first` being the call that leads the kernel (nests[0]).
bool attention_calls_share_a_pass(const ComputedBuffer& first, const ComputedBuffer& second);

/// Whether `index`, an access to `layout` in the loop variables of a computation with `ranges`,
/// touches only the row selected by the first `depth` loop variables: index =
/// sum_{j<depth} x_j * stride_j + inner, with inner free of x_0..x_{depth-1} and within one row.
/// On success `inner` receives the in-row offset.
bool row_partitioned(const sym::Expr& index, const Layout& layout, int depth,
                     const std::vector<sym::Expr>& ranges,
                     const std::vector<sym::Expr>& reduction_ranges, sym::Expr* inner = nullptr);
/// row_partitioned with the loops' bounds from `loops` (an analyzer that may know a loop on a
/// narrower range than [0, extent): a window split's interior) instead of [0, ranges[j]).
bool row_partitioned(const sym::Expr& index, const Layout& layout, int depth,
                     const std::vector<sym::Expr>& ranges, const sym::Analyzer& loops,
                     sym::Expr* inner = nullptr);

}  // namespace coil

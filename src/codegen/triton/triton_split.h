// Split (two-stage) reductions for the GPU, Inductor's Reduction.create_multilayer: a reduction
// with few outputs and long rows would leave most of the GPU idle (sum(x, dim=0) of
// [65536, 1024] has 1024 outputs, a full sum has one). The row is cut into `splits` chunks;
// a first kernel reduces every (output, chunk) pair into a partial buffer, a second reduces
// each output's partials and runs the original epilogue. A codegen-time rewrite: the schedule
// and the CPU path are unchanged. Not for argmax/argmin (partials would need their indices).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "codegen/triton/triton_plan.h"

namespace coil {

// When to split (Inductor's num_splits, with an H200's 132 SMs in mind): contiguous rows when
// there are too few outputs to give two programs per SM and the rows are long; strided rows
// (outputs side by side, sum over dim 0) when there are too few outputs to fill the GPU's
// threads.
constexpr int64_t kSplitMaxOutputsInner = 256;
constexpr int64_t kSplitMinRowInner = 8192;  // rows strictly longer than this
constexpr int64_t kSplitMaxOutputsOuter = 8192;
constexpr int64_t kSplitMinRowOuter = 4096;
constexpr int64_t kMaxSplits = 128;
constexpr int64_t kSplitChunkInner = 2048;  // target elements per chunk
// Strided rows: 64 interleaved chunks for [65536, 1024] (measured on the H200,
// bench/gpu/experiments/e0_split.py: 128 contiguous chunks of 512 rows, Inductor's split, ran at
// 75.5 us; 64 interleaved chunks at 74.0 us).
constexpr int64_t kSplitChunkOuter = 1024;

// A row whose length is a size symbol (a size-generic module's) is split as a row of this
// length would be: the text may not depend on the sizes, so the chunk count is a constant and
// the chunk length the expression ceil(row / chunks); a short row then has mostly masked lanes.
constexpr int64_t kSymbolicSplitRow = 65536;

struct SplitShape {
  int64_t splits = 1, chunk = 1;
  /// Partials laid out [splits, outputs] (outputs contiguous: strided rows, whose neighbouring
  /// outputs are neighbours in memory) or [outputs, splits] (contiguous rows).
  bool outputs_contiguous = false;
  /// Chunk s holds rows s, s + splits, s + 2 * splits, ... instead of one contiguous run of
  /// rows. For strided rows: all first-stage programs then read a narrow window of the input at
  /// any moment, as a row reduction does, rather than `splits` streams spread over all of it.
  bool interleaved = false;
};

/// The split of an xnumel x r0_numel reduction, or nullopt when it stays one kernel. Prefers a
/// number of chunks that divides the row, so that no lane needs masking.
std::optional<SplitShape> choose_split(int64_t xnumel, int64_t r0_numel, ReductionHint hint);

/// The two kernels replacing `k`, with the partial buffers appended to `buffers`; nullopt when
/// `k` is not a reduction to split (see choose_split; also: only sum/prod/max/min, no reduction
/// feeding another, no element-wise store).
std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> split_reduction(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers);

}  // namespace coil

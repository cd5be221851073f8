// A graph pass: the written-out attention pattern becomes one `attention` node, so the CPU runs
// it as the flash kernel (O(T) memory) instead of materializing the [Tq, Tk] scores; and
// attention reads grouped kv heads directly instead of their repeats.
#pragma once

#include "coil/graph.h"

namespace coil {

/// A copy of `g` in which every floating (f32, bf16, f16, f64: q, k, v and y of one dtype)
///   p = softmax(s [* c | / c] [+ mask | where(b, s, -inf) | where(b, -inf, s)], axis=-1);
///   y = matmul(p, v)   with s = matmul(q, k^T)
/// (k^T any transpose or permute: k is that view with its last two dims swapped back, a permute
/// of its source, as torch's ONNX export permutes [T, N, D] to [N, D, T]; c a constant scalar;
/// b a bool mask, logical_not(b) read as b negated, the fill exactly -inf; q, k, v of rank 3
/// or 4 with equal batch dims; every intermediate read only by the next step) computes y as
/// attention(q, k, v[, mask]) {scale=c or 1/c, or 1}, rank-3 operands unsqueezed to
/// [1, N, T, D] and the result squeezed back; a bool mask that marks the keys masked out
/// (where(b, -inf, s)) is passed as logical_not(b). A 4-D product written as torch's bmm
/// decomposition (y = reshape(bmm(reshape(expand(p)), reshape(expand(v)))) back to 4-D, each
/// expand an identity and each reshape merging or splitting only the two batch dims, likewise
/// for q @ k^T) is matched through those views as the 4-D product. Mathematically the same
/// value; rounding differs as in any fusion (the scores stay in f32 registers, where a bf16
/// graph rounds them to bf16). The replaced nodes are left unread (decompose_and_bind drops
/// them). An attention node (attention_lse; attention_grad for q) whose k and v are both
/// torch's repeat_interleave of kv heads along dim 1 (reshape(expand(unsqueeze(x, 2))), as a
/// decoder with grouped-query heads writes it) reads the kv heads themselves: the op's
/// grouped-query heads read them as the repeat did, and the repeated copies are not made.
/// Returns the number of rewrites in `*rewrites` when given.
Graph recognize_attention(const Graph& g, int* rewrites = nullptr);

}  // namespace coil

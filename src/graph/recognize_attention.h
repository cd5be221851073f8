// A graph pass: the written-out attention pattern becomes one `attention` node, so the CPU runs
// it as the flash kernel (O(T) memory) instead of materializing the [Tq, Tk] scores.
#pragma once

#include "coil/graph.h"

namespace coil {

/// A copy of `g` in which every f32
///   p = softmax(s [* c | / c] [+ mask], axis=-1);  y = matmul(p, v)   with s = matmul(q, k^T)
/// (k^T any transpose or permute: k is that view with its last two dims swapped back, a permute
/// of its source, as torch's ONNX export permutes [T, N, D] to [N, D, T]; c a constant scalar;
/// q, k, v of rank
/// 3 or 4 with equal batch dims; every intermediate read only by the next step) computes y as
/// attention(q, k, v[, mask]) {scale=c or 1/c, or 1}, rank-3 operands unsqueezed to
/// [1, N, T, D] and the result squeezed back. Mathematically the same value; rounding differs
/// as in any fusion (the scores stay in registers). The replaced nodes are left unread
/// (decompose_and_bind drops them). Returns the number of rewrites in `*rewrites` when given.
Graph recognize_attention(const Graph& g, int* rewrites = nullptr);

}  // namespace coil

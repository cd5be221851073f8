// Lowerings: the functions of the lowering table (lower/op_lowering.cpp). Each turns one graph
// node into a TensorBox (lower/lowering.h): a loader that computes an element, or a realized
// buffer.
#pragma once

#include <optional>
#include <vector>

#include "lower/lowering.h"

namespace coil {

/// A box of `dtype` reading `box` converted; a conversion to f16/bf16 rounds, then computes in
/// f32: every reader sees the value the graph's dtype holds, as if it had been stored.
TensorBox cast_box(const TensorBox& box, DType dtype);
/// `box` [batch..., rows, cols] as a strided view of one buffer (n_batch leading dims of the given
/// sizes; size-1 dims stride 0): every element a single load whose offset is linear in the
/// indices with constant strides. nullopt when the box computes something.
std::optional<StridedOperand> as_strided(const TensorBox& box, size_t n_batch,
                                         const std::vector<int64_t>& batch_sizes);

TensorBox lower_elementwise(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_full(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_iota(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_view(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_concat(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
/// gather: data realized into a buffer, read through an indirect_index of the loaded index.
TensorBox lower_gather(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_index_add(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_reduction(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
TensorBox lower_arg_reduction(LowerContext& ctx, const Node& node,
                              const std::vector<TensorBox>& in);
/// matmul and bmm: a matmul template (TemplateBuffer) or, for dtypes without one, a reduction.
TensorBox lower_matmul(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
/// conv2d: an extern kernel (oneDNN) or, for dtypes without one, a reduction.
TensorBox lower_conv2d(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
/// attention: the CPU's flash kernel (an Extern calling kernels/coil_attention.h).
TensorBox lower_attention(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);
/// Before an attention, attention_lse or attention_grad node is lowered: its operands that the
/// kernel cannot read in place (computed values; q, k, v that are no strided view of a buffer)
/// are stored in their shared boxes (`boxes`, indexed by graph node), so that every attention
/// node reading them reads one buffer: a forward and its logsumexp, or the gradients of k and v,
/// then share a kernel (sched/fusion.h), and the value is computed once, not per reader.
void store_attention_operands(LowerContext& ctx, const Node& node, std::vector<TensorBox>& boxes);
/// max_pool2d and avg_pool2d: a pointwise computation over the unrolled window.
TensorBox lower_pool2d(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in);

}  // namespace coil

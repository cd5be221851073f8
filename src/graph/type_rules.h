// Shape and dtype rules of the graph ops (the `infer` column of the op registry), and the
// helpers they share with lowering and the reference interpreter.
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "coil/graph.h"

namespace coil {

// Helpers shared by rules, lowering and the reference interpreter.

/// Normalizes a possibly negative axis against `rank`; coil::Error naming `op` if out of range.
int64_t normalize_axis(std::string_view op, int64_t axis, int64_t rank);
/// Broadcast shape of two shapes (numpy rules); coil::Error naming `op` on a mismatch.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
/// The reduced axes of a reduction node, sorted, normalized ("axes" absent = all axes).
std::vector<int64_t> reduction_axes(const Node& node, int64_t rank);
/// Result dtype of an elementwise node from its input dtypes and its op's DTypeRule.
DType elementwise_result_dtype(const Node& node, const std::vector<const TensorType*>& inputs);
/// torch.result_type of the inputs: dimensioned tensors decide the type, except that a 0-dim
/// input of a higher category (bool < integer < float) lifts the result to its own dtype.
DType elementwise_promoted_dtype(const std::vector<const TensorType*>& inputs);
/// Output sizes of reshape: resolves one -1 against the input's element count.
Shape reshape_target(const Node& node, const Shape& in);
/// The target sizes of full, reshape and expand: the integer list `shape`, or `sizes`, the
/// same as text where entries may be size symbols ("s0, s1, 12, -1"); exactly one is given.
std::vector<sym::Expr> target_sizes(const Node& node);
/// `sizes` text parsed (entries >= -1; >= 0 for full), an error naming `op` and the entry.
std::vector<sym::Expr> parse_sizes(std::string_view op, const std::string& list);
/// `sizes` text with its symbols substituted (bound to values, or renamed).
std::string substitute_sizes(std::string_view op, const std::string& list,
                             const std::map<sym::Expr, sym::Expr>& bind);
/// Parameters of a slice node after normalization: start, end (exclusive), step. On a
/// symbolic dim (a size-generic graph) start and size are expressions of its size (`start_e`,
/// `size_e`; the ints then hold their values at the size hints, or 0 without hints).
struct SliceParams {
  int64_t dim, start, end, step, size;
  sym::Expr start_e, size_e;
};
SliceParams slice_params(const Node& node, const Shape& in);

/// The window of conv2d and the 2-D pools, per spatial dim (height, width), validated.
/// conv2d: stride, padding, dilation, groups (the kernel comes from the weight's shape).
/// max_pool2d / avg_pool2d: kernel, stride (default: kernel), padding (at most half the
/// kernel), dilation (max only), ceil_mode, count_include_pad (avg only). Each of kernel,
/// stride, padding and dilation is written [h, w], [n] or n.
struct Window2d {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;
};
Window2d conv2d_params(const Node& node);
Window2d pool2d_params(const Node& node);
/// Output extent of a window sliding over `in` elements along spatial dim `dim` (0: height,
/// 1: width), torch's rule: floor (or ceil with ceil_mode) of (in + 2p - d(k-1) - 1) / s, plus
/// one; with ceil_mode a last window that would start in the right padding is dropped.
/// Symbolic `in` gives a floordiv expression (ceil_mode needs a static size).
sym::Expr window_output_size(std::string_view op, const sym::Expr& in, const Window2d& w, int dim);

// The `infer` functions of the registry.
TensorType infer_elementwise(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_full(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_iota(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_source(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_reshape(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_permute(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_transpose(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_expand(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_slice(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_squeeze(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_unsqueeze(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_flatten(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_concat(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_gather(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_index_add(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_reduction(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_arg_reduction(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_softmax(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_norm(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_matmul(const Node& node, const std::vector<const TensorType*>& in);  // matmul bmm
TensorType infer_linear(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_addmm(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_conv2d(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_pool2d(const Node& node,
                        const std::vector<const TensorType*>& in);  // max_pool2d avg_pool2d
TensorType infer_global_pool2d(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_attention(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_attention_lse(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_attention_grad(const Node& node, const std::vector<const TensorType*>& in);

}  // namespace coil

// Shape and dtype rules of the graph ops (the `infer` column of the op registry), and the
// helpers they share with lowering and the reference interpreter.
#pragma once

#include <vector>

#include "graph/graph.h"

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
/// Parameters of a slice node after normalization: start, end (exclusive), step.
struct SliceParams {
  int64_t dim, start, end, step, size;
};
SliceParams slice_params(const Node& node, const Shape& in);

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
TensorType infer_reduction(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_arg_reduction(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_softmax(const Node& node, const std::vector<const TensorType*>& in);
TensorType infer_norm(const Node& node, const std::vector<const TensorType*>& in);

}  // namespace coil

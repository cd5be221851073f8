// Reference kernels: the `reference` column of the op registry. Each computes one node on
// host tensors with plain loops, reading elements as double, computing in double (float64
// accumulation for float reductions, exact int64 for integer ones), and rounding once to the result
// dtype. They share no code with lowering or codegen, so they are an independent oracle for tests.
#pragma once

#include <vector>

#include "coil/graph.h"

namespace coil {

Tensor ref_elementwise(const Node& node,
                       const std::vector<Tensor>& in);  // unary, binary, where, cast, clamp
Tensor ref_full(const Node& node, const std::vector<Tensor>& in);
Tensor ref_iota(const Node& node, const std::vector<Tensor>& in);
Tensor ref_constant(const Node& node, const std::vector<Tensor>& in);  // returns *node.data
Tensor ref_input(const Node& node,
                 const std::vector<Tensor>& in);                   // never called: inputs are bound
Tensor ref_view(const Node& node, const std::vector<Tensor>& in);  // reshape .. flatten
Tensor ref_concat(const Node& node, const std::vector<Tensor>& in);
Tensor ref_gather(const Node& node, const std::vector<Tensor>& in);
Tensor ref_index_add(const Node& node, const std::vector<Tensor>& in);
Tensor ref_reduction(const Node& node, const std::vector<Tensor>& in);  // sum mean max min prod var
Tensor ref_arg_reduction(const Node& node, const std::vector<Tensor>& in);  // argmax argmin
Tensor ref_softmax(const Node& node, const std::vector<Tensor>& in);        // softmax log_softmax
Tensor ref_layer_norm(const Node& node, const std::vector<Tensor>& in);
Tensor ref_rms_norm(const Node& node, const std::vector<Tensor>& in);
// linalg.cpp
Tensor ref_matmul(const Node& node, const std::vector<Tensor>& in);  // matmul bmm
Tensor ref_linear(const Node& node, const std::vector<Tensor>& in);
Tensor ref_addmm(const Node& node, const std::vector<Tensor>& in);
Tensor ref_conv2d(const Node& node, const std::vector<Tensor>& in);
Tensor ref_pool2d(const Node& node, const std::vector<Tensor>& in);  // max_pool2d avg_pool2d
Tensor ref_global_avg_pool2d(const Node& node, const std::vector<Tensor>& in);
// attention.cpp
Tensor ref_attention(const Node& node, const std::vector<Tensor>& in);
Tensor ref_attention_lse(const Node& node, const std::vector<Tensor>& in);
Tensor ref_attention_grad(const Node& node, const std::vector<Tensor>& in);

}  // namespace coil

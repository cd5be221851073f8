// The integer products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv;
// onnx_ops_integer.cpp) and the 3-D pools (onnx_ops_pool.cpp) at import: what they become, and
// every message for a malformed or refused use. The numbers are checked by the conformance
// cases (onnx_op_cases_windows.py, families integer and pool3d) and ONNX's node tests.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <string>

#include "coil/coil.h"
#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/op_registry.h"
#include "support/error_of.h"

namespace coil {
namespace {

using namespace onnx_test;
using coil::testing::error_of;

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op->name == op;
  return n;
}

/// A [4, k] (dtype at) times B [k, 2] (u8) -> MatMulInteger (node "n") with a zero point of A of
/// dtype zt and shape zdims.
onnx::ModelProto matmul_integer(int32_t at, int64_t k, int32_t zt,
                                const std::vector<int64_t>& zdims) {
  onnx::ModelProto m = empty_model(10);
  set_type(m.mutable_graph()->add_input(), "a", at, {4, k});
  set_type(m.mutable_graph()->add_input(), "b", TP::UINT8, {k, 2});
  set_type(m.mutable_graph()->add_input(), "z", zt, zdims);
  set_type(m.mutable_graph()->add_output(), "y", TP::INT32, {4, 2});
  add_node(m, "MatMulInteger", {"a", "b", "z"}, {"y"}, "n");
  return m;
}

TEST(OnnxIntegerErrors, MatMulInteger) {
  // Per tensor and per row (one element, [M]) import; K = 258 keeps 255 * 255 * K below 2^24
  // (one product), 259 needs two chunks of K.
  Graph g = import(matmul_integer(TP::UINT8, 258, TP::UINT8, {4}));
  EXPECT_EQ(count(g, "matmul"), 1);
  EXPECT_EQ(count(import(matmul_integer(TP::UINT8, 259, TP::UINT8, {})), "matmul"), 2);
  EXPECT_EQ(import_error(matmul_integer(TP::UINT8, 3, TP::UINT8, {3})),
            "m.onnx: node 'n' (MatMulInteger): a_zero_point of shape [3] does not fit its "
            "operand of shape [4, 3] (one element, or 4 along dim 0, or 2-D with 1 along dim 1)");
  EXPECT_EQ(import_error(matmul_integer(TP::UINT8, 3, TP::INT8, {})),
            "m.onnx: node 'n' (MatMulInteger): a_zero_point has dtype i8, its operand u8");
  EXPECT_EQ(import_error(matmul_integer(TP::INT32, 3, TP::INT32, {})),
            "m.onnx: node 'n' (MatMulInteger): A must be uint8 or int8, got i32");
}

/// x [1, c, 5, 5] (u8) and w [2, c, 3, 3] (i8) -> ConvInteger (node "n") with a weight zero point
/// of shape zdims.
onnx::ModelProto conv_integer(int64_t c, const std::vector<int64_t>& zdims) {
  onnx::ModelProto m = empty_model(10);
  set_type(m.mutable_graph()->add_input(), "x", TP::UINT8, {1, c, 5, 5});
  set_type(m.mutable_graph()->add_input(), "w", TP::INT8, {2, c, 3, 3});
  set_type(m.mutable_graph()->add_input(), "xz", TP::UINT8, {});
  set_type(m.mutable_graph()->add_input(), "wz", TP::INT8, zdims);
  set_type(m.mutable_graph()->add_output(), "y", TP::INT32, {1, 2, 3, 3});
  add_node(m, "ConvInteger", {"x", "w", "xz", "wz"}, {"y"}, "n");
  return m;
}

TEST(OnnxIntegerErrors, ConvInteger) {
  // 28 channels of 3x3: 252 terms of at most 255 * 255, below 2^24; 29 channels may exceed it.
  EXPECT_EQ(count(import(conv_integer(28, {2})), "conv2d"), 1);
  EXPECT_THROW(import(conv_integer(29, {2})), UnsupportedError);
  EXPECT_EQ(import_error(conv_integer(29, {2})),
            "m.onnx: unsupported ops: ConvInteger (node 'n', opset 10: a window of 261 elements: "
            "sums up to 16971525 exceed 2^24, beyond which coil's f32 convolution is not exact)");
  EXPECT_EQ(import_error(conv_integer(3, {3})),
            "m.onnx: node 'n' (ConvInteger): w_zero_point of shape [3] does not fit its operand "
            "of shape [2, 3, 3, 3] (one element, or 2 along dim 0)");
}

/// x of shape `dims` (f32) -> MaxPool (node "n") with kernel_shape `kernel` and auto_pad.
onnx::ModelProto max_pool(const std::vector<int64_t>& dims, const std::vector<int64_t>& kernel,
                          const std::string& auto_pad = "NOTSET") {
  onnx::ModelProto m = empty_model(12);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, dims);
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto* n = add_node(m, "MaxPool", {"x"}, {"y"}, "n");
  add_ints_attr(n, "kernel_shape", kernel);
  if (auto_pad != "NOTSET") {
    auto* a = n->add_attribute();
    a->set_name("auto_pad");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(auto_pad);
  }
  return m;
}

TEST(OnnxIntegerErrors, Pools3d) {
  // Two 2-D pools: (H, W), then (D, 1).
  Graph g = import(max_pool({2, 3, 5, 6, 7}, {2, 3, 2}));
  EXPECT_EQ(count(g, "max_pool2d"), 2);
  EXPECT_EQ(g.node(g.outputs()[0].node).type.shape, (Shape{2, 3, 4, 4, 6}));
  EXPECT_EQ(import_error(max_pool({1, 1, 3, 3, 3, 3}, {2, 2, 2, 2})),
            "m.onnx: unsupported ops: MaxPool (node 'n', opset 12: 4-D windows (coil supports "
            "1-D, 2-D and 3-D))");
  EXPECT_EQ(import_error(max_pool({1, 1, 3, 3, 3}, {2, 2})),
            "m.onnx: node 'n' (MaxPool): kernel_shape has 2 entries for 3 spatial dims");
  EXPECT_EQ(import_error(max_pool({1, 1, 3, 3, 3}, {2, 0, 2})),
            "m.onnx: node 'n' (MaxPool): kernel_shape [2, 0, 2], strides [1, 1, 1] and dilations "
            "[1, 1, 1] must be at least 1");
  EXPECT_EQ(import_error(max_pool({1, 1, 3, 3, 3}, {2, 2, 2}, "SAME")),
            "m.onnx: node 'n' (MaxPool): auto_pad 'SAME' is not one of NOTSET, SAME_UPPER, "
            "SAME_LOWER, VALID");
}

}  // namespace
}  // namespace coil

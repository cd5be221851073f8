// ONNX Attention (opset 23) at import: what it becomes (one attention node; written out only
// for softcap or the qk_matmul_output output) and every message for what coil refuses or what
// is malformed; models of opsets 18 to 23 and the ops whose newer definitions coil does not
// read. The numbers are checked by the conformance cases (onnx_op_cases.py, family attention).
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

/// q [2, 4, 5, 8], k and v [2, 2, 6, 8] (4-D; `three`: [2, 5, 32] and [2, 6, 16]) -> Attention
/// (node "att") -> the outputs named in `outs` ("" skips one).
onnx::ModelProto attention_model(int64_t opset = 23, bool three = false,
                                 const std::vector<std::string>& outs = {"y"},
                                 const std::vector<std::string>& extra_in = {}) {
  onnx::ModelProto m = empty_model(opset);
  auto* g = m.mutable_graph();
  if (three) {
    set_type(g->add_input(), "q", TP::FLOAT, {2, 5, 32});
    set_type(g->add_input(), "k", TP::FLOAT, {2, 6, 16});
    set_type(g->add_input(), "v", TP::FLOAT, {2, 6, 16});
  } else {
    set_type(g->add_input(), "q", TP::FLOAT, {2, 4, 5, 8});
    set_type(g->add_input(), "k", TP::FLOAT, {2, 2, 6, 8});
    set_type(g->add_input(), "v", TP::FLOAT, {2, 2, 6, 8});
  }
  std::vector<std::string> in = {"q", "k", "v"};
  for (const auto& e : extra_in) {
    in.push_back(e);
    if (e == "pk" || e == "pv") set_type(g->add_input(), e, TP::FLOAT, {2, 2, 3, 8});
    if (e == "mask") set_type(g->add_input(), e, TP::BOOL, {5, 6});
  }
  for (const auto& o : outs)
    if (!o.empty()) set_type(g->add_output(), o, TP::FLOAT, {});
  add_node(m, "Attention", in, outs, "att");
  // (the outputs' shapes are left to coil: an empty shape reads as unknown)
  for (auto& o : *g->mutable_output()) o.mutable_type()->mutable_tensor_type()->clear_shape();
  return m;
}

TEST(OnnxAttention, BecomesOneAttentionNode) {
  Graph g = import(attention_model());
  EXPECT_EQ(count(g, "attention"), 1);
  EXPECT_EQ(count(g, "softmax"), 0);
  onnx::ModelProto m = attention_model(23, true);
  auto* n = m.mutable_graph()->mutable_node(0);
  add_int_attr(n, "q_num_heads", 4);
  add_int_attr(n, "kv_num_heads", 2);
  add_int_attr(n, "is_causal", 1);
  Graph g3 = import(m);
  EXPECT_EQ(count(g3, "attention"), 1);
  EXPECT_EQ(g3.node(g3.outputs()[0].node).type.shape, (Shape{2, 5, 32}));
}

TEST(OnnxAttention, PastKeysAreConcatenated) {
  Graph g = import(attention_model(23, false, {"y", "present_k", "present_v"}, {"", "pk", "pv"}));
  EXPECT_EQ(count(g, "attention"), 1);
  EXPECT_EQ(count(g, "concat"), 2);
  EXPECT_EQ(g.node(g.outputs()[1].node).type.shape, (Shape{2, 2, 9, 8}));
}

TEST(OnnxAttention, SoftcapAndScoresAreWrittenOut) {
  onnx::ModelProto m = attention_model(23, false, {"y", "", "", "qk"});
  add_int_attr(m.mutable_graph()->mutable_node(0), "qk_matmul_output_mode", 3);
  Graph g = import(m);
  EXPECT_EQ(count(g, "attention"), 0);
  EXPECT_EQ(count(g, "softmax"), 1);
  EXPECT_EQ(g.node(g.outputs()[1].node).type.shape, (Shape{2, 4, 5, 6}));
}

TEST(OnnxAttention, Errors) {
  EXPECT_EQ(import_error(attention_model(17)),
            "m.onnx: node 'att' (Attention): Attention is an op of opset 23 on, and the model "
            "imports opset 17");
  EXPECT_EQ(import_error(attention_model(23, true)),
            "m.onnx: node 'att' (Attention): 3-D inputs need attributes q_num_heads and "
            "kv_num_heads (got 0 and 0)");
  onnx::ModelProto odd = attention_model(23, true);
  add_int_attr(odd.mutable_graph()->mutable_node(0), "q_num_heads", 3);
  add_int_attr(odd.mutable_graph()->mutable_node(0), "kv_num_heads", 2);
  EXPECT_EQ(import_error(odd),
            "m.onnx: node 'att' (Attention): Q's hidden size 32 is not a multiple of its 3 heads");
  EXPECT_EQ(import_error(attention_model(23, false, {"y"}, {"", "pk"})),
            "m.onnx: node 'att' (Attention): past_key and past_value must be given together");
  onnx::ModelProto heads = attention_model();
  add_int_attr(heads.mutable_graph()->mutable_node(0), "kv_num_heads", 4);
  EXPECT_EQ(import_error(heads),
            "m.onnx: node 'att' (Attention): attribute 'kv_num_heads' = 4 differs from K's 2 "
            "heads");
}

TEST(OnnxAttention, UnsupportedAttributeValues) {
  onnx::ModelProto mode = attention_model(23, false, {"y", "", "", "qk"});
  add_int_attr(mode.mutable_graph()->mutable_node(0), "qk_matmul_output_mode", 1);
  EXPECT_EQ(import_error(mode),
            "m.onnx: unsupported ops: Attention (node 'att', opset 23: attribute "
            "'qk_matmul_output_mode' = 1 is not implemented (the qk_matmul_output output is read; "
            "modes 0 and 3 are))");
  // the mode of an output nobody reads does not matter
  onnx::ModelProto unread = attention_model();
  add_int_attr(unread.mutable_graph()->mutable_node(0), "qk_matmul_output_mode", 2);
  EXPECT_EQ(count(import(unread), "attention"), 1);
  onnx::ModelProto precision = attention_model();
  add_int_attr(precision.mutable_graph()->mutable_node(0), "softmax_precision", 11);
  EXPECT_EQ(import_error(precision),
            "m.onnx: unsupported ops: Attention (node 'att', opset 23: attribute "
            "'softmax_precision' = 11 (double) is not implemented for f32 inputs (coil's softmax "
            "runs in f32))");
  EXPECT_THROW(import(precision), UnsupportedError);
}

TEST(OnnxAttention, OpsetsUpTo23) {
  EXPECT_EQ(import(relu_model(18)).num_nodes(), 2);
  EXPECT_EQ(import(relu_model(23)).num_nodes(), 2);
  EXPECT_EQ(import_error(relu_model(24)),
            "m.onnx: opset 24 is not supported (coil supports opsets 1 to 23)");
  // an op whose definition changed after opset 17 in a way coil does not read
  onnx::ModelProto m = empty_model(19);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {1, 1, 4, 4});
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  add_node(m, "AveragePool", {"x"}, {"y"}, "pool");
  add_ints_attr(m.mutable_graph()->mutable_node(0), "kernel_shape", {2, 2});
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: AveragePool (node 'pool', opset 19: its opset-19 "
            "definition differs from opset 17's, which coil reads)");
  EXPECT_EQ(count(import(relu_model(17)), "relu"), 1);
  // ReduceMean's axes input of opset 18 is read (onnx_ops_reduce.cpp)
  onnx::ModelProto r = empty_model(18);
  set_type(r.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 3, 4});
  set_type(r.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  add_i64_initializer(r, "axes", {1});
  add_node(r, "ReduceMean", {"x", "axes"}, {"y"}, "mean");
  Graph g = import(r);
  EXPECT_EQ(count(g, "mean"), 1);
  EXPECT_EQ(g.node(g.outputs()[0].node).type.shape, (Shape{2, 1, 4}));
}

}  // namespace
}  // namespace coil

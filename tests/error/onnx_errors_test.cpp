// Broken ONNX models give a coil::Error, never a crash or a hang: malformed and truncated
// files, wrong types, cyclic graphs, huge dims, unsupported ops (all listed in one message),
// unsupported dtypes and opsets, and names crafted to inject code. The models are built with
// the ONNX protobuf classes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>
#include "support/error_of.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "coil/coil.h"
#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"

namespace coil {
namespace {

using namespace onnx_test;

using coil::testing::error_of;

Graph import(const onnx::ModelProto& m) {
  return import_onnx_bytes(m.SerializeAsString(), "m.onnx");
}

std::string import_error(const onnx::ModelProto& m) {
  return error_of([&] { import(m); });
}

TEST(OnnxErrors, ValidModelImports) {
  Graph g = import(relu_model());
  EXPECT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0].name, "y");
}

TEST(OnnxErrors, MissingAndEmptyFiles) {
  EXPECT_EQ(error_of([] { import_onnx("/nonexistent/model.onnx"); }),
            "/nonexistent/model.onnx: cannot open the file");
  EXPECT_EQ(error_of([] { import_onnx_bytes("", "empty.onnx"); }),
            "empty.onnx: the model has no graph (is this an .onnx file?)");
  EXPECT_EQ(error_of([] { import_onnx_bytes("\xff\xff\xff\xff garbage", "g.onnx"); }),
            "g.onnx: not a valid ONNX model (the protobuf does not parse: truncated or not an "
            ".onnx file)");
}

// Every prefix of a valid model and of a real test model: an Error or a graph, never a crash.
TEST(OnnxErrors, TruncatedFiles) {
  onnx::ModelProto m = relu_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TP::FLOAT);
  w->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) w->add_float_data(v);
  add_node(m, "Add", {"y", "w"}, {"z"});
  set_type(m.mutable_graph()->add_output(), "z", TP::FLOAT, {2, 3});
  std::string bytes = m.SerializeAsString();
  int errors = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    try {
      import_onnx_bytes(std::string_view(bytes).substr(0, len), "t.onnx");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, static_cast<int>(bytes.size()) / 2);
  std::filesystem::path real =
      "/usr/share/libonnx-testdata/data/node/test_layer_normalization_4d_axis1_expanded/model.onnx";
  if (!std::filesystem::exists(real)) return;
  std::ifstream f(real, std::ios::binary);
  std::string model((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (size_t len = 0; len < model.size(); len += 7) {
    try {
      import_onnx_bytes(std::string_view(model).substr(0, len), "real.onnx");
    } catch (const Error&) {
    }
  }
}

// Random byte flips of a valid model: an Error or a graph, never a crash or a hang.
TEST(OnnxErrors, CorruptedBytes) {
  std::string bytes = relu_model().SerializeAsString();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string b = bytes;
    for (int k = 0; k < 1 + trial % 4; ++k) b[rng() % b.size()] = static_cast<char>(rng() & 0xff);
    try {
      import_onnx_bytes(b, "c.onnx");
    } catch (const Error&) {
    }
  }
}

TEST(OnnxErrors, WrongTypes) {
  onnx::ModelProto m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("Softmax");
  auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(1.5f);
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'relu' (Softmax): attribute 'axis' must be INT, got FLOAT");

  m = relu_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TP::FLOAT);
  w->add_dims(4);
  w->add_float_data(1.f);
  EXPECT_EQ(import_error(m), "m.onnx: initializer 'w': float_data has 1 values for 4 elements");
  w->clear_float_data();
  w->set_raw_data(std::string(15, '\0'));
  EXPECT_EQ(import_error(m),
            "m.onnx: initializer 'w': raw_data has 15 bytes, expected 16 for 4 f32 elements");
  w->set_data_type(TP::STRING);
  EXPECT_EQ(import_error(m), "m.onnx: initializer 'w': dtype string is not supported by coil");

  for (auto [elem, name] : {std::pair<int32_t, const char*>{TP::UINT16, "uint16"},
                            {TP::COMPLEX64, "complex64"},
                            {TP::STRING, "string"},
                            {99, "<unknown elem_type 99>"}}) {
    m = relu_model();
    m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    EXPECT_EQ(import_error(m),
              fmt::format("m.onnx: input 'x' has dtype {}, which coil does not support", name));
  }
  m = relu_model();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_sequence_type();
  EXPECT_EQ(import_error(m),
            "m.onnx: input 'x' is not a tensor (sequence, map, optional and sparse inputs are not "
            "supported)");
  m = relu_model();
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      TP::INT64);
  EXPECT_EQ(import_error(m), "m.onnx: output 'y' is declared int64 but computes f32");
  m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("Cast");
  add_int_attr(m.mutable_graph()->mutable_node(0), "to", TP::STRING);
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: Cast (node 'relu', opset 13: cast to string)");
}

TEST(OnnxErrors, InvalidGraphs) {
  onnx::ModelProto m = relu_model();
  add_node(m, "Neg", {"b"}, {"a"}, "n1");
  add_node(m, "Neg", {"a"}, {"b"}, "n2");
  EXPECT_EQ(import_error(m),
            "m.onnx: the graph has a cycle: node 'n1' (Neg) depends on its own output");
  m = relu_model();
  add_node(m, "Neg", {"s"}, {"s"}, "self");
  EXPECT_EQ(import_error(m),
            "m.onnx: the graph has a cycle: node 'self' (Neg) depends on its own output");
  m = relu_model();
  add_node(m, "Neg", {"nowhere"}, {"z"});
  EXPECT_EQ(import_error(m),
            "m.onnx: node #1 (output 'z') (Neg) reads 'nowhere', which no node, input or "
            "initializer defines");
  m = relu_model();
  add_node(m, "Neg", {"x"}, {"y"}, "again");
  EXPECT_EQ(import_error(m), "m.onnx: value 'y' is defined twice (by node 'again')");
  m = relu_model();
  m.mutable_graph()->mutable_output(0)->set_name("q");
  EXPECT_EQ(import_error(m), "m.onnx: graph output 'q' is not computed by any node");
  m = relu_model();
  m.mutable_graph()->clear_output();
  EXPECT_EQ(import_error(m), "m.onnx: the graph has no outputs");
  m = relu_model();
  add_node(m, "Add", {"x"}, {"z"}, "add1");
  EXPECT_EQ(import_error(m), "m.onnx: node 'add1' (Add): input 1 is required");
  m = relu_model();
  add_node(m, "Add", {"x", "x2"}, {"z"}, "add2");
  set_type(m.mutable_graph()->add_input(), "x2", TP::FLOAT, {4});
  EXPECT_EQ(
      import_error(m),
      "m.onnx: node 'add2' (Add): add: cannot broadcast shapes [2, 3] and [4] (dim 1: 3 vs 4)");
}

TEST(OnnxErrors, HugeDims) {
  onnx::ModelProto m = relu_model();
  auto* shape =
      m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(0)->set_dim_value(int64_t{1} << 40);
  shape->mutable_dim(1)->set_dim_value(int64_t{1} << 40);
  EXPECT_NE(import_error(m).find("has more than 2^62 elements"), std::string::npos)
      << import_error(m);
  shape->mutable_dim(0)->set_dim_value(-5);
  EXPECT_EQ(import_error(m), "m.onnx: input 'x': dim 0 is negative (-5)");

  m = relu_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TP::FLOAT);
  w->add_dims(int64_t{1} << 40);
  w->add_dims(int64_t{1} << 40);
  EXPECT_EQ(import_error(m), "m.onnx: initializer 'w': shape has more than 2^62 elements");
  w->set_dims(1, 1 << 20);
  EXPECT_EQ(import_error(m),
            "m.onnx: initializer 'w': 1152921504606846976 elements but no raw_data");

  // A computed shape: ConstantOfShape of [2^40, 2^40].
  m = relu_model();
  auto* c = m.mutable_graph()->add_initializer();
  c->set_name("shape");
  c->set_data_type(TP::INT64);
  c->add_dims(2);
  c->add_int64_data(int64_t{1} << 40);
  c->add_int64_data(int64_t{1} << 40);
  add_node(m, "ConstantOfShape", {"shape"}, {"big"}, "cos");
  EXPECT_NE(import_error(m).find("more than 2^62 elements"), std::string::npos) << import_error(m);
  // Range with a huge count.
  m = relu_model();
  for (auto [name, v] : {std::pair{"start", 0.0f}, {"limit", 1e30f}, {"delta", 1.0f}}) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    t->add_float_data(v);
  }
  add_node(m, "Range", {"start", "limit", "delta"}, {"r"}, "range");
  EXPECT_EQ(import_error(m), "m.onnx: node 'range' (Range): 1e+30 elements are too many");
}

TEST(OnnxErrors, UnsupportedOpsAreListedTogether) {
  onnx::ModelProto m = relu_model();
  add_node(m, "Resize", {"y", "y"}, {"a"}, "up1");
  add_node(m, "ConvTranspose", {"a", "a"}, {"b"}, "deconv1");
  add_node(m, "ConvTranspose", {"b", "b"}, {"c"}, "deconv2");
  add_node(m, "FancyOp", {"c"}, {"d"}, "fancy");
  add_node(m, "Custom", {"d"}, {"e"}, "custom")->set_domain("com.example");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: Resize (node 'up1', opset 13), ConvTranspose (2 nodes, "
            "opset 13), FancyOp (node 'fancy', opset 13), com.example.Custom (node 'custom', "
            "opset 13)");
}

TEST(OnnxErrors, DynamicArgumentsAreUnsupported) {
  onnx::ModelProto m = relu_model();
  set_type(m.mutable_graph()->add_input(), "idx", TP::INT64, {2});
  add_node(m, "Gather", {"y", "idx"}, {"g"}, "gather");
  add_node(m, "Reshape", {"y", "idx"}, {"r"}, "reshape");
  add_node(m, "ConvTranspose", {"y", "y"}, {"ct"}, "ct");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: ConvTranspose (node 'ct', opset 13), Gather (node 'gather', "
            "opset 13: the indices input is not a constant), Reshape (node 'reshape', opset 13: "
            "the target "
            "shape is not a constant)");
}

TEST(OnnxErrors, Opsets) {
  EXPECT_EQ(import_error(relu_model(6)),
            "m.onnx: opset 6 is not supported (coil supports opsets 7 to 17)");
  EXPECT_EQ(import_error(relu_model(18)),
            "m.onnx: opset 18 is not supported (coil supports opsets 7 to 17)");
  onnx::ModelProto m = relu_model();
  m.clear_opset_import();
  EXPECT_EQ(import_error(m), "m.onnx: the model imports no opset of the default ONNX domain");
}

// Names are data: a node, value, input and output named to inject code come out as harmless
// identifiers, and the generated code contains none of it.
TEST(OnnxErrors, InjectionNamesAreSanitized) {
  const std::string evil = "x); system(\"rm -rf /\"); //";
  onnx::ModelProto m = relu_model();
  auto* g = m.mutable_graph();
  g->mutable_input(0)->set_name(evil);
  g->mutable_node(0)->set_input(0, evil);
  g->mutable_node(0)->set_name(evil);
  g->mutable_node(0)->set_output(0, evil + "\n#include </etc/passwd>");
  g->mutable_output(0)->set_name(evil + "\n#include </etc/passwd>");
  add_node(m, "Neg", {evil + "\n#include </etc/passwd>"}, {"../../etc/out"}, "*/ int x; /*");
  set_type(g->add_output(), "../../etc/out", TP::FLOAT, {2, 3});
  Graph graph = import(m);
  EXPECT_EQ(graph.node(graph.inputs()[0]).name, "x_system_rm_rf");
  EXPECT_EQ(graph.outputs()[1].name, "_etc_out");
  for (const auto& n : graph.nodes()) EXPECT_TRUE(is_identifier(n->name)) << n->name;
  for (const auto& o : graph.outputs()) EXPECT_TRUE(is_identifier(o.name)) << o.name;
  CompiledModel cm = compile(graph);
  for (const std::string& text : {cm.report().source, to_text(graph)}) {
    EXPECT_EQ(text.find("system("), std::string::npos) << text;
    EXPECT_EQ(text.find("rm -rf"), std::string::npos) << text;
    EXPECT_EQ(text.find("</etc"), std::string::npos) << text;
    EXPECT_EQ(text.find("*/ int"), std::string::npos) << text;
  }
  Tensor x = Tensor::zeros(DType::F32, {2, 3});
  x.set_from_double(0, -1.5);
  std::vector<Tensor> out = cm.run({x});
  EXPECT_EQ(out[1].item_as_double(0), 0.0);

  // In messages, model strings are escaped and truncated.
  g->mutable_node(0)->set_op_type("Evil\nOp'");
  EXPECT_EQ(import_error(m).substr(0, 32), "m.onnx: unsupported ops: Evil\\x0");
}

// A long chain imports in linear time, with no recursion over the graph.
TEST(OnnxErrors, LongChains) {
  onnx::ModelProto m = relu_model();
  std::string prev = "y";
  for (int i = 0; i < 20000; ++i) {
    std::string next = fmt::format("v{}", i);
    add_node(m, "Neg", {prev}, {next});
    prev = next;
  }
  m.mutable_graph()->mutable_output(0)->set_name(prev);
  Graph g = import(m);
  EXPECT_GT(g.num_nodes(), 20000);
}

}  // namespace
}  // namespace coil

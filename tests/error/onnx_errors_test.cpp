// Broken ONNX models give a coil::Error, never a crash or a hang: malformed and truncated
// files, wrong types, cyclic graphs, huge dims, unsupported ops (all listed in one message),
// unsupported dtypes and opsets, and names crafted to inject code. The models are built with
// the ONNX protobuf classes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>
#include "support/error_of.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <sstream>

#include "coil/coil.h"
#include "conformance/onnx_model_builder.h"
#include "driver/pipeline.h"
#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_import.h"

namespace coil {
namespace {

using namespace onnx_test;

using coil::testing::error_of;

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

// A valid model that uses what coil lacks is a coil::UnsupportedError (the CLI exits 3 for it);
// a broken one is a plain coil::Error (exit 2).
TEST(OnnxErrors, UnsupportedIsTold) {
  onnx::ModelProto det = relu_model();
  det.mutable_graph()->mutable_node(0)->set_op_type("StringNormalizer");
  EXPECT_THROW(import(det), UnsupportedError);
  EXPECT_THROW(import(relu_model(99)), UnsupportedError);
  onnx::ModelProto cycle = relu_model();
  cycle.mutable_graph()->mutable_node(0)->set_input(0, "y");
  try {
    import(cycle);
    ADD_FAILURE() << "a cyclic graph imported";
  } catch (const UnsupportedError& e) {
    ADD_FAILURE() << "a cyclic graph is not unsupported: " << e.what();
  } catch (const Error&) {
  }
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

  for (auto [elem, name] : {std::pair<int32_t, const char*>{TP::COMPLEX128, "complex128"},
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
  EXPECT_NE(import_error(m).find("has 2^62 or more elements"), std::string::npos)
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
  EXPECT_NE(import_error(m).find("2^62 or more elements"), std::string::npos) << import_error(m);
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
  add_node(m, "StringNormalizer", {"y", "y"}, {"a"}, "up1");
  add_node(m, "SequenceLength", {"a", "a"}, {"b"}, "nms1");
  add_node(m, "SequenceLength", {"b", "b"}, {"c"}, "nms2");
  add_node(m, "FancyOp", {"c"}, {"d"}, "fancy");
  add_node(m, "Custom", {"d"}, {"e"}, "custom")->set_domain("com.example");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: StringNormalizer (node 'up1', opset 13), SequenceLength (2 "
            "nodes, opset 13), FancyOp (node 'fancy', opset 13), com.example.Custom (node "
            "'custom', opset 13)");
}

TEST(OnnxErrors, DynamicArgumentsAreUnsupported) {
  onnx::ModelProto m = relu_model();
  set_type(m.mutable_graph()->add_input(), "idx", TP::INT64, {2});
  add_node(m, "Reshape", {"y", "idx"}, {"r"}, "reshape");
  add_node(m, "StringNormalizer", {"y", "y"}, {"gs"}, "gs");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: StringNormalizer (node 'gs', opset 13), Reshape (node "
            "'reshape', opset 13: the target shape is not a constant)");
}

TEST(OnnxErrors, Opsets) {
  EXPECT_EQ(import(relu_model(1)).num_nodes(), 2);
  EXPECT_EQ(import_error(relu_model(0)),
            "m.onnx: opset 0 is not supported (coil supports opsets 1 to 23)");
  EXPECT_EQ(import_error(relu_model(24)),
            "m.onnx: opset 24 is not supported (coil supports opsets 1 to 23)");
  onnx::ModelProto m = relu_model();
  m.clear_opset_import();
  EXPECT_EQ(import_error(m), "m.onnx: the model imports no opset of the default ONNX domain");
  m.set_ir_version(2);  // before IR 3, no opset_import meant opset 1
  EXPECT_EQ(import(m).num_nodes(), 2);
}

// Opsets 1 to 6: legacy attributes whose semantics coil does not implement are reported as
// unsupported (training modes, Tile-1); models that break the legacy rules are errors.
TEST(OnnxErrors, LegacyOpsets) {
  auto with = [](int64_t opset, const std::string& op, std::vector<std::string> in,
                 const std::vector<std::pair<std::string, int64_t>>& attrs,
                 const std::vector<std::vector<int64_t>>& shapes) {
    onnx::ModelProto m = empty_model(opset);
    for (size_t i = 1; i < in.size(); ++i)
      set_type(m.mutable_graph()->add_input(), in[i], TP::FLOAT, shapes[i - 1]);
    set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 3});
    set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {2, 3});
    in[0] = "x";
    auto* n = add_node(m, op, in, {"y"}, "n");
    for (const auto& [name, v] : attrs) add_int_attr(n, name, v);
    return m;
  };
  EXPECT_EQ(import_error(with(6, "Add", {"", "b"}, {}, {{3}})),
            "m.onnx: node 'n' (Add): inputs of shapes [2, 3] and [3] differ and broadcast is 0 "
            "(opset 6 broadcasts only with broadcast=1)");
  EXPECT_EQ(import(with(7, "Add", {"", "b"}, {}, {{3}})).num_nodes(), 3);
  EXPECT_EQ(import(with(6, "Add", {"", "b"}, {{"broadcast", 1}}, {{3}})).num_nodes(), 3);
  EXPECT_EQ(import_error(with(6, "Sub", {"", "b"}, {{"broadcast", 1}, {"axis", 0}}, {{3}})),
            "m.onnx: node 'n' (Sub): cannot broadcast B [3] onto A [2, 3] from axis 0 (dim 0: 3 vs "
            "2)");
  EXPECT_EQ(import_error(with(6, "Mul", {"", "b"}, {{"broadcast", 1}, {"axis", 1}}, {{3, 1}})),
            "m.onnx: node 'n' (Mul): B [3, 1] does not fit into A [2, 3] from axis 1 "
            "(broadcast=1)");
  EXPECT_EQ(import_error(with(7, "Sum", {"", "b"}, {}, {{3}})),
            "m.onnx: node 'n' (Sum): inputs of shapes [2, 3] and [3] differ (opset 7 does not "
            "broadcast them)");
  EXPECT_EQ(import_error(with(6, "Dropout", {""}, {}, {})),
            "m.onnx: unsupported ops: Dropout (node 'n', opset 6: is_test=0 (training mode; "
            "opset 6 needs is_test=1 for inference))");
  EXPECT_EQ(import(with(6, "Dropout", {""}, {{"is_test", 1}}, {})).num_nodes(), 1);
  EXPECT_EQ(import_error(
                with(6, "BatchNormalization", {"", "s", "b", "m", "v"}, {}, {{3}, {3}, {3}, {3}})),
            "m.onnx: unsupported ops: BatchNormalization (node 'n', opset 6: is_test=0 (training "
            "mode; opset 6 needs is_test=1 for inference))");
  EXPECT_EQ(import_error(with(5, "Tile", {"", "t", "a"}, {}, {{1}, {1}})),
            "m.onnx: unsupported ops: Tile (node 'n', opset 5: Tile-1's tiles and axis inputs "
            "(coil reads Tile from opset 6 on))");
  EXPECT_EQ(import_error(with(6, "PRelu", {"", "s"}, {}, {{2}})),
            "m.onnx: node 'n' (PRelu): slope [2] is neither one element, per channel nor x's "
            "shape [2, 3]");
  EXPECT_EQ(import_error(with(6, "Gemm", {"", "w", "c"}, {}, {{3, 3}, {3}})),
            "m.onnx: node 'n' (Gemm): C is [3], not [2, 3], and broadcast is 0");
}

// Issue 27's ops: a malformed node is an error naming the node, the op and the values.
TEST(OnnxErrors, BadInputsOfIssue27Ops) {
  struct In {
    std::string name;
    int32_t type;
    std::vector<int64_t> dims;
  };
  auto model = [](const std::string& op, const std::vector<In>& ins,
                  const std::vector<std::pair<std::string, std::vector<int64_t>>>& consts,
                  const std::function<void(onnx::NodeProto*)>& attrs, int64_t opset = 16) {
    onnx::ModelProto m = empty_model(opset);
    std::vector<std::string> names;
    for (const In& i : ins) {
      set_type(m.mutable_graph()->add_input(), i.name, i.type, i.dims);
      names.push_back(i.name);
    }
    for (const auto& [name, v] : consts) {
      add_i64_initializer(m, name, v);
      names.push_back(name);
    }
    set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
    auto* n = add_node(m, op, names, {"y"}, "n");
    if (attrs) attrs(n);
    return m;
  };
  auto str_attr = [](onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  };
  EXPECT_EQ(import_error(model(
                "ScatterND",
                {{"d", TP::FLOAT, {4, 5}}, {"i", TP::INT64, {3, 1}}, {"u", TP::FLOAT, {3, 4}}}, {},
                nullptr)),
            "m.onnx: node 'n' (ScatterND): updates are [3, 4], expected [3, 5]");
  EXPECT_EQ(import_error(model("GatherElements", {{"d", TP::FLOAT, {4, 5}}, {"i", TP::INT64, {4}}},
                               {}, nullptr)),
            "m.onnx: node 'n' (GatherElements): data and indices must have the same rank >= 1, "
            "got [4, 5] and [4]");
  EXPECT_EQ(import_error(model("GatherND", {{"d", TP::FLOAT, {4, 5}}, {"i", TP::INT64, {2, 3}}}, {},
                               nullptr)),
            "m.onnx: node 'n' (GatherND): batch_dims 0 and index length 3 do not fit data [4, 5] "
            "and indices [2, 3]");
  EXPECT_EQ(import_error(model("Resize", {{"x", TP::FLOAT, {1, 1, 2, 2}}},
                               {{"roi", {}}, {"scales", {}}, {"sizes", {1, 1, 4}}}, nullptr, 13)),
            "m.onnx: node 'n' (Resize): scales, sizes and roi need 4 (roi 8) entries for input "
            "[1, 1, 2, 2]");
  EXPECT_EQ(import_error(model(
                "Resize", {{"x", TP::FLOAT, {1, 1, 2, 2}}}, {{"roi", {}}},
                [&](onnx::NodeProto* n) { str_attr(n, "mode", "area"); }, 13)),
            "m.onnx: node 'n' (Resize): exactly one of scales and sizes must be given");
  EXPECT_EQ(import_error(model("TopK", {{"x", TP::FLOAT, {3, 4}}}, {{"k", {5}}}, nullptr)),
            "m.onnx: node 'n' (TopK): K = 5 is outside [0, 4] (the size of axis 1)");
  EXPECT_EQ(import_error(model("DepthToSpace", {{"x", TP::FLOAT, {1, 8, 2, 2}}}, {},
                               [&](onnx::NodeProto* n) {
                                 add_int_attr(n, "blocksize", 2);
                                 str_attr(n, "mode", "RDC");
                               })),
            "m.onnx: node 'n' (DepthToSpace): mode 'RDC' is not DCR or CRD");
  EXPECT_EQ(
      import_error(model("Einsum", {{"a", TP::FLOAT, {2, 3}}, {"b", TP::FLOAT, {3, 4}}}, {},
                         [&](onnx::NodeProto* n) { str_attr(n, "equation", "ij,jk,kl->il"); })),
      "m.onnx: node 'n' (Einsum): equation 'ij,jk,kl->il' has 3 operands, the node 2 inputs");
  EXPECT_EQ(import_error(model("Einsum", {{"a", TP::FLOAT, {2, 3}}}, {},
                               [&](onnx::NodeProto* n) { str_attr(n, "equation", "ijk->i"); })),
            "m.onnx: node 'n' (Einsum): the term 'ijk' has 3 labels for an operand of rank 2");
  EXPECT_EQ(
      import_error(model("NegativeLogLikelihoodLoss",
                         {{"x", TP::FLOAT, {3, 5}}, {"t", TP::INT64, {4}}}, {}, nullptr)),
      "m.onnx: node 'n' (NegativeLogLikelihoodLoss): the target is [4], expected [3] for scores "
      "[3, 5]");
  EXPECT_EQ(import_error(model("SoftmaxCrossEntropyLoss",
                               {{"x", TP::FLOAT, {3, 5}}, {"t", TP::INT64, {3}}}, {},
                               [&](onnx::NodeProto* n) { str_attr(n, "reduction", "avg"); })),
            "m.onnx: node 'n' (SoftmaxCrossEntropyLoss): reduction 'avg' is not one of none, sum, "
            "mean");
  EXPECT_EQ(import_error(model("ConvTranspose",
                               {{"x", TP::FLOAT, {1, 2, 3, 3}}, {"w", TP::FLOAT, {3, 1, 2, 2}}}, {},
                               nullptr)),
            "m.onnx: node 'n' (ConvTranspose): the weight [3, 1, 2, 2] does not fit input "
            "[1, 2, 3, 3] with group 1");
  EXPECT_EQ(import_error(model("LRN", {{"x", TP::FLOAT, {1, 2, 3, 3}}}, {},
                               [&](onnx::NodeProto* n) { add_int_attr(n, "size", 0); })),
            "m.onnx: node 'n' (LRN): size must be at least 1, got 0");
  EXPECT_EQ(import_error(model("CumSum", {{"x", TP::FLOAT, {3}}}, {{"axis", {0, 1}}}, nullptr)),
            "m.onnx: node 'n' (CumSum): axis must have one element, got 2");
}

// The quantization ops (onnx_ops_quantize.cpp): a per-axis scale must fit x along `axis`, zero
// points must have x's dtype (DequantizeLinear), and only 8-bit integers are quantized to.
TEST(OnnxErrors, BadInputsOfQuantizeOps) {
  auto model = [](const std::string& op, int32_t xt, const std::vector<int64_t>& scale_dims,
                  int32_t zt) {
    onnx::ModelProto m = empty_model(13);
    set_type(m.mutable_graph()->add_input(), "x", xt, {2, 3});
    set_type(m.mutable_graph()->add_input(), "s", TP::FLOAT, scale_dims);
    set_type(m.mutable_graph()->add_input(), "z", zt, scale_dims);
    set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {2, 3});
    add_node(m, op, {"x", "s", "z"}, {"y"}, "n");
    return m;
  };
  EXPECT_EQ(import_error(model("QuantizeLinear", TP::FLOAT, {2}, TP::UINT8)),
            "m.onnx: node 'n' (QuantizeLinear): y_scale has 2 elements, x has 3 along axis 1");
  EXPECT_EQ(import_error(model("DequantizeLinear", TP::UINT8, {3}, TP::INT8)),
            "m.onnx: node 'n' (DequantizeLinear): x_zero_point has dtype i8, x has u8");
  EXPECT_EQ(import_error(model("DequantizeLinear", TP::UINT8, {1, 3}, TP::UINT8)),
            "m.onnx: node 'n' (DequantizeLinear): x_scale must be a scalar or 1-D, not of shape "
            "[1, 3]");
  EXPECT_THROW(import(model("QuantizeLinear", TP::FLOAT, {}, TP::INT32)), UnsupportedError);
  EXPECT_EQ(import_error(model("QuantizeLinear", TP::FLOAT, {}, TP::INT32)),
            "m.onnx: unsupported ops: QuantizeLinear (node 'n', opset 13: y_zero_point of dtype "
            "i32 (coil quantizes to uint8 and int8))");
}

// GridSample (onnx_ops_gridsample.cpp): the grid must be [N, Ho, Wo, 2] for X's N; modes are
// ONNX's (opset 16) names.
TEST(OnnxErrors, BadInputsOfGridSample) {
  auto model = [](const std::vector<int64_t>& grid, const std::string& mode) {
    onnx::ModelProto m = empty_model(16);
    set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {1, 2, 3, 4});
    set_type(m.mutable_graph()->add_input(), "g", TP::FLOAT, grid);
    set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {1, 2, 5, 6});
    auto* a = add_node(m, "GridSample", {"x", "g"}, {"y"}, "n")->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    return m;
  };
  EXPECT_EQ(import_error(model({1, 5, 6, 3}, "bilinear")),
            "m.onnx: node 'n' (GridSample): the grid is [1, 5, 6, 3], expected [1, Ho, Wo, 2] for "
            "X [1, 2, 3, 4]");
  EXPECT_EQ(import_error(model({1, 5, 6, 2}, "linear")),
            "m.onnx: node 'n' (GridSample): mode 'linear' is not bilinear, nearest or bicubic");
  EXPECT_EQ(import(model({1, 5, 6, 2}, "bicubic")).outputs().size(), 1u);
}

// Dropout in training mode: a ratio of 0 drops nothing (the identity, OnnxConformance's
// test_training_dropout_zero_ratio*); any other ratio draws random numbers, which coil refuses.
TEST(OnnxErrors, DropoutInTrainingModeNeedsRatioZero) {
  auto model = [](float ratio) {
    onnx::ModelProto m = empty_model(13);
    set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 3});
    set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {2, 3});
    auto* r = m.mutable_graph()->add_initializer();
    r->set_name("r");
    r->set_data_type(TP::FLOAT);
    r->add_float_data(ratio);
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name("t");
    t->set_data_type(TP::BOOL);
    t->add_int32_data(1);
    add_node(m, "Dropout", {"x", "r", "t"}, {"y"}, "n");
    return m;
  };
  EXPECT_EQ(import(model(0)).num_nodes(), 1);  // the input is the output
  EXPECT_EQ(import_error(model(0.5)),
            "m.onnx: unsupported ops: Dropout (node 'n', opset 13: training_mode is true with "
            "ratio 0.5 (random drops))");
}

// An attribute the mapping of an op does not read is accepted only at ONNX's default for the
// op and opset (from libonnx's schemas); any other value is unsupported, and a name the op
// does not have is an error.
TEST(OnnxErrors, UnreadAttributes) {
  onnx::ModelProto m = relu_model();
  add_int_attr(m.mutable_graph()->mutable_node(0), "alpha", 1);
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'relu' (Relu): attribute 'alpha' is not an attribute of Relu in opset "
            "13");
  // consumed_inputs (opsets 1 to 5) is a memory hint without meaning.
  m = relu_model(1);
  add_ints_attr(m.mutable_graph()->mutable_node(0), "consumed_inputs", {1});
  EXPECT_EQ(import(m).num_nodes(), 2);

  // One node, checked directly: which attributes its mapping read decides.
  Graph g;
  onnxfe::Namer names;
  onnxfe::SymbolicInts symbolic;
  onnxfe::SplitViews split_views;
  auto unread_error = [&](const std::string& op, int opset,
                          const std::function<void(onnx::NodeProto&)>& attrs,
                          const std::function<void(onnxfe::OnnxNode&)>& map = {}) {
    onnx::NodeProto p;
    p.set_op_type(op);
    attrs(p);
    onnxfe::OnnxNode n(g, names, symbolic, split_views, p, opset, {});
    if (map) map(n);
    try {
      n.check_unread_attrs();
    } catch (const onnxfe::Unsupported& u) {
      return "unsupported: " + u.reason;
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto alpha = [](float v) {
    return [v](onnx::NodeProto& p) {
      auto* a = p.add_attribute();
      a->set_name("alpha");
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(v);
    };
  };
  EXPECT_EQ(unread_error("LeakyRelu", 13, alpha(0.01f)), "");  // the default
  EXPECT_EQ(unread_error("LeakyRelu", 13, alpha(0.25f)),
            "unsupported: attribute 'alpha' = 0.25 is not implemented (only its default, 0.01)");
  EXPECT_EQ(unread_error("LeakyRelu", 13, alpha(0.25f),
                         [](onnxfe::OnnxNode& n) { n.attr_float("alpha", 0.01); }),
            "");
  EXPECT_EQ(unread_error("LeakyRelu", 13, alpha(0.25f),
                         [](onnxfe::OnnxNode& n) { n.ignore_attr("alpha"); }),
            "");
  // No default in the schema: any value is unsupported.
  EXPECT_EQ(unread_error("Conv", 11,
                         [](onnx::NodeProto& p) {
                           add_ints_attr(&p, "pads", {0, 0, 0, 0});
                         }),
            "unsupported: attribute 'pads' = [0, 0, 0, 0] is not implemented");
  // The default of the model's opset: Softmax's axis was 1 before opset 13, -1 from it.
  auto axis = [](int64_t v) { return [v](onnx::NodeProto& p) { add_int_attr(&p, "axis", v); }; };
  EXPECT_EQ(unread_error("Softmax", 11, axis(1)), "");
  EXPECT_EQ(unread_error("Softmax", 13, axis(1)),
            "unsupported: attribute 'axis' = 1 is not implemented (only its default, -1)");
  EXPECT_EQ(unread_error("Softmax", 13,
                         [](onnx::NodeProto& p) {
                           auto* a = p.add_attribute();
                           a->set_name("axis");
                           a->set_type(onnx::AttributeProto::FLOAT);
                           a->set_f(1);
                         }),
            "attribute 'axis' must be INT, got FLOAT");
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

// Sizes computed from symbolic dims (Shape of [N, 3]) are only shape arithmetic and shape
// arguments: used as data, cast to floats or output, they are reported, never computed with.
TEST(OnnxErrors, SymbolicSizesAreNotData) {
  auto model = [](const std::string& op, int32_t to = 0) {
    onnx::ModelProto m = empty_model(13);
    set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {-1, 3});
    add_node(m, "Shape", {"x"}, {"s"}, "shape");
    if (op == "Cast") {
      add_int_attr(add_node(m, "Cast", {"s"}, {"y"}, "cast"), "to", to);
    } else if (op == "Neg") {
      add_node(m, "Neg", {"s"}, {"y"}, "neg");
    } else {
      m.mutable_graph()->mutable_node(0)->set_output(0, "y");
    }
    set_type(m.mutable_graph()->add_output(), "y", to ? to : TP::INT64, {2});
    return m;
  };
  EXPECT_EQ(import_error(model("Neg")),
            "m.onnx: unsupported ops: Neg (node 'neg', opset 13: input 0 ('s') holds the symbolic "
            "sizes [N, 3], which coil computes with only in shape arithmetic and as a Reshape or "
            "Expand target)");
  EXPECT_EQ(import_error(model("Cast", TP::FLOAT)),
            "m.onnx: unsupported ops: Cast (node 'cast', opset 13: a cast of symbolic sizes to "
            "float)");
  EXPECT_EQ(import_error(model("")),
            "m.onnx: graph output 'y' holds sizes computed from symbolic dims (coil outputs "
            "tensors only)");
}

// A set of broken model files through the CLI (`coil check FILE`, under a 60 s `timeout`): each
// ends with exit status 2 (a coil::Error, printed with the file's name), or 3 for the valid
// models coil does not support, never 4 (an internal error), a signal or the timeout.
TEST(OnnxErrors, BrokenFilesThroughTheCli) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cli" / fmt::format("broken-onnx-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::map<std::string, std::string> files;  // name -> bytes
  std::string valid = relu_model().SerializeAsString();
  files["empty"] = "";
  files["garbage"] = "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01 not a model";
  files["truncated"] = valid.substr(0, valid.size() / 2);
  files["text_format"] = "input x: f32[4]\ny = relu(x)\noutput y\n";
  onnx::ModelProto m = relu_model();
  add_node(m, "Neg", {"b"}, {"a"}, "n1");
  add_node(m, "Neg", {"a"}, {"b"}, "n2");
  files["cycle"] = m.SerializeAsString();
  m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_input(0, "y");
  files["self_loop"] = m.SerializeAsString();
  m = relu_model();
  add_node(m, "Add", {"y", "y"}, {"z"}, "n3");
  add_node(m, "Mul", {"z", "w"}, {"w"}, "n4");  // a cycle through a second node
  files["cycle_via_output"] = m.SerializeAsString();
  m = relu_model();
  add_int_attr(add_node(m, "Softmax", {"y"}, {"z"}), "axis", 7);
  files["axis_out_of_range"] = m.SerializeAsString();
  m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("Softmax");
  auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("one");
  files["wrong_attribute_type"] = m.SerializeAsString();
  m = relu_model();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(int64_t{1} << 62);
  files["huge_dims"] = m.SerializeAsString();
  m = relu_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TP::FLOAT);
  w->add_dims(int64_t{1} << 40);
  files["huge_initializer"] = m.SerializeAsString();
  w->set_dims(0, 4);
  w->set_raw_data(std::string(3, 'x'));
  files["short_initializer"] = m.SerializeAsString();
  m = relu_model();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(-3);
  files["negative_dim"] = m.SerializeAsString();
  m = relu_model();
  add_node(m, "StringNormalizer", {"y"}, {"z"}, "up");
  files["unsupported_op"] = m.SerializeAsString();
  m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  files["undefined_input"] = m.SerializeAsString();
  m = relu_model();
  m.clear_graph();
  files["no_graph"] = m.SerializeAsString();
  files["opset_99"] = relu_model(99).SerializeAsString();
  m = relu_model();  // valid, with a 4 TiB input (the CLI makes random inputs): no memory
  for (int d : {0, 1})
    m.mutable_graph()
        ->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(d)
        ->set_dim_value(int64_t{1} << 20);
  files["huge_input"] = m.SerializeAsString();
  // Subgraphs nested 500 deep (If's then_branch): beyond protobuf's recursion limit.
  onnx::GraphProto inner;
  for (int depth = 0; depth < 500; ++depth) {
    onnx::GraphProto outer;
    auto* n = outer.add_node();
    n->set_op_type("If");
    auto* g = n->add_attribute();
    g->set_name("then_branch");
    g->set_type(onnx::AttributeProto::GRAPH);
    *g->mutable_g() = inner;
    inner = outer;
  }
  m = relu_model();
  *m.mutable_graph()->add_node() = inner.node(0);
  files["deep_nesting"] = m.SerializeAsString();
  for (const auto& [name, bytes] : files) std::ofstream(dir / (name + ".onnx")) << bytes;
  fs::create_directories(dir / "a_directory.onnx");
  files["a_directory"] = "";
  files["missing"] = "";
  fs::remove(dir / "missing.onnx");

  for (const auto& [name, bytes] : files) {
    SCOPED_TRACE(name);
    fs::path model = dir / (name + ".onnx");
    fs::path log = dir / (name + ".log");
    int status = std::system(fmt::format("timeout 60 '{}' check '{}' > '{}' 2>&1", COIL_CLI,
                                         model.string(), log.string())
                                 .c_str());
    std::ifstream in(log);
    std::stringstream out;
    out << in.rdbuf();
    ASSERT_TRUE(WIFEXITED(status)) << out.str();
    // A valid model coil cannot import (an op or opset it lacks) exits 3, a broken file 2.
    bool unsupported = name == "unsupported_op" || name == "opset_99";
    EXPECT_EQ(WEXITSTATUS(status), unsupported ? 3 : 2) << out.str();
    std::string want = name == "huge_input" ? "coil: error: cannot allocate 4398046511104 bytes"
                                            : "coil: error: " + model.string() + ": ";
    EXPECT_NE(out.str().find(want), std::string::npos) << out.str();
  }
  fs::remove_all(dir);
}

// Structural mutations of real models (ONNX node tests with several ops, and a hand-built one):
// inputs rewired (cycles, undefined values), nodes removed or duplicated, op types swapped,
// attributes retyped or given extreme values, dims and dtypes changed, opsets changed. Each
// mutant imports or fails with a coil::Error; what imports also goes through every stage up to
// the C++ source (decompose, lower, schedule, codegen), again with at worst a coil::Error.
TEST(OnnxErrors, MutatedModels) {
  namespace fs = std::filesystem;
  std::vector<onnx::ModelProto> seeds{relu_model()};
  fs::path data = "/usr/share/libonnx-testdata/data/node";
  for (const char* t : {"test_layer_normalization_4d_axis1_expanded",
                        "test_softmax_axis_0_expanded",
                        "test_gemm_all_attributes",
                        "test_conv_with_strides_and_asymmetric_padding",
                        "test_maxpool_2d_pads",
                        "test_averagepool_2d_ceil",
                        "test_reshape_reordered_all_dims",
                        "test_slice_neg_steps",
                        "test_pad",
                        "test_gather_0",
                        "test_split_equal_parts_1d",
                        "test_reduce_log_sum_exp_keepdims_random",
                        "test_batchnorm_epsilon",
                        "test_matmul_4d",
                        "test_tile",
                        "test_expand_dim_changed",
                        "test_argmax_keepdims_random_select_last_index",
                        "test_onehot_with_axis",
                        "test_trilu_lower",
                        "test_instancenorm_epsilon",
                        "test_lstm_with_peepholes",
                        "test_gru_with_initial_bias"}) {
    std::ifstream f(data / t / "model.onnx", std::ios::binary);
    onnx::ModelProto m;
    if (f && m.ParseFromIstream(&f)) seeds.push_back(m);
  }
  std::vector<std::string> ops;
  for (const auto& op : onnxfe::all_onnx_ops()) ops.emplace_back(op.name);
  std::mt19937 rng(11);
  auto pick = [&](auto n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const int64_t extremes[] = {0,
                              1,
                              -1,
                              2,
                              3,
                              -7,
                              1000,
                              int64_t{1} << 31,
                              int64_t{1} << 62,
                              std::numeric_limits<int64_t>::min()};
  int imported = 0, generated = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    onnx::ModelProto m = seeds[static_cast<size_t>(trial) % seeds.size()];
    auto* g = m.mutable_graph();
    std::string what;
    for (int k = 0; k <= trial % 3; ++k) {
      int nn = g->node_size();
      auto* node = nn > 0 ? g->mutable_node(pick(nn)) : nullptr;
      switch (pick(11)) {
        case 0:  // rewire an input to any value (maybe a later one: a cycle)
          if (node && node->input_size() > 0) {
            const auto& src = g->node(pick(nn));
            std::string v = src.output_size() > 0 ? src.output(0) : "nowhere";
            node->set_input(pick(node->input_size()), v);
            what += " rewire";
          }
          break;
        case 1:  // drop or blank an input
          if (node && node->input_size() > 0) {
            if (pick(2))
              node->mutable_input()->RemoveLast();
            else
              node->set_input(pick(node->input_size()), "");
            what += " drop-input";
          }
          break;
        case 2:  // another op
          if (node) node->set_op_type(ops[static_cast<size_t>(pick(ops.size()))]);
          what += " op=" + (node ? node->op_type() : "");
          break;
        case 3:  // an attribute's type or value
          if (node && node->attribute_size() > 0) {
            auto* a = node->mutable_attribute(pick(node->attribute_size()));
            int64_t v = extremes[pick(std::size(extremes))];
            if (pick(3) == 0) {
              a->set_type(static_cast<onnx::AttributeProto::AttributeType>(1 + pick(10)));
            } else if (a->type() == onnx::AttributeProto::INTS) {
              a->clear_ints();
              for (int i = pick(6); i > 0; --i) a->add_ints(extremes[pick(std::size(extremes))]);
            } else {
              a->set_i(v);
              a->set_f(static_cast<float>(v));
            }
            what += " attr=" + a->name();
          }
          break;
        case 4:  // a graph input's dim
          if (g->input_size() > 0) {
            auto* shape = g->mutable_input(pick(g->input_size()))
                              ->mutable_type()
                              ->mutable_tensor_type()
                              ->mutable_shape();
            if (shape->dim_size() > 0) {
              auto* d = shape->mutable_dim(pick(shape->dim_size()));
              if (pick(4) == 0)
                d->set_dim_param("n");
              else
                d->set_dim_value(extremes[pick(std::size(extremes))]);
            } else {
              shape->add_dim()->set_dim_value(3);
            }
            what += " dim";
          }
          break;
        case 5:  // a graph input's dtype
          if (g->input_size() > 0)
            g->mutable_input(pick(g->input_size()))
                ->mutable_type()
                ->mutable_tensor_type()
                ->set_elem_type(1 + pick(16));
          what += " dtype";
          break;
        case 6:  // an initializer's dims or dtype
          if (g->initializer_size() > 0) {
            auto* t = g->mutable_initializer(pick(g->initializer_size()));
            if (pick(2) && t->dims_size() > 0)
              t->set_dims(pick(t->dims_size()), extremes[pick(std::size(extremes))]);
            else
              t->set_data_type(1 + pick(16));
            what += " initializer";
          }
          break;
        case 7:  // remove a node
          if (nn > 0) {
            g->mutable_node()->SwapElements(pick(nn), nn - 1);
            g->mutable_node()->RemoveLast();
            what += " remove-node";
          }
          break;
        case 8:  // duplicate a node
          if (node) *g->add_node() = *node;
          what += " duplicate-node";
          break;
        case 9:  // another opset
          m.mutable_opset_import(0)->set_version(pick(19));
          what += " opset";
          break;
        default:  // an output renamed, or an extra output of some node
          if (g->output_size() > 0 && node && node->output_size() > 0)
            g->mutable_output(pick(g->output_size()))->set_name(node->output(0));
          what += " output";
          break;
      }
    }
    SCOPED_TRACE(fmt::format("trial {}:{}", trial, what));
    Graph graph;
    try {
      graph = import_onnx_bytes(m.SerializeAsString(), "mutant.onnx");
    } catch (const Error&) {
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "import: not a coil::Error: " << e.what();
      continue;
    }
    ++imported;
    CompileOptions opt;
    for (int id : graph.inputs())
      for (const auto& d : graph.node(id).type.shape)
        if (d.is_symbol()) opt.sizes[d.symbol_name()] = 2;
    try {
      generate_program(graph, opt);
      ++generated;
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "generate_program: not a coil::Error: " << e.what() << "\n"
                    << to_text(graph);
    }
  }
  std::cout << imported << " of 10000 mutants imported, " << generated << " generated C++\n";
  EXPECT_GT(imported, 500);
  EXPECT_GT(generated, 250);
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

// Inputs found by the libFuzzer target tests/fuzz/parsers/onnx_parser_fuzzer
// (tests/fuzz/README.md), minimized into models: each was a sanitizer report or a huge
// allocation, and is a coil::Error now.
TEST(OnnxErrors, LibFuzzerFindings) {
  // dims [2^31 - 1] with three int64_data values: 16 GiB were allocated before the mismatch.
  onnx::ModelProto m = relu_model();
  add_i64_initializer(m, "w", {2, 4, 9});
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, (int64_t{1} << 31) - 1);
  EXPECT_EQ(import_error(m),
            "m.onnx: initializer 'w': int64_data has 3 values for 2147483647 elements");

  // Split of a scalar read dim 0 of an empty shape.
  m = empty_model(13);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {});
  set_type(m.mutable_graph()->add_output(), "a", TP::FLOAT, {});
  add_node(m, "Split", {"x"}, {"a", "b"}, "split");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'split' (Split): Split needs an input with a dim 0, got rank 0");

  // Opset 6 broadcast=1 with B of a higher rank than A: the default axis was negative.
  m = empty_model(6);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {3});
  set_type(m.mutable_graph()->add_input(), "b", TP::FLOAT, {2, 3});
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {3});
  add_int_attr(add_node(m, "Add", {"x", "b"}, {"y"}, "add"), "broadcast", 1);
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'add' (Add): B [2, 3] has more dims than A [3] (broadcast=1)");

  // ConstantOfShape of [0, 2^62, 4]: no elements, but strides that overflow int64.
  m = relu_model();
  add_i64_initializer(m, "shape", {0, int64_t{1} << 62, 4});
  add_node(m, "ConstantOfShape", {"shape"}, {"c"}, "cos");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'cos' (ConstantOfShape): cannot allocate a f32 tensor of shape [0, "
            "4611686018427387904, 4]: its strides overflow int64");

  // A Reshape target with -1 whose other entries multiply past int64.
  m = relu_model();
  add_i64_initializer(m, "target", {64, std::numeric_limits<int64_t>::max(), -1});
  add_node(m, "Reshape", {"y", "target"}, {"r"}, "reshape");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'reshape' (Reshape): the target shape [64, 9223372036854775807, -1] has "
            "more than 2^63 elements");

  // Trilu's k (and OneHot's depth, an integer Range's start and delta) converted a double out
  // of int64's range.
  m = relu_model();
  auto* k = m.mutable_graph()->add_initializer();
  k->set_name("k");
  k->set_data_type(TP::FLOAT);
  k->add_float_data(7e36f);
  add_node(m, "Trilu", {"y", "k"}, {"t"}, "trilu");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'trilu' (Trilu): k is 7.000000207201189e+36, outside the int64 range");

  // Constants whose sizes, zeros counted as ones, multiply to 2^31 or more printed to text that
  // did not parse back: an empty initializer, and an empty result of an input's huge dims.
  m = relu_model();
  add_i64_initializer(m, "e", {});
  m.mutable_graph()->mutable_initializer(0)->clear_dims();
  for (int64_t d : {int64_t{2147483647}, int64_t{0}, int64_t{2}})
    m.mutable_graph()->mutable_initializer(0)->add_dims(d);
  EXPECT_EQ(import_error(m),
            "m.onnx: initializer 'e': shape [2147483647, 0, 2] is too large for a constant (its "
            "sizes, zeros counted as ones, multiply to 2^31 or more)");
  m = empty_model();
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 2147483647, 1});
  set_type(m.mutable_graph()->add_output(), "z", TP::FLOAT, {2, 2147483647, 0});
  add_i64_initializer(m, "shape", {1, 1, 0});
  add_node(m, "Expand", {"x", "shape"}, {"z"}, "expand");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'expand' (Expand): the f32 result [2, 2147483647, 0] is too large for a "
            "constant (its sizes, zeros counted as ones, multiply to 2^31 or more)");

  // auto_pad SAME_LOWER with a kernel_shape of 2^63 - 1 overflowed the padding's total.
  m = empty_model(11);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {1, 3, 32, 32});
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {1, 3, 32, 32});
  auto* pool = add_node(m, "MaxPool", {"x"}, {"y"}, "pool");
  add_ints_attr(pool, "kernel_shape", {std::numeric_limits<int64_t>::max(), 1});
  add_ints_attr(pool, "dilations", {2, 1});
  auto* auto_pad = pool->add_attribute();
  auto_pad->set_name("auto_pad");
  auto_pad->set_type(onnx::AttributeProto::STRING);
  auto_pad->set_s("SAME_LOWER");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'pool' (MaxPool): auto_pad SAME_LOWER: kernel_shape "
            "9223372036854775807 with dilations 2 overflows int64");
  pool->mutable_attribute(0)->set_ints(0, 3);
  add_ints_attr(pool, "strides", {0, 1});  // would divide by zero (the pools check first)
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'pool' (MaxPool): kernel_shape [3, 1], strides [0, 1] and dilations "
            "[2, 1] must be at least 1");

  // Pad's pads of 2^31 - 1 and 2^63 - 1 overflowed their sum with the dim.
  m = empty_model();
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {4});
  set_type(m.mutable_graph()->add_output(), "p", TP::FLOAT, {4});
  add_i64_initializer(m, "pads", {2147483647, std::numeric_limits<int64_t>::max()});
  add_node(m, "Pad", {"x", "pads"}, {"p"}, "pad");
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'pad' (Pad): pads 2147483647 and 9223372036854775807 of dim 0 (size 4) "
            "overflow int64");

  // Pad in mode edge of a dim of 2^31 built 2^31 indices (16 GiB) before anything else.
  m = empty_model(6);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, int64_t{1} << 31});
  set_type(m.mutable_graph()->add_output(), "p", TP::FLOAT, {2, (int64_t{1} << 31) + 1});
  auto* pad = add_node(m, "Pad", {"x"}, {"p"}, "pad");
  add_ints_attr(pad, "pads", {0, 0, 0, 1});
  auto* mode = pad->add_attribute();
  mode->set_name("mode");
  mode->set_type(onnx::AttributeProto::STRING);
  mode->set_s("edge");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: Pad (node 'pad', opset 6: mode 'edge' along a dim of "
            "2147483649 elements (at most 16777216))");

  // A bool initializer's raw_data bytes other than 0 and 1 were loaded as bool when folding
  // (undefined): they are read in as true.
  m = empty_model();
  auto* b = m.mutable_graph()->add_initializer();
  b->set_name("b");
  b->set_data_type(TP::BOOL);
  b->add_dims(3);
  b->set_raw_data(std::string("\x22\x00\xff", 3));
  set_type(m.mutable_graph()->add_output(), "n", TP::BOOL, {3});
  add_node(m, "Not", {"b"}, {"n"}, "not");
  Graph g = import(m);
  const Tensor& n = *g.node(g.outputs()[0].node).data;
  ASSERT_EQ(n.numel(), 3);
  const auto* bytes = static_cast<const uint8_t*>(n.data());
  EXPECT_EQ(std::vector<int>(bytes, bytes + 3), (std::vector<int>{0, 1, 0}));
}

}  // namespace
}  // namespace coil

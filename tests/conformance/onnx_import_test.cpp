// The ONNX importer on hand-built models: symbolic dims, folding of shape subgraphs, weights as
// inputs, name sanitizing, and the CLI on .onnx files.
#include <gtest/gtest.h>

#include <unistd.h>
#include "support/error_of.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/interpreter.h"
#include "support/check_graph.h"
#include "support/npy.h"

namespace coil {
namespace {

using namespace onnx_test;
namespace fs = std::filesystem;

using coil::testing::error_of;

// x: f32[N, 3, 4] -> Relu -> Reshape [0, -1] -> Softmax -> ReduceSum(axes=[1], keepdims=0)
onnx::ModelProto symbolic_model() {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {-1, 3, 4}, "batch size");
  set_type(g->add_output(), "y", TP::FLOAT, {-1}, "batch size");
  add_i64_initializer(m, "shape", {0, -1});
  add_i64_initializer(m, "axes", {1});
  add_node(m, "Relu", {"x"}, {"r"});
  add_node(m, "Reshape", {"r", "shape"}, {"f"});
  add_node(m, "Softmax", {"f"}, {"s"});
  add_int_attr(add_node(m, "ReduceMax", {"s"}, {"y"}), "keepdims", 0);
  add_ints_attr(g->mutable_node(3), "axes", {1});
  return m;
}

TEST(OnnxImport, SymbolicDims) {
  Graph g = import(symbolic_model());
  const Node& x = g.node(g.inputs()[0]);
  EXPECT_EQ(shape_str(x.type.shape), "[batch_size, 3, 4]");
  EXPECT_EQ(shape_str(g.node(g.outputs()[0].node).type.shape), "[batch_size]");
  CompileOptions opt;
  opt.sizes["batch_size"] = 5;
  Tensor in = random_tensor(DType::F32, {5, 3, 4}, 3);
  EXPECT_TRUE(testing::matches_reference(g, {in}, opt));
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds into one reshape.
TEST(OnnxImport, ShapeSubgraphsFold) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {2, 3, 4});
  set_type(g->add_output(), "y", TP::FLOAT, {2, 12});
  add_i64_initializer(m, "zero", {0}, true);
  add_i64_initializer(m, "axes", {0});
  add_i64_initializer(m, "rest", {-1});
  add_node(m, "Shape", {"x"}, {"s"});
  add_node(m, "Gather", {"s", "zero"}, {"b"});
  add_node(m, "Unsqueeze", {"b", "axes"}, {"b1"});
  add_int_attr(add_node(m, "Concat", {"b1", "rest"}, {"target"}), "axis", 0);
  add_node(m, "Reshape", {"x", "target"}, {"y"});
  Graph graph = import(m);
  ASSERT_EQ(graph.num_nodes(), 2) << to_text(graph);
  EXPECT_EQ(graph.node(graph.outputs()[0].node).op_name(), "reshape");
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[2, 12]");
}

// Gather with indices from a graph input (an embedding lookup) maps to coil's gather.
TEST(OnnxImport, GatherWithDynamicIndices) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "table", TP::FLOAT, {10, 4});
  set_type(g->add_input(), "ids", TP::INT64, {2, 3});
  set_type(g->add_output(), "y", TP::FLOAT, {2, 3, 4});
  set_type(g->add_output(), "z", TP::FLOAT, {10, 2, 3});
  add_node(m, "Gather", {"table", "ids"}, {"e"});
  add_node(m, "Relu", {"e"}, {"y"});
  add_int_attr(add_node(m, "Gather", {"table", "ids"}, {"z"}), "axis", -1);
  Graph graph = import(m);
  int gathers = 0;
  for (int id = 0; id < graph.num_nodes(); ++id) gathers += graph.node(id).op_name() == "gather";
  EXPECT_EQ(gathers, 2) << to_text(graph);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[2, 3, 4]");
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[1].node).type.shape), "[10, 2, 3]");
  Tensor table = random_tensor(DType::F32, {10, 4}, 1);
  Tensor ids = Tensor::empty(DType::I64, {2, 3});
  const int64_t v[] = {0, 3, -1, 2, -4, 1};  // also valid for axis -1 (size 4)
  for (int k = 0; k < 6; ++k) ids.data_as<int64_t>()[k] = v[k];
  EXPECT_TRUE(testing::matches_reference(graph, {table, ids}));
}

// Det's Leibniz expansion (onnx_ops_linalg.cpp) against Gaussian elimination with partial
// pivoting in double, at 3x3 and batched 4x4 (the node tests have only 2x2); 5x5 is refused.
TEST(OnnxImport, DetMatchesElimination) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "a", TP::FLOAT, {5, 4, 4});
  set_type(g->add_input(), "b", TP::FLOAT, {3, 3});
  set_type(g->add_output(), "y", TP::FLOAT, {5});
  set_type(g->add_output(), "z", TP::FLOAT, {});
  add_node(m, "Det", {"a"}, {"y"});
  add_node(m, "Det", {"b"}, {"z"});
  Tensor a = random_tensor(DType::F32, {5, 4, 4}, 3), b = random_tensor(DType::F32, {3, 3}, 4);
  auto eliminate = [](const float* p, int k) {
    std::vector<double> x(p, p + k * k);
    double det = 1;
    for (int c = 0; c < k; ++c) {
      int piv = c;
      for (int r = c + 1; r < k; ++r)
        if (std::abs(x[r * k + c]) > std::abs(x[piv * k + c])) piv = r;
      if (piv != c) {
        for (int j = 0; j < k; ++j) std::swap(x[c * k + j], x[piv * k + j]);
        det = -det;
      }
      det *= x[c * k + c];
      for (int r = c + 1; r < k; ++r) {
        double f = x[r * k + c] / x[c * k + c];
        for (int j = c; j < k; ++j) x[r * k + j] -= f * x[c * k + j];
      }
    }
    return det;
  };
  std::vector<Tensor> got = compile(import(m)).run({a, b});
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(got[0].data_as<float>()[i], eliminate(a.data_as<float>() + 16 * i, 4), 1e-5)
        << "matrix " << i;
  EXPECT_NEAR(got[1].data_as<float>()[0], eliminate(b.data_as<float>(), 3), 1e-5);

  onnx::ModelProto big = empty_model(13);
  set_type(big.mutable_graph()->add_input(), "a", TP::FLOAT, {5, 5});
  set_type(big.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  add_node(big, "Det", {"a"}, {"y"}, "n");
  EXPECT_EQ(error_of([&] { import(big); }),
            "m.onnx: unsupported ops: Det (node 'n', opset 13: 5x5 matrices (coil expands "
            "determinants up to 4x4))");
}

// Weights listed as graph inputs too (IR < 4) are constants; names become identifiers.
// uint32 and uint64 initializers without raw_data are in uint64_data (onnx.proto), int16 and
// uint16 ones in int32_data; values at the top of each range survive the import and the ops.
TEST(OnnxImport, WideIntegerInitializers) {
  struct Row {
    int32_t elem;
    DType dtype;
    uint64_t top;
  };
  for (Row r : {Row{TP::UINT64, DType::U64, ~uint64_t{0}}, Row{TP::UINT32, DType::U32, 0xffffffffu},
                Row{TP::UINT16, DType::U16, 0xffffu}, Row{TP::INT16, DType::I16, 0x7fffu}}) {
    SCOPED_TRACE(dtype_name(r.dtype));
    onnx::ModelProto m = empty_model(13);
    auto* g = m.mutable_graph();
    set_type(g->add_input(), "x", r.elem, {2});
    set_type(g->add_output(), "y", r.elem, {2});
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(r.elem);
    w->add_dims(2);
    for (uint64_t v : {r.top, uint64_t{3}}) {
      if (r.elem == TP::UINT64 || r.elem == TP::UINT32)
        w->add_uint64_data(v);
      else
        w->add_int32_data(static_cast<int32_t>(v));
    }
    add_node(m, "Max", {"x", "w"}, {"y"});
    Graph graph = import(m);
    EXPECT_EQ(graph.node(graph.inputs()[0]).type.dtype, r.dtype);
    Tensor x = Tensor::empty(r.dtype, {2});
    std::memset(x.data(), 0, 2 * static_cast<size_t>(dtype_size(r.dtype)));
    x.set_from_double(1, 5);
    for (const auto& out : {compile(graph).run({x}), interpret(graph, {x})}) {
      uint64_t got0 = 0;
      std::memcpy(&got0, out[0].data(), static_cast<size_t>(dtype_size(r.dtype)));
      EXPECT_EQ(got0, r.top);
      EXPECT_EQ(out[0].item_as_double(1), 5.0);
    }
  }
}

TEST(OnnxImport, InitializersAndNames) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "input.1", TP::FLOAT, {3});
  set_type(g->add_input(), "0", TP::FLOAT, {3});
  set_type(g->add_input(), "a_b", TP::FLOAT, {3});
  set_type(g->add_input(), "a.b", TP::FLOAT, {3});
  auto* w = g->add_initializer();
  w->set_name("0");
  w->set_data_type(TP::FLOAT);
  w->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) w->add_float_data(v);
  add_node(m, "Add", {"input.1", "0"}, {"s"});
  add_node(m, "Sum", {"s", "a_b", "a.b"}, {"out.0"});
  set_type(g->add_output(), "out.0", TP::FLOAT, {3});
  Graph graph = import(m);
  ASSERT_EQ(graph.inputs().size(), 3u);
  EXPECT_EQ(graph.node(graph.inputs()[0]).name, "input_1");
  EXPECT_EQ(graph.node(graph.inputs()[1]).name, "a_b");
  EXPECT_EQ(graph.node(graph.inputs()[2]).name, "a_b_2");
  EXPECT_EQ(graph.outputs()[0].name, "out_0");
  // The model's own names are kept where coil's differ (issue 27): compiled models show and
  // accept both.
  EXPECT_EQ(graph.node(graph.inputs()[0]).source_name, "input.1");
  EXPECT_EQ(graph.node(graph.inputs()[1]).source_name, "");
  EXPECT_EQ(graph.node(graph.inputs()[2]).source_name, "a.b");
  EXPECT_EQ(graph.outputs()[0].source_name, "out.0");
  {
    CompiledModel cm = compile(graph);
    EXPECT_EQ(cm.inputs()[0].source_name, "input.1");
    EXPECT_EQ(cm.outputs()[0].source_name, "out.0");
    EXPECT_EQ(find_value(cm.inputs(), "input.1"), 0u);
    EXPECT_EQ(find_value(cm.inputs(), "input_1"), 0u);
    EXPECT_EQ(find_value(cm.inputs(), "a.b"), 2u);
    EXPECT_EQ(find_value(cm.inputs(), "a_b"), 1u);  // coil's own name first
    EXPECT_EQ(find_value(cm.inputs(), "nope"), std::nullopt);
    EXPECT_EQ(value_names(cm.inputs()), "input_1 (input.1), a_b, a_b_2 (a.b)");
    // The warm path (the whole-graph cache) keeps them too.
    CompiledModel warm = compile(graph);
    EXPECT_TRUE(warm.report().model_cache_hit);
    EXPECT_EQ(warm.inputs()[2].source_name, "a.b");
    EXPECT_EQ(warm.outputs()[0].source_name, "out.0");
  }
  EXPECT_EQ(sanitize_onnx_name("9lives"), "v9lives");
  EXPECT_EQ(sanitize_onnx_name("a__b"), "a_b");
  EXPECT_EQ(sanitize_onnx_name(""), "v");
  Tensor x = random_tensor(DType::F32, {3}, 1);
  EXPECT_TRUE(testing::matches_reference(graph, {x, x, x}));
}

// Inputs bound by OnnxImportOptions fold like constants.
TEST(OnnxImport, InputValues) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {2, 6});
  set_type(g->add_input(), "shape", TP::INT64, {2});
  set_type(g->add_output(), "y", TP::FLOAT, {3, 4});
  add_node(m, "Reshape", {"x", "shape"}, {"y"});
  std::string bytes = m.SerializeAsString();
  EXPECT_NE(
      std::string(error_of([&] {
        import_onnx_bytes(bytes, "m.onnx");
      })).find("Reshape (node #0 (output 'y'), opset 13: the target shape is not a constant)"),
      std::string::npos);
  OnnxImportOptions opt;
  Tensor shape = Tensor::empty(DType::I64, {2});
  shape.data_as<int64_t>()[0] = 3;
  shape.data_as<int64_t>()[1] = 4;
  opt.input_values["shape"] = shape;
  Graph graph = import_onnx_bytes(bytes, "m.onnx", opt);
  EXPECT_EQ(graph.inputs().size(), 1u);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[3, 4]");
}

// Shapes of tensors with symbolic dims: Shape, Size and the arithmetic on them (Gather, Mul, Div,
// Unsqueeze, Concat, Slice, Cast) are size expressions at import, so Reshape and Expand to them
// fold into views, as exporters emit with a dynamic batch.
TEST(OnnxImport, SymbolicShapeArithmetic) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {-1, 6});
  set_type(g->add_output(), "y", TP::FLOAT, {-1, 3}, "M");
  add_i64_initializer(m, "zero", {0}, true);
  add_i64_initializer(m, "two", {2}, true);
  add_i64_initializer(m, "three", {3}, true);
  add_i64_initializer(m, "axes", {0});
  add_i64_initializer(m, "one_to_two", {1, 2});  // Slice starts [1], ends [2] below
  add_i64_initializer(m, "starts", {1});
  add_i64_initializer(m, "ends", {2});
  add_i64_initializer(m, "dim3", {3});
  add_node(m, "Shape", {"x"}, {"s"});
  add_node(m, "Gather", {"s", "zero"}, {"n"});  // N
  add_node(m, "Mul", {"n", "two"}, {"n2"});     // 2N
  add_node(m, "Unsqueeze", {"n2", "axes"}, {"n2u"});
  add_int_attr(add_node(m, "Concat", {"n2u", "dim3"}, {"target"}), "axis", 0);
  add_node(m, "Reshape", {"x", "target"}, {"r"});  // [2N, 3]
  add_node(m, "Size", {"x"}, {"size"});            // 6N
  add_node(m, "Div", {"size", "three"}, {"d"});    // 2N
  add_node(m, "Cast", {"d"}, {"d32"});
  add_int_attr(g->mutable_node(g->node_size() - 1), "to", TP::INT32);
  add_node(m, "Cast", {"d32"}, {"d64"});
  add_int_attr(g->mutable_node(g->node_size() - 1), "to", TP::INT64);
  add_node(m, "Unsqueeze", {"d64", "axes"}, {"du"});
  add_node(m, "Slice", {"s", "starts", "ends"}, {"six"});  // [6]
  add_node(m, "Div", {"six", "two"}, {"half"});            // [3]
  add_int_attr(add_node(m, "Concat", {"du", "half"}, {"target2"}), "axis", 0);
  add_node(m, "Expand", {"r", "target2"}, {"e"});  // [2N, 3]: the same shape
  add_node(m, "Relu", {"e"}, {"y"});
  Graph graph = import(m);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[2*N, 3]");
  CompileOptions opt;
  opt.sizes["N"] = 5;
  EXPECT_TRUE(testing::matches_reference(graph, {random_tensor(DType::F32, {5, 6}, 4)}, opt));
}

// What torch's exporter emits around a grown KV cache (export_models.py's llama_decode_dynamic):
// a shape list reshaped to 1-D and measured with Shape, Expand's -1 fixed up with
// Where(Equal(shape, -1), 1, shape), and the last positions sliced off a symbolic dim ([-3:],
// which python clamps below 3).
TEST(OnnxImport, SymbolicShapeListsAndTailSlice) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {-1, 6});
  set_type(g->add_output(), "y", TP::FLOAT, {-1, 6});
  add_i64_initializer(m, "flat", {-1});
  add_i64_initializer(m, "minus_ones", {-1, -1});
  add_i64_initializer(m, "ones", {1, 1});
  add_i64_initializer(m, "starts", {-3});
  add_i64_initializer(m, "ends", {std::numeric_limits<int64_t>::max()});
  add_i64_initializer(m, "axes", {0});
  add_node(m, "Shape", {"x"}, {"s"});                  // [N, 6]
  add_node(m, "Reshape", {"s", "flat"}, {"sf"});       // the same list
  add_node(m, "Shape", {"sf"}, {"len"});               // [2]
  add_node(m, "Equal", {"sf", "minus_ones"}, {"eq"});  // [false, false]
  add_node(m, "Where", {"eq", "ones", "sf"}, {"target"});
  add_node(m, "Expand", {"x", "target"}, {"e"});                    // [N, 6]
  add_node(m, "Slice", {"e", "starts", "ends", "axes"}, {"last"});  // [min(N, 3), 6]
  add_node(m, "Relu", {"last"}, {"y"});
  Graph graph = import(m);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[min(N, 3), 6]");
  for (int64_t n : {1, 2, 3, 5}) {
    CompileOptions opt;
    opt.sizes["N"] = n;
    EXPECT_TRUE(testing::matches_reference(graph, {random_tensor(DType::F32, {n, 6}, 4)}, opt));
  }
}

// Comparisons whose answer depends on the size, and a negative step along a symbolic dim, are
// refused with the sizes named.
TEST(OnnxImport, SizeDependentShapeArithmeticIsRefused) {
  auto model = [](const std::string& what) {
    onnx::ModelProto m = empty_model(13);
    auto* g = m.mutable_graph();
    set_type(g->add_input(), "x", TP::FLOAT, {-1, 6});
    set_type(g->add_output(), "y", TP::FLOAT, {-1, 6});
    add_i64_initializer(m, "three_six", {3, 6});
    add_i64_initializer(m, "starts", {-1});
    add_i64_initializer(m, "ends", {std::numeric_limits<int64_t>::min()});
    add_i64_initializer(m, "axes", {0});
    add_i64_initializer(m, "steps", {-1});
    if (what == "equal") {
      add_node(m, "Shape", {"x"}, {"s"});
      add_node(m, "Equal", {"s", "three_six"}, {"eq"});
      add_node(m, "Where", {"eq", "three_six", "s"}, {"t"});
      add_node(m, "Expand", {"x", "t"}, {"y"});
    } else {
      add_node(m, "Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});  // reversed
    }
    return m;
  };
  EXPECT_NE(import_error(model("equal")).find("a comparison of the sizes N and 3"),
            std::string::npos)
      << import_error(model("equal"));
  EXPECT_NE(import_error(model("slice"))
                .find("Slice [-1, -9223372036854775808) step -1 along the symbolic dim 0 (N)"),
            std::string::npos)
      << import_error(model("slice"));
}

// A size divided by a negative constant truncates as ONNX's integer Div does (found by the ONNX
// parser's libFuzzer run: floordiv(15*N, -7) was an internal error): Size(x) / -3 * -1 = 2N.
TEST(OnnxImport, SymbolicSizeDividedByANegativeConstant) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {-1, 6});
  set_type(g->add_output(), "y", TP::FLOAT, {-1, 3}, "M");
  add_i64_initializer(m, "minus_three", {-3}, true);
  add_i64_initializer(m, "minus_one", {-1}, true);
  add_i64_initializer(m, "axes", {0});
  add_i64_initializer(m, "dim3", {3});
  add_node(m, "Size", {"x"}, {"size"});                // 6N
  add_node(m, "Div", {"size", "minus_three"}, {"d"});  // -2N
  add_node(m, "Mul", {"d", "minus_one"}, {"n2"});      // 2N
  add_node(m, "Unsqueeze", {"n2", "axes"}, {"n2u"});
  add_int_attr(add_node(m, "Concat", {"n2u", "dim3"}, {"target"}), "axis", 0);
  add_node(m, "Reshape", {"x", "target"}, {"y"});
  Graph graph = import(m);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[2*N, 3]");
  CompileOptions opt;
  opt.sizes["N"] = 7;
  EXPECT_TRUE(testing::matches_reference(graph, {random_tensor(DType::F32, {7, 6}, 4)}, opt));
}

// Opsets 1 to 6: binary ops broadcast B onto A from `axis` (legacy broadcast=1), Cast-1 names
// its type, Concat-1's axis defaults to 1, PRelu-6's 1-D slope is per channel; the legacy
// attributes (consumed_inputs, is_test=1) are accepted.
TEST(OnnxImport, LegacyOpsets) {
  onnx::ModelProto m = empty_model(6);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {2, 3, 4});
  set_type(g->add_input(), "b", TP::FLOAT, {3});
  set_type(g->add_input(), "c", TP::FLOAT, {3, 1});
  auto* add = add_node(m, "Add", {"x", "b"}, {"s"});
  add_int_attr(add, "broadcast", 1);
  add_int_attr(add, "axis", 1);
  add_ints_attr(add, "consumed_inputs", {0, 0});
  auto* mul = add_node(m, "Mul", {"s", "c"}, {"p"});  // [3, 1] at axis 1: per j, all k
  add_int_attr(mul, "broadcast", 1);
  add_int_attr(mul, "axis", 1);
  add_node(m, "PRelu", {"p", "b"}, {"r"});           // slope [3]: per channel (dim 1)
  add_node(m, "Concat", {"r", "x"}, {"cat"});        // axis 1 (Concat-1's default)
  auto* cast = add_node(m, "Cast", {"cat"}, {"y"});  // Cast-1 names the type
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::STRING);
  to->set_s("DOUBLE");
  auto* dropout = add_node(m, "Dropout", {"y"}, {"z"});
  add_int_attr(dropout, "is_test", 1);
  set_type(g->add_output(), "z", TP::DOUBLE, {2, 6, 4});
  m.mutable_opset_import(0)->set_version(4);  // Concat-4 needs its axis
  EXPECT_EQ(error_of([&] { import(m); }),
            "m.onnx: node #3 (output 'cat') (Concat): attribute 'axis' is required");
  m.mutable_opset_import(0)->set_version(3);
  Graph graph = import(m);
  EXPECT_EQ(shape_str(graph.node(graph.outputs()[0].node).type.shape), "[2, 6, 4]");
  Tensor x = random_tensor(DType::F32, {2, 3, 4}, 1), b = random_tensor(DType::F32, {3}, 2),
         c = random_tensor(DType::F32, {3, 1}, 3);
  std::vector<Tensor> out = interpret(graph, {x, b, c});
  ASSERT_EQ(out[0].dtype(), DType::F64);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        double xv = x.item_as_double((i * 3 + j) * 4 + k), bj = b.item_as_double(j);
        double p = static_cast<float>(static_cast<float>(xv + bj) * c.item_as_double(j));
        double want = p < 0 ? static_cast<float>(p * bj) : p;
        EXPECT_NEAR(out[0].item_as_double((i * 6 + j) * 4 + k), want, 1e-6) << i << j << k;
        EXPECT_EQ(out[0].item_as_double((i * 6 + 3 + j) * 4 + k), xv);
      }
    }
  }
  EXPECT_TRUE(testing::matches_reference(graph, {x, b, c}));
}

// CNNs shaped like torchvision's resnet18 and mobilenet_v2 (Conv + BatchNormalization + Relu /
// Clip, MaxPool, depthwise Conv, residual Add, GlobalAveragePool, Flatten, Gemm, a dynamic
// batch) and a model of pooling corner cases, exported by torch.onnx
// (torch_cnn_export.py): the imported graph, run by the reference interpreter, matches torch.
// (Compiled runs wait for the conv and matmul lowerings.)
TEST(OnnxImport, TorchExportedCnns) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cli" / fmt::format("torch-cnn-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd = fmt::format("'{}' '{}/tests/conformance/torch_cnn_export.py' '{}' 2>&1",
                                COIL_PYTHON, COIL_SOURCE_DIR, dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const char* name : {"resnetish", "mobilenetish", "pools"}) {
    SCOPED_TRACE(name);
    Graph g = import_onnx(dir / fmt::format("{}.onnx", name));
    std::set<std::string> ops;
    for (const auto& n : g.nodes()) ops.insert(std::string(n->op_name()));
    if (std::string(name) != "pools") {
      EXPECT_EQ(shape_str(g.node(g.inputs()[0]).type.shape).substr(0, 6), "[batch");
      for (const char* op : {"conv2d", "addmm"}) EXPECT_TRUE(ops.count(op)) << op;
    } else {
      for (const char* op : {"max_pool2d", "avg_pool2d", "matmul"})
        EXPECT_TRUE(ops.count(op)) << op;
    }
    Tensor x = read_npy(dir / fmt::format("{}_in.npy", name));
    Tensor want = read_npy(dir / fmt::format("{}_out.npy", name));
    std::vector<Tensor> got = interpret(g, {x});
    ASSERT_EQ(got.size(), 1u);
    CompareResult c = compare_tensors(got[0], want, Tolerance{1e-4, 1e-5});
    EXPECT_TRUE(c.ok) << c.message;
  }
  fs::remove_all(dir);
}

struct OnnxCli : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::path(COIL_BINARY_DIR) / "test-cli" /
          fmt::format("onnx-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                      getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "model.onnx", std::ios::binary) << symbolic_model().SerializeAsString();
  }
  void TearDown() override { fs::remove_all(dir); }
  int coil(const std::string& args, std::string* out) {
    fs::path log = dir / "stdout.txt";
    int rc = std::system(fmt::format("'{}' {} > '{}' 2>&1", COIL_CLI, args, log.string()).c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return WEXITSTATUS(rc);
  }
};

TEST_F(OnnxCli, CheckRunBench) {
  std::string model = (dir / "model.onnx").string(), out;
  ASSERT_EQ(coil(fmt::format("check '{}' --size batch_size=4", model), &out), 0) << out;
  EXPECT_NE(out.find("check passed"), std::string::npos) << out;
  ASSERT_EQ(coil(fmt::format("run '{}' --size batch_size=2 --output-dir '{}'", model,
                             (dir / "res").string()),
                 &out),
            0)
      << out;
  EXPECT_TRUE(fs::exists(dir / "res" / "y.npy")) << out;
  ASSERT_EQ(coil(fmt::format("bench '{}' --size batch_size=8 --runs 3 --json", model), &out), 0)
      << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["runs"], 3);
}

// A valid model with an op coil lacks exits 3 (unsupported), not 2 (a bad input).
// Inputs and outputs under the model's own names (torch.onnx's "onnx::Gemm_0" and "4"), and
// an unknown name listing both spellings.
TEST_F(OnnxCli, TheModelsOwnNamesAreAccepted) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "onnx::Gemm_0", TP::FLOAT, {2, 3});
  add_node(m, "Relu", {"onnx::Gemm_0"}, {"4"});
  set_type(g->add_output(), "4", TP::FLOAT, {2, 3});
  std::string model = (dir / "named.onnx").string(), out;
  std::ofstream(model, std::ios::binary) << m.SerializeAsString();
  Tensor x = random_tensor(DType::F32, {2, 3}, 7);
  write_npy(dir / "x.npy", x);
  write_npy(dir / "y.npy", interpret(import(m), {x})[0]);
  ASSERT_EQ(coil(fmt::format("run '{}' --input 'onnx::Gemm_0={}' --output-dir '{}'", model,
                             (dir / "x.npy").string(), (dir / "res").string()),
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("output '4'"), std::string::npos) << out;
  ASSERT_EQ(coil(fmt::format("check '{}' --input 'onnx::Gemm_0={}' --expect '4={}'", model,
                             (dir / "x.npy").string(), (dir / "y.npy").string()),
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("check passed"), std::string::npos) << out;
  // coil's own names still work.
  ASSERT_EQ(coil(fmt::format("check '{}' --input 'onnx_Gemm_0={}' --expect 'v4={}'", model,
                             (dir / "x.npy").string(), (dir / "y.npy").string()),
                 &out),
            0)
      << out;
  EXPECT_EQ(
      coil(fmt::format("run '{}' --input 'Gemm_0={}'", model, (dir / "x.npy").string()), &out), 2);
  EXPECT_NE(out.find("the model has no input 'Gemm_0' (its inputs: onnx_Gemm_0 (onnx::Gemm_0))"),
            std::string::npos)
      << out;
  EXPECT_EQ(coil(fmt::format("check '{}' --expect 'y={}'", model, (dir / "y.npy").string()), &out),
            2);
  EXPECT_NE(out.find("the model has no output 'y' (its outputs: v4 (4))"), std::string::npos)
      << out;
}

TEST_F(OnnxCli, UnsupportedModelExitsAsUnsupported) {
  onnx::ModelProto m = relu_model();
  add_node(m, "StringNormalizer", {"y", "y"}, {"z"}, "up1");
  std::ofstream(dir / "ct.onnx", std::ios::binary) << m.SerializeAsString();
  std::string out;
  EXPECT_EQ(coil(fmt::format("check '{}'", (dir / "ct.onnx").string()), &out), 3) << out;
  EXPECT_NE(out.find("unsupported ops: StringNormalizer (node 'up1', opset 13)"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace coil

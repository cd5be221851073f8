// The ONNX importer on hand-built models: symbolic dims, folding of shape subgraphs, weights as
// inputs, name sanitizing, and the CLI on .onnx files.
#include <gtest/gtest.h>

#include <unistd.h>
#include "support/error_of.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

Graph import(const onnx::ModelProto& m) {
  return import_onnx_bytes(m.SerializeAsString(), "m.onnx");
}

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

// Weights listed as graph inputs too (IR < 4) are constants; names become identifiers.
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

TEST_F(OnnxCli, UnsupportedModelExitsWithUserError) {
  onnx::ModelProto m = relu_model();
  add_node(m, "ConvTranspose", {"y", "y"}, {"z"}, "up1");
  std::ofstream(dir / "ct.onnx", std::ios::binary) << m.SerializeAsString();
  std::string out;
  EXPECT_EQ(coil(fmt::format("check '{}'", (dir / "ct.onnx").string()), &out), 2) << out;
  EXPECT_NE(out.find("unsupported ops: ConvTranspose (node 'up1', opset 13)"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace coil

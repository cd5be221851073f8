// Shape arguments fed as graph inputs (frontend/onnx/onnx_model.h): coil specializes on their
// values with a guard. A Reshape's target comes from an input: each new target compiles one
// variant, the same target reuses it, and the data inputs (here token ids of a Gather) stay
// inputs, so new ids never compile. Results against the reference interpreter of the same
// model imported with the value bound; errors name the input the import needs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_model.h"
#include "graph/interpreter.h"
#include "runtime/compare.h"
#include "support/error_of.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using namespace onnx_test;
using testing::error_of;

/// y = Reshape(x, shape); e = Gather(table, ids) with a constant table.
onnx::ModelProto reshape_model() {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {4, 6});
  set_type(g->add_input(), "shape", TP::INT64, {2});
  set_type(g->add_input(), "ids", TP::INT64, {3});
  set_type(g->add_output(), "y", TP::FLOAT, {-1, -1});
  set_type(g->add_output(), "e", TP::FLOAT, {3, 2});
  onnx::TensorProto* table = g->add_initializer();
  table->set_name("table");
  table->set_data_type(TP::FLOAT);
  table->add_dims(5);
  table->add_dims(2);
  for (int i = 0; i < 10; ++i) table->add_float_data(0.5f * static_cast<float>(i));
  add_node(m, "Reshape", {"x", "shape"}, {"y"});
  add_node(m, "Gather", {"table", "ids"}, {"e"});
  return m;
}

Tensor i64(std::vector<int64_t> v) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int64_t>()[i] = v[i];
  return t;
}

struct OnnxValueInputs : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::path(COIL_BINARY_DIR) / "test-onnx-values" /
          fmt::format("{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                      getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "m.onnx", std::ios::binary) << reshape_model().SerializeAsString();
  }
  void TearDown() override { fs::remove_all(dir); }

  /// The outputs the reference interpreter gives with `shape` bound.
  std::vector<Tensor> reference(const Tensor& x, const Tensor& shape, const Tensor& ids) {
    OnnxImportOptions opt;
    opt.input_values["shape"] = shape;
    Graph g = import_onnx(dir / "m.onnx", opt);
    return interpret(g, {x, ids});
  }
};

void expect_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    CompareResult c = compare_tensors(got[i], want[i], default_tolerance(got[i].dtype()));
    EXPECT_TRUE(c.ok) << "output " << i << ": " << c.message;
  }
}

TEST_F(OnnxValueInputs, EachTargetCompilesOnceAndDataInputsStayInputs) {
  OnnxModel m = OnnxModel::load(dir / "m.onnx");
  EXPECT_EQ(m.input_names(), (std::vector<std::string>{"x", "shape", "ids"}));
  EXPECT_EQ(m.variants(), 0);  // the import needs shape's value: compiled at the first call
  Tensor x = random_tensor(DType::F32, {4, 6}, 3, -1, 1);
  for (auto [target, ids, variants] :
       std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, int>>{
           {{3, 8}, {0, 4, 2}, 1},
           {{3, 8}, {1, 1, 3}, 1},  // the same target, new ids: no compile
           {{8, 3}, {4, 0, 0}, 2},  // a new target: one more variant
           {{-1, 12}, {2, 3, 4}, 3},
           {{8, 3}, {0, 0, 0}, 3}}) {
    std::vector<Tensor> got = m.run({x, i64(target), i64(ids)});
    expect_equal(got, reference(x, i64(target), i64(ids)));
    EXPECT_EQ(m.variants(), variants);
  }
  EXPECT_EQ(m.value_inputs(), std::vector<std::string>{"shape"});
  EXPECT_EQ(m.run({x, i64({24, 1}), i64({0, 1, 2})})[0].shape(), (std::vector<int64_t>{24, 1}));
}

TEST_F(OnnxValueInputs, ErrorsNameTheOpAndTheInput) {
  OnnxModel m = OnnxModel::load(dir / "m.onnx");
  Tensor x = random_tensor(DType::F32, {4, 6}, 3, -1, 1);
  // A target that does not fit x: the importer's error, naming the op, as for a constant one.
  std::string bad = error_of([&] { m.run({x, i64({5, 5}), i64({0, 1, 2})}); });
  EXPECT_NE(bad.find("Reshape"), std::string::npos) << bad;
  EXPECT_EQ(error_of([&] {
              m.run({x, i64({3, 8})});
            }),
            fmt::format("{}: the model takes 3 inputs (x, shape, ids), got 2",
                        (dir / "m.onnx").string()));
  // Without the value, the import names what it needs.
  std::string missing = error_of([&] {
    import_onnx_binding_values(dir / "m.onnx", {{"x", x}, {"ids", i64({0, 1, 2})}});
  });
  EXPECT_NE(missing.find("the target shape is not a constant"), std::string::npos) << missing;
  EXPECT_NE(missing.find("give the value of shape"), std::string::npos) << missing;
}

TEST_F(OnnxValueInputs, AModelWithoutValueInputsCompilesAtLoad) {
  onnx::ModelProto r = relu_model(13);
  std::ofstream(dir / "relu.onnx", std::ios::binary) << r.SerializeAsString();
  OnnxModel m = OnnxModel::load(dir / "relu.onnx");
  EXPECT_EQ(m.variants(), 1);
  EXPECT_TRUE(m.value_inputs().empty());
  Graph g = import_onnx(dir / "relu.onnx");
  std::vector<Tensor> in;
  for (int id : g.inputs()) {
    std::vector<int64_t> shape;
    for (const auto& d : g.node(id).type.shape) shape.push_back(*d.as_const());
    in.push_back(random_tensor(g.node(id).type.dtype, shape, 5, -1, 1));
  }
  expect_equal(m.run(in), interpret(g, in));
}

// The CLI binds the value from its --input file and runs the rest.
TEST_F(OnnxValueInputs, CliRunsWithTheValueFromItsFile) {
  Tensor x = random_tensor(DType::F32, {4, 6}, 3, -1, 1);
  write_npy(dir / "x.npy", x);
  write_npy(dir / "shape.npy", i64({2, 12}));
  write_npy(dir / "ids.npy", i64({4, 3, 2}));
  std::vector<Tensor> want = reference(x, i64({2, 12}), i64({4, 3, 2}));
  write_npy(dir / "y.npy", want[0]);
  write_npy(dir / "e.npy", want[1]);
  fs::path log = dir / "out.txt";
  int rc = std::system(fmt::format("'{}' check '{}' --input x='{}' --input shape='{}' --input "
                                   "ids='{}' --expect y='{}' --expect e='{}' > '{}' 2>&1",
                                   COIL_CLI, (dir / "m.onnx").string(), (dir / "x.npy").string(),
                                   (dir / "shape.npy").string(), (dir / "ids.npy").string(),
                                   (dir / "y.npy").string(), (dir / "e.npy").string(), log.string())
                           .c_str());
  std::stringstream out;
  out << std::ifstream(log).rdbuf();
  EXPECT_EQ(WEXITSTATUS(rc), 0) << out.str();
  EXPECT_NE(out.str().find("check passed"), std::string::npos) << out.str();
  // Without it, the error names the input.
  rc = std::system(
      fmt::format("'{}' check '{}' > '{}' 2>&1", COIL_CLI, (dir / "m.onnx").string(), log.string())
          .c_str());
  std::stringstream err;
  err << std::ifstream(log).rdbuf();
  EXPECT_EQ(WEXITSTATUS(rc), 2) << err.str();
  EXPECT_NE(err.str().find("give the value of shape"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace coil

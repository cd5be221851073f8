// ONNX ops whose output size depends on values (frontend/onnx/onnx_staged.h): a model with
// NonZero and Compress between ordinary ops runs as compiled stages with the host ops between
// them; results against values computed here by hand, at data that changes the sizes; a
// compiled stage is reused for sizes seen before; constant inputs fold at import; bad
// attributes are errors naming the node. (The ops' own semantics: the ONNX node tests in the
// allowlist, test_nonzero_*, test_compress_*, test_unique_*, test_nonmaxsuppression_*.)
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_staged.h"
#include "support/error_of.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using namespace onnx_test;
using testing::error_of;

void add_f32_scalar(onnx::ModelProto& m, const std::string& name, float v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(TP::FLOAT);
  t->add_float_data(v);
}

/// x: f32[6, 4].  y1 = Cast(NonZero(Relu(x)), f32) * 2;  y2 = ReduceSum(Compress(Relu(x),
/// ReduceMax(x, 1) > 0, axis 0) + 1, axis 1);  z = -x (computed before any host op).
onnx::ModelProto detect_model() {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {6, 4});
  for (const char* o : {"y1", "y2", "z"}) g->add_output()->set_name(o);
  add_f32_scalar(m, "two", 2.0f);
  add_f32_scalar(m, "one", 1.0f);
  add_f32_scalar(m, "zero", 0.0f);
  add_i64_initializer(m, "axis1", {1});
  add_node(m, "Relu", {"x"}, {"r"});
  add_node(m, "NonZero", {"r"}, {"nz"}, "nonzero");
  add_int_attr(add_node(m, "Cast", {"nz"}, {"nzf"}), "to", TP::FLOAT);
  add_node(m, "Mul", {"nzf", "two"}, {"y1"});
  auto* mx = add_node(m, "ReduceMax", {"x"}, {"mx"});
  add_ints_attr(mx, "axes", {1});
  add_int_attr(mx, "keepdims", 0);
  add_node(m, "Greater", {"mx", "zero"}, {"keep"});
  add_int_attr(add_node(m, "Compress", {"r", "keep"}, {"rows"}, "compress"), "axis", 0);
  add_node(m, "Add", {"rows", "one"}, {"rows1"});
  add_int_attr(add_node(m, "ReduceSum", {"rows1", "axis1"}, {"y2"}), "keepdims", 0);
  add_node(m, "Neg", {"x"}, {"z"});
  return m;
}

struct Expected {
  std::vector<float> y1, y2, z;
  int64_t nonzeros = 0, rows = 0;
};

Expected by_hand(const Tensor& x) {
  Expected e;
  const float* p = x.data_as<float>();
  std::vector<float> rows, cols;
  for (int i = 0; i < 6; ++i) {
    float mx = p[i * 4], sum = 0;
    for (int j = 0; j < 4; ++j) {
      float v = p[i * 4 + j];
      mx = std::max(mx, v);
      sum += std::max(v, 0.0f) + 1;
      if (v > 0) rows.push_back(2.0f * i), cols.push_back(2.0f * j);
      e.z.push_back(-v);
    }
    if (mx > 0) e.y2.push_back(sum);
  }
  e.y1 = rows;
  e.y1.insert(e.y1.end(), cols.begin(), cols.end());
  e.nonzeros = static_cast<int64_t>(rows.size());
  e.rows = static_cast<int64_t>(e.y2.size());
  return e;
}

std::vector<float> values(const Tensor& t) {
  return {t.data_as<float>(), t.data_as<float>() + t.numel()};
}

struct OnnxStaged : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::path(COIL_BINARY_DIR) / "test-onnx-staged" /
          fmt::format("{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                      getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path save(const onnx::ModelProto& m) {
    fs::path p = dir / "m.onnx";
    std::ofstream(p, std::ios::binary) << m.SerializeAsString();
    return p;
  }
};

Tensor data(uint32_t seed, float positive_share) {
  Tensor x = Tensor::empty(DType::F32, {6, 4});
  uint32_t s = seed;
  for (int i = 0; i < 24; ++i) {
    s = s * 1664525u + 1013904223u;
    float u = static_cast<float>(s >> 8) / static_cast<float>(1u << 24);
    x.data_as<float>()[i] = (u < positive_share ? 1.0f : -1.0f) * (0.25f + u);
  }
  return x;
}

TEST_F(OnnxStaged, HostOpsBetweenCompiledStagesAtChangingSizes) {
  OnnxModel m = OnnxModel::load(save(detect_model()));
  ASSERT_NE(m.staged(), nullptr);
  std::vector<std::string> plan = m.staged()->describe();
  ASSERT_EQ(plan.size(), 4u) << fmt::format("{}", fmt::join(plan, " | "));
  EXPECT_EQ(plan[0], "compiled: Relu, ReduceMax, Greater, Neg");
  EXPECT_EQ(plan[1], "host: NonZero 'nonzero'");
  EXPECT_EQ(plan[2], "host: Compress 'compress'");
  EXPECT_EQ(plan[3], "compiled: Cast, Mul, Add, ReduceSum");
  std::set<std::pair<int64_t, int64_t>> sizes;
  for (auto [seed, share] :
       {std::pair{1u, 0.5f}, {2u, 0.2f}, {3u, 0.9f}, {1u, 0.5f}, {4u, 0.0f}, {5u, 0.5f}}) {
    Tensor x = data(seed, share);
    Expected e = by_hand(x);
    std::vector<Tensor> got = m.run({x});
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].shape(), (std::vector<int64_t>{2, e.nonzeros})) << seed;
    EXPECT_EQ(values(got[0]), e.y1) << seed;
    EXPECT_EQ(got[1].shape(), (std::vector<int64_t>{e.rows})) << seed;
    ASSERT_EQ(values(got[1]).size(), e.y2.size()) << seed;
    for (size_t i = 0; i < e.y2.size(); ++i)  // (a sum of 4: coil's order may differ by an ulp)
      EXPECT_NEAR(values(got[1])[i], e.y2[i], 1e-5f) << seed << " row " << i;
    EXPECT_EQ(values(got[2]), e.z) << seed;
    sizes.insert({e.nonzeros, e.rows});
  }
  // The first stage once; the last once per distinct pair of sizes the host ops produced.
  EXPECT_EQ(m.variants(), 1 + static_cast<int>(sizes.size()));
}

TEST_F(OnnxStaged, ConstantInputsFoldAtImport) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::INT64, {3});
  g->add_output()->set_name("y");
  add_i64_initializer(m, "c", {0, 7, 0, 5, 7});
  add_node(m, "Unique", {"c"}, {"u"});  // sorted: [0, 5, 7]
  add_node(m, "Add", {"u", "x"}, {"y"});
  OnnxModel model = OnnxModel::load(save(m));
  EXPECT_EQ(model.staged(), nullptr);  // one compiled model
  Tensor x = Tensor::empty(DType::I64, {3});
  for (int i = 0; i < 3; ++i) x.data_as<int64_t>()[i] = 10 * i;
  Tensor y = model.run({x})[0];
  EXPECT_EQ(std::vector<int64_t>(y.data_as<int64_t>(), y.data_as<int64_t>() + 3),
            (std::vector<int64_t>{0, 15, 27}));
}

TEST_F(OnnxStaged, BadAttributesAndInputsNameTheNode) {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {4});
  set_type(g->add_input(), "c", TP::BOOL, {6});
  g->add_output()->set_name("y");
  add_int_attr(add_node(m, "Compress", {"x", "c"}, {"y"}, "pick"), "axis", 3);
  OnnxModel model = OnnxModel::load(save(m));
  Tensor x = Tensor::zeros(DType::F32, {4}), c = Tensor::zeros(DType::Bool, {6});
  EXPECT_THAT(error_of([&] {
                model.run({x, c});
              }),
              ::testing::HasSubstr("Compress node 'pick': axis 3 is out of range for [4]"));
  g->mutable_node(0)->mutable_attribute(0)->set_i(0);
  OnnxModel longer = OnnxModel::load(save(m));
  EXPECT_THAT(error_of([&] {
                longer.run({x, c});
              }),
              ::testing::HasSubstr("condition has 6 elements, more than the 4"));
  add_int_attr(g->mutable_node(0), "colour", 1);
  OnnxModel unknown = OnnxModel::load(save(m));
  EXPECT_THAT(error_of([&] {
                unknown.run({x, c});
              }),
              ::testing::HasSubstr("Compress node 'pick': unknown attribute 'colour'"));
}

/// x: f32[3, 4], n: i64 trip count, flag: bool.
/// Loop over i < n: acc = (acc + x[i]) * 0.5 (acc from zeros), scanned;  Scan over x's rows in
/// reverse: s += row, out = s * relu(row), stacked reversed along axis 1;  If flag: -x else x*2.
/// The bodies read x and the initializers from the enclosing graph.
onnx::ModelProto control_flow_model() {
  onnx::ModelProto m = empty_model(13);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {3, 4});
  set_type(g->add_input(), "n", TP::INT64, {});
  set_type(g->add_input(), "flag", TP::BOOL, {});
  for (const char* o : {"acc", "accs", "s", "outs", "picked"}) g->add_output()->set_name(o);
  add_f32_scalar(m, "half", 0.5f);
  add_f32_scalar(m, "two", 2.0f);
  auto* zeros = g->add_initializer();
  zeros->set_name("zeros");
  zeros->set_data_type(TP::FLOAT);
  zeros->add_dims(4);
  for (int i = 0; i < 4; ++i) zeros->add_float_data(0.0f);

  onnx::ModelProto body = empty_model(13);  // (its graph only)
  auto* b = body.mutable_graph();
  set_type(b->add_input(), "i", TP::INT64, {});
  set_type(b->add_input(), "c", TP::BOOL, {});
  set_type(b->add_input(), "acc_in", TP::FLOAT, {4});
  set_type(b->add_output(), "c_out", TP::BOOL, {});
  set_type(b->add_output(), "acc_out", TP::FLOAT, {4});
  set_type(b->add_output(), "scan_out", TP::FLOAT, {4});  // (its dtype: a Loop of no trips)
  add_node(body, "Identity", {"c"}, {"c_out"});
  add_int_attr(add_node(body, "Gather", {"x", "i"}, {"row"}), "axis", 0);
  add_node(body, "Add", {"acc_in", "row"}, {"sum"});
  add_node(body, "Mul", {"sum", "half"}, {"acc_out"});
  add_node(body, "Identity", {"acc_out"}, {"scan_out"});
  auto* loop = add_node(m, "Loop", {"n", "", "zeros"}, {"acc", "accs"}, "loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = *b;

  onnx::ModelProto sbody = empty_model(13);
  auto* sb = sbody.mutable_graph();
  set_type(sb->add_input(), "s_in", TP::FLOAT, {4});
  set_type(sb->add_input(), "r", TP::FLOAT, {4});
  for (const char* o : {"s_out", "o"}) sb->add_output()->set_name(o);
  add_node(sbody, "Add", {"s_in", "r"}, {"s_out"});
  add_node(sbody, "Relu", {"r"}, {"rr"});
  add_node(sbody, "Mul", {"s_out", "rr"}, {"o"});
  auto* scan = add_node(m, "Scan", {"zeros", "x"}, {"s", "outs"}, "scan");
  add_int_attr(scan, "num_scan_inputs", 1);
  add_ints_attr(scan, "scan_input_directions", {1});
  add_ints_attr(scan, "scan_output_directions", {1});
  add_ints_attr(scan, "scan_output_axes", {1});
  a = scan->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = *sb;

  auto* iff = add_node(m, "If", {"flag"}, {"picked"}, "if");
  for (auto [name, op] : {std::pair{"then_branch", "Neg"}, {"else_branch", "Mul"}}) {
    onnx::ModelProto br = empty_model(13);
    br.mutable_graph()->add_output()->set_name("y");
    if (std::string(op) == "Neg")
      add_node(br, "Neg", {"x"}, {"y"});
    else
      add_node(br, "Mul", {"x", "two"}, {"y"});
    a = iff->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = br.graph();
  }
  return m;
}

TEST_F(OnnxStaged, LoopScanAndIfRunTheirBodiesCompiled) {
  OnnxModel model = OnnxModel::load(save(control_flow_model()));
  ASSERT_NE(model.staged(), nullptr);
  Tensor x = data(7, 0.6f).strided({3, 4}, {4, 1}).clone();  // the first 3 rows
  Tensor wrong = Tensor::zeros(DType::I64, {}), no = Tensor::zeros(DType::Bool, {});
  EXPECT_THAT(error_of([&] {
                model.run({data(7, 0.6f), wrong, no});
              }),
              ::testing::HasSubstr("input 'x' has shape [6, 4], which its declared shape does "
                                   "not allow"));
  const float* p = x.data_as<float>();
  for (int64_t trips : {3, 2, 0, 3}) {
    for (bool flag : {true, false}) {
      Tensor n = Tensor::empty(DType::I64, {}), f = Tensor::empty(DType::Bool, {});
      *n.data_as<int64_t>() = trips;
      *f.data_as<bool>() = flag;
      std::vector<Tensor> got = model.run({x, n, f});
      ASSERT_EQ(got.size(), 5u);
      std::vector<float> acc(4, 0.0f), accs;
      for (int64_t i = 0; i < trips; ++i)
        for (int j = 0; j < 4; ++j) acc[j] = (acc[j] + p[i * 4 + j]) * 0.5f;
      for (int64_t i = 0; i < trips; ++i) {  // recomputed row by row for the stack
        std::vector<float> a(4, 0.0f);
        for (int64_t k = 0; k <= i; ++k)
          for (int j = 0; j < 4; ++j) a[j] = (a[j] + p[k * 4 + j]) * 0.5f;
        accs.insert(accs.end(), a.begin(), a.end());
      }
      EXPECT_EQ(values(got[0]), acc) << trips;
      EXPECT_EQ(got[1].shape(), (std::vector<int64_t>{trips == 0 ? 0 : trips, 4})) << trips;
      if (trips > 0) EXPECT_EQ(values(got[1]), accs) << trips;
      // Scan: rows 2, 1, 0; its outputs reversed back, so column t is row t's step.
      std::vector<float> st(4, 0.0f), outs(12);
      for (int r = 2; r >= 0; --r)
        for (int j = 0; j < 4; ++j) {
          st[j] += p[r * 4 + j];
          outs[j * 3 + r] = st[j] * std::max(p[r * 4 + j], 0.0f);
        }
      EXPECT_EQ(values(got[2]), st);
      EXPECT_EQ(got[3].shape(), (std::vector<int64_t>{4, 3}));
      EXPECT_EQ(values(got[3]), outs);
      std::vector<float> picked;
      for (int i = 0; i < 12; ++i) picked.push_back(flag ? -p[i] : p[i] * 2.0f);
      EXPECT_EQ(values(got[4]), picked) << flag;
    }
  }
}

TEST_F(OnnxStaged, ControlFlowErrorsNameTheNode) {
  onnx::ModelProto m = control_flow_model();
  // The Loop's body returns one value too few.
  auto* body = m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
  body->mutable_output()->RemoveLast();
  OnnxModel model = OnnxModel::load(save(m));
  Tensor x = data(7, 0.6f).strided({3, 4}, {4, 1}).clone();
  Tensor n = Tensor::empty(DType::I64, {}), f = Tensor::empty(DType::Bool, {});
  *n.data_as<int64_t>() = 2;
  *f.data_as<bool>() = true;
  EXPECT_THAT(
      error_of([&] {
        model.run({x, n, f});
      }),
      ::testing::HasSubstr("Loop node 'loop': its body returns 2 values, the node needs 3"));
  m = control_flow_model();
  add_int_attr(m.mutable_graph()->mutable_node(1), "reverse", 1);  // Scan has no such attribute
  OnnxModel scan = OnnxModel::load(save(m));
  EXPECT_THAT(error_of([&] {
                scan.run({x, n, f});
              }),
              ::testing::HasSubstr("Scan node 'scan': unknown attribute 'reverse'"));
}

TEST_F(OnnxStaged, CliRunWritesTheOutputsOfAStagedModel) {
  fs::path model = save(detect_model());
  Tensor x = data(3, 0.5f);
  write_npy(dir / "x.npy", x);
  fs::path log = dir / "out.txt";
  int rc =
      std::system(fmt::format("cd '{}' && '{}' run '{}' --input x='{}' > '{}' 2>&1", dir.string(),
                              COIL_CLI, model.string(), (dir / "x.npy").string(), log.string())
                      .c_str());
  std::stringstream out;
  out << std::ifstream(log).rdbuf();
  ASSERT_EQ(WEXITSTATUS(rc), 0) << out.str();
  EXPECT_NE(out.str().find("ran in stages"), std::string::npos) << out.str();
  Expected e = by_hand(x);
  Tensor y1 = read_npy(dir / "y1.npy"), z = read_npy(dir / "z.npy");
  EXPECT_EQ(y1.shape(), (std::vector<int64_t>{2, e.nonzeros}));
  EXPECT_EQ(values(y1), e.y1);
  EXPECT_EQ(values(z), e.z);
}

}  // namespace
}  // namespace coil

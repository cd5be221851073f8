// Matmul end to end: every shape class (odd M/N/K, 1-D operands, batched, broadcast batches,
// transposed operands, constant weights packed at load), every epilogue the template fuses,
// f32 and bf16, through each implementation the autotuner can pick (the template, oneDNN,
// OpenBLAS: forced with COIL_MATMUL), against the reference interpreter (double precision).
#include <cmath>
#include <cstdlib>

#include <gtest/gtest.h>

#include "runtime/isa.h"
#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;

/// Runs each test once per implementation; the template also without autotuning.
class MatmulImpls : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "openblas" && !extern_have_openblas()) GTEST_SKIP() << "no OpenBLAS";
    setenv("COIL_MATMUL", GetParam().c_str(), 1);
  }
  void TearDown() override { unsetenv("COIL_MATMUL"); }
};

/// f32 sums of K products carry a rounding error growing like sqrt(K) times the terms (inputs
/// are uniform in [-2, 2]); the reference sums in double.
double k_scale(int64_t k) {
  return std::max(1.0, std::sqrt(static_cast<double>(k)) / 4);
}

std::string mm_graph(const std::string& a, const std::string& b, const std::string& body) {
  return fmt::format("input a: {}\ninput b: {}\n{}", a, b, body);
}

TEST_P(MatmulImpls, OddShapes) {
  const int64_t shapes[][3] = {{1, 1, 1},      {3, 17, 5},    {17, 257, 33},
                               {64, 256, 256}, {257, 3, 129}, {100, 1000, 17},
                               {1, 512, 1000}, {33, 1, 65},   {129, 64, 1}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(fmt::format("M={} K={} N={}", s[0], s[1], s[2]));
    Graph g = graph_from_text(mm_graph(fmt::format("f32[{}, {}]", s[0], s[1]),
                                       fmt::format("f32[{}, {}]", s[1], s[2]),
                                       "y = matmul(a, b)\noutput y\n"));
    EXPECT_TRUE(matches_reference(g, 1, k_scale(s[1])));
  }
}

TEST_P(MatmulImpls, TransposedOperands) {
  // a.t() @ b, a @ b.t(), and both: read in place through their strides.
  EXPECT_TRUE(matches_reference(graph_from_text(
      mm_graph("f32[37, 19]", "f32[37, 23]", "t = transpose(a)\ny = matmul(t, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(graph_from_text(
      mm_graph("f32[19, 37]", "f32[23, 37]", "t = transpose(b)\ny = matmul(a, t)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(graph_from_text(
      mm_graph("f32[37, 19]", "f32[23, 37]",
               "ta = transpose(a)\ntb = transpose(b)\ny = matmul(ta, tb)\noutput y\n"))));
}

TEST_P(MatmulImpls, LinearWithConstantWeightIsPackedAtLoad) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({45, 70}));
  int w = g.add_constant(random_tensor(DType::F32, {33, 70}, 7, -1, 1), "w");
  int b = g.add_constant(random_tensor(DType::F32, {33}, 8, -1, 1), "b");
  int y = g.add_node("linear", {x, w, b});
  int r = g.add_node("relu", {y});
  g.add_output(r, "y");
  EXPECT_TRUE(matches_reference(g));
}

TEST_P(MatmulImpls, Epilogues) {
  const char* bodies[] = {
      "m = matmul(a, b)\ns = add(m, bias)\ny = relu(s)\noutput y\n",
      "m = matmul(a, b)\ns = add(m, bias)\ny = gelu(s)\noutput y\n",
      "m = matmul(a, b)\nh = mul(m, bias)\ny = add(h, r)\noutput y\n",
      // The product is an output too: stored by the epilogue as well.
      "m = matmul(a, b)\ny = sigmoid(m)\noutput m\noutput y\n",
      "m = matmul(a, b)\ny = cast(m) {dtype=bf16}\noutput y\n",
      "m = matmul(a, b)\ny = sum(m) {axes=[1]}\noutput y\n",
  };
  for (const char* body : bodies) {
    SCOPED_TRACE(body);
    Graph g = graph_from_text(std::string("input a: f32[67, 45]\ninput b: f32[45, 83]\n") +
                              "input bias: f32[83]\ninput r: f32[67, 83]\n" + body);
    EXPECT_TRUE(matches_reference(g));
  }
}

TEST_P(MatmulImpls, OneDimensionalOperands) {
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[19]", "f32[19, 7]", "y = matmul(a, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[5, 19]", "f32[19]", "y = matmul(a, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[19]", "f32[19]", "y = matmul(a, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[3, 4, 19]", "f32[19]", "y = matmul(a, b)\noutput y\n"))));
}

INSTANTIATE_TEST_SUITE_P(Impl, MatmulImpls, ::testing::Values("template", "dnnl", "openblas"));

TEST(Matmul, Batched) {
  const char* cases[][2] = {
      {"f32[4, 17, 33]", "f32[4, 33, 9]"},
      {"f32[2, 1, 5, 7]", "f32[3, 7, 4]"},  // broadcast batch dims
      {"f32[3, 16, 24]", "f32[24, 40]"},    // weight shared by the batch: folded into M
      {"f32[16, 24]", "f32[3, 24, 40]"},    // A shared by the batch
      {"f32[1, 1, 1]", "f32[5, 1, 3]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} @ {}", c[0], c[1]));
    EXPECT_TRUE(
        matches_reference(graph_from_text(mm_graph(c[0], c[1], "y = matmul(a, b)\noutput y\n"))));
  }
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[6, 13, 8]", "f32[6, 8, 21]", "y = bmm(a, b)\noutput y\n"))));
  // Attention scores: q @ k^T per head, the transpose read in place, then scaled + softmax.
  EXPECT_TRUE(matches_reference(graph_from_text(
      "input q: f32[2, 4, 33, 16]\ninput k: f32[2, 4, 33, 16]\nkt = transpose(k) {dim0=2, "
      "dim1=3}\ns = matmul(q, kt)\nc = full() {shape=[], value=0.25}\nt = mul(s, c)\n"
      "y = softmax(t) {axis=-1}\noutput y\n")));
}

TEST(Matmul, Bf16) {
  // bf16 operands, f32 accumulation, one rounding to bf16: within default_tolerance(bf16)
  // (rtol 2e-2, atol 1e-2), i.e. a few bf16 ulps.
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("bf16[65, 130]", "bf16[130, 70]", "y = matmul(a, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(graph_from_text(
      mm_graph("bf16[3, 17, 64]", "bf16[64, 33]",
               "m = matmul(a, b)\nc = cast(m) {dtype=f32}\ny = relu(c)\noutput y\n"))));
  Graph g;
  int x = g.add_input("x", DType::BF16, make_shape({31, 96}));
  int w = g.add_constant(random_tensor(DType::BF16, {48, 96}, 3, -1, 1), "w");
  g.add_output(g.add_node("linear", {x, w}), "y");
  EXPECT_TRUE(matches_reference(g));
}

// bf16 models through the AMX kernel: on a CPU with AMX the host ISA (avx512_amx) runs it on
// the tiles; elsewhere COIL_TESTING_AMX_EMULATE=1 builds the avx512 modules' bf16 matmuls on
// emulated tiles (kernels/coil_amx.h). Odd shapes around the 32 x 32 tile and 32-deep steps,
// batches, the epilogues (bias, relu, a cast, a bf16 result) and a constant weight packed at
// load, against the reference interpreter.
TEST(Matmul, Bf16OnAmxTiles) {
  if (!cpu_supports(isa_by_name("avx512"))) GTEST_SKIP() << "AMX (real or emulated) needs avx512";
  setenv("COIL_TESTING_AMX_EMULATE", "1", 1);
  setenv("COIL_MATMUL", "template", 1);
  for (const char* shapes : {"bf16[65, 130]|bf16[130, 70]", "bf16[1, 33]|bf16[33, 1]",
                             "bf16[31, 64]|bf16[64, 17]", "bf16[3, 40, 97]|bf16[3, 97, 48]"}) {
    std::string s(shapes);
    std::string a = s.substr(0, s.find('|')), b = s.substr(s.find('|') + 1);
    EXPECT_TRUE(matches_reference(graph_from_text(mm_graph(a, b, "y = matmul(a, b)\noutput y\n"))))
        << shapes;
  }
  EXPECT_TRUE(matches_reference(graph_from_text(
      "input a: bf16[45, 70]\ninput b: bf16[70, 50]\ninput c: f32[50]\n"
      "m = matmul(a, b)\nf = cast(m) {dtype=f32}\ns = add(f, c)\ny = relu(s)\noutput y\n")));
  Graph g;
  int x = g.add_input("x", DType::BF16, make_shape({37, 96}));
  int w = g.add_constant(random_tensor(DType::BF16, {48, 96}, 3, -1, 1), "w");
  int bias = g.add_constant(random_tensor(DType::BF16, {48}, 4, -1, 1), "bias");
  g.add_output(g.add_node("linear", {x, w, bias}), "y");
  EXPECT_TRUE(matches_reference(g));
  unsetenv("COIL_MATMUL");
  unsetenv("COIL_TESTING_AMX_EMULATE");
}

TEST(Matmul, OtherFloatDtypes) {
  // f16 is computed in f32; f64 has no template and is a reduction over k.
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f16[9, 21]", "f16[21, 5]", "y = matmul(a, b)\noutput y\n"))));
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f64[9, 21]", "f64[21, 5]", "y = matmul(a, b)\noutput y\n"))));
}

TEST(Matmul, AddmmAlphaBeta) {
  EXPECT_TRUE(matches_reference(
      graph_from_text("input c: f32[13]\ninput a: f32[11, 7]\ninput b: f32[7, 13]\n"
                      "y = addmm(c, a, b) {alpha=0.5, beta=2.0}\noutput y\n")));
}

TEST(Matmul, FusedEpilogueIsOneKernelReadingInputsOnce) {
  Graph g = graph_from_text(
      "input x: f32[64, 96]\ninput w: f32[96, 80]\ninput b: f32[80]\n"
      "m = matmul(x, w)\ns = add(m, b)\ny = relu(s)\noutput y\n");
  CompileOptions o;
  o.autotune = false;
  CompiledModel m = compile(g, o);
  ASSERT_EQ(m.report().kernels.size(), 1u);
  EXPECT_NE(m.report().kernels[0].name.find("cpp_template_"), std::string::npos);
  EXPECT_EQ(m.report().kernels[0].bytes_read, (64 * 96 + 96 * 80 + 80) * 4);
  EXPECT_EQ(m.report().kernels[0].bytes_written, 64 * 80 * 4);
  EXPECT_TRUE(matches_reference(g, testing::random_inputs(g), o));
}

TEST(Matmul, LongSkinny) {
  EXPECT_TRUE(matches_reference(
      graph_from_text(mm_graph("f32[100003, 3]", "f32[3, 2]", "y = matmul(a, b)\noutput y\n"))));
}

// Modules that compile the matmul loops themselves (an ISA with no precompiled copy in
// libcoil_vmath: scalar) each own their scratch (coil_gemm_driver.h), loaded and unloaded in
// any order. (The heap corruption that made the scratch module-private showed only in a long
// run, the correctness tests' Attention*, DynamicShapes* and Matmul* suites in one process at
// COIL_CPU_ISA=scalar: this smaller test passes with or without that fix.)
TEST(MatmulModules, ScalarModulesLoadedAndUnloadedInTurnStayRight) {
  CompileOptions scalar;
  scalar.isa = "scalar";
  const char* shapes[][2] = {{"f32[64, 96]", "f32[96, 80]"},
                             {"f32[7, 12]", "f32[12, 9]"},
                             {"f32[130, 40]", "f32[40, 70]"},
                             {"f32[33, 5]", "f32[5, 17]"}};
  std::vector<Graph> graphs;
  std::vector<std::unique_ptr<CompiledModel>> models;
  auto check = [&](size_t i) {
    std::vector<Tensor> in = testing::random_inputs(graphs[i], 3);
    CompareResult c = compare_tensors(models[i]->run(in)[0], interpret(graphs[i], in)[0],
                                      default_tolerance(DType::F32));
    EXPECT_TRUE(c.ok) << "model " << i << ": " << c.message;
  };
  for (size_t i = 0; i < 4; ++i) {
    graphs.push_back(graph_from_text(fmt::format(
        "input x: {}\ninput y: {}\nz = matmul(x, y)\noutput z\n", shapes[i][0], shapes[i][1])));
    models.push_back(std::make_unique<CompiledModel>(compile(graphs[i], scalar)));
    check(i);
  }
  models[0].reset();  // the largest product's module unloaded while the others live
  models[2].reset();
  for (size_t i : {1, 3}) check(i);
}

}  // namespace
}  // namespace coil

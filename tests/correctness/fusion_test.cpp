// The scheduler's fusion and memory planning: kernel counts (part of the compile report),
// bytes moved equal to the minimum (each input read once, each output written once), refusals
// that keep results right, and arena reuse. Every case is also checked numerically.
#include <gtest/gtest.h>

#include "support/check_graph.h"
#include "support/log.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;

struct Expect {
  size_t kernels;
  int64_t bytes_read, bytes_written;  // -1: not checked
};

/// Compiles `text`, checks the kernel count, bytes against the minimum, and the numbers.
void check_fused(const std::string& text, Expect e) {
  SCOPED_TRACE(text);
  Graph g = graph_from_text(text);
  CompiledModel m = compile(g);
  const auto& ks = m.report().kernels;
  EXPECT_EQ(ks.size(), e.kernels);
  int64_t r = 0, w = 0;
  for (const auto& k : ks) {
    r += k.bytes_read;
    w += k.bytes_written;
  }
  if (e.bytes_read >= 0) {
    EXPECT_EQ(r, e.bytes_read);
  }
  if (e.bytes_written >= 0) {
    EXPECT_EQ(w, e.bytes_written);
  }
  EXPECT_TRUE(matches_reference(g));
}

constexpr int64_t F = 4;  // bytes of f32

TEST(Fusion, GeluOfAffineIsOneKernel) {
  check_fused(
      "input x: f32[64, 1024]\ninput w: f32[1024]\ninput b: f32[1024]\n"
      "t0 = mul(x, w)\nt1 = add(t0, b)\ny = gelu(t1)\noutput y\n",
      {1, (64 * 1024 + 2 * 1024) * F, 64 * 1024 * F});
}

TEST(Fusion, SoftmaxLastDimIsOneKernel) {
  check_fused("input x: f32[64, 1000]\ny = softmax(x) {axis=-1}\noutput y\n",
              {1, 64000 * F, 64000 * F});
}

TEST(Fusion, LayerNormWithWeightAndBiasIsOneKernel) {
  check_fused(
      "input x: f32[64, 768]\ninput w: f32[768]\ninput b: f32[768]\ny = layer_norm(x, w, "
      "b)\noutput y\n",
      {1, (64 * 768 + 2 * 768) * F, 64 * 768 * F});
}

TEST(Fusion, TransposedAddIsOneKernel) {
  check_fused(
      "input x: f32[96, 64]\ninput y: f32[64, 96]\nt = transpose(x)\nz = add(t, y)\noutput z\n",
      {1, 2 * 96 * 64 * F, 96 * 64 * F});
}

TEST(Fusion, SumAndSumOfSquaresShareOneLoop) {
  check_fused(
      "input x: f32[128, 1000]\ns = sum(x) {axes=[1]}\nsq = mul(x, x)\nss = sum(sq) {axes=[1]}\n"
      "output s\noutput ss\n",
      {1, 128000 * F, 2 * 128 * F});
  // Whole-tensor sums too (no outer loop; the shared loop is split into fixed chunks).
  check_fused(
      "input x: f32[1000003]\ns = sum(x)\nsq = mul(x, x)\nss = sum(sq)\noutput s\noutput ss\n",
      {1, 1000003 * F, 2 * F});
}

TEST(Fusion, SeveralOutputsOfOneInputShareOneKernel) {
  check_fused(
      "input x: f32[33, 65]\na = exp(x)\nb = sin(x)\nc = abs(x)\noutput a\noutput b\noutput c\n",
      {1, 33 * 65 * F, 3 * 33 * 65 * F});
}

TEST(Fusion, PointwiseGraphsAreOneKernel) {
  check_fused(
      "input a: f32[4096]\ninput b: f32[4096]\ns = add(a, b)\nd = sub(a, b)\nr = relu(s)\n"
      "g = sigmoid(d)\ny = mul(r, g)\noutput y\n",
      {1, 2 * 4096 * F, 4096 * F});
  std::string chain = "input x: f32[1000]\n";
  std::string prev = "x";
  const char* ops[] = {"exp",  "neg",   "sigmoid", "tanh", "abs",
                       "sqrt", "log1p", "sin",     "cos",  "relu"};
  for (int i = 0; i < 10; ++i) {
    chain += fmt::format("t{} = {}({})\n", i, ops[i], prev);
    prev = fmt::format("t{}", i);
  }
  check_fused(chain + "output " + prev + "\n", {1, 1000 * F, 1000 * F});
}

TEST(Fusion, SoftmaxThenReductionOverTheOtherAxisIsAtMostTwoKernels) {
  Graph g = graph_from_text(
      "input x: f32[256, 300]\np = softmax(x) {axis=-1}\nc = sum(p) {axes=[0]}\noutput c\n");
  CompiledModel m = compile(g);
  EXPECT_LE(m.report().kernels.size(), 2u);
  EXPECT_TRUE(matches_reference(g));
}

TEST(Fusion, ReadingAcrossRowsIsRefusedAndLogged) {
  // y = x - sum(x, axis 0): the column sums are complete only after every row, so the
  // subtraction must not share the row loop (same extents 64 x 64 make it a candidate).
  Graph g = graph_from_text(
      "input x: f32[64, 64]\ns = sum(x) {axes=[0], keepdim=true}\ny = sub(x, s)\noutput y\n");
  set_log_channels("fusion");
  ::testing::internal::CaptureStderr();
  CompiledModel m = compile(g);
  std::string log = ::testing::internal::GetCapturedStderr();
  set_log_channels("");
  EXPECT_EQ(m.report().kernels.size(), 2u);
  EXPECT_NE(log.find("refuse"), std::string::npos) << log;
  EXPECT_NE(log.find("outside the rows"), std::string::npos) << log;
  EXPECT_TRUE(matches_reference(g));
}

TEST(Fusion, AColumnSumDoesNotShareTheLoopItWouldVectorizeAlong) {
  // A transformer's bias gradient next to its transposed gradient (a GPT block's backward):
  // t = x^T (written [256, 64] from x [64, 256]) and c[j] = sum_i gelu'(x[i, j]) over rows. c
  // reads along j only; sharing j as the kernel's outer loop would leave it scalar loops
  // (erf and exp one lane at a time), so it gets its own kernel, a vector nest along j.
  Graph g = graph_from_text(R"(input x: f32[64, 256]
input g: f32[64, 256]
e = erf(x)
d = mul(g, e)
t = transpose(d) {dim0=0, dim1=1}
c = sum(d) {axes=[0]}
output t
output c
)");
  set_log_channels("fusion");
  ::testing::internal::CaptureStderr();
  CompiledModel m = compile(g);
  std::string log = ::testing::internal::GetCapturedStderr();
  set_log_channels("");
  EXPECT_NE(log.find("would run as scalar loops"), std::string::npos) << log;
  EXPECT_EQ(m.report().source.find("(scalar)"), std::string::npos) << m.report().source;
  EXPECT_TRUE(matches_reference(g));
}

TEST(Fusion, FewLongRowsAreNotFusedIntoOneSerialLoop) {
  // Two rows of a million: the unfused reductions parallelize over chunks instead.
  Graph g = graph_from_text("input x: f32[2, 1000000]\ny = softmax(x)\noutput y\n");
  CompiledModel m = compile(g);
  EXPECT_GT(m.report().kernels.size(), 1u);
  EXPECT_TRUE(matches_reference(g));
}

TEST(MemoryPlan, StoredChainReusesTwoBuffersAtMost) {
  std::string text = "input x: f32[4096]\n";
  std::string prev = "x";
  for (int i = 0; i < 20; ++i) {
    text += fmt::format("t{} = {}({})\n", i, i % 2 ? "neg" : "sin", prev);
    prev = fmt::format("t{}", i);
  }
  text += "output " + prev + "\n";
  Graph g = graph_from_text(text);
  CompileOptions o;
  o.fusion = false;
  o.store_all_intermediates = true;
  CompiledModel m = compile(g, o);
  EXPECT_EQ(m.report().kernels.size(), 20u);
  EXPECT_LE(m.report().arena_bytes, 2 * 4096 * F);
  EXPECT_TRUE(matches_reference(g, testing::random_inputs(g), o));
}

TEST(MemoryPlan, FreedBuffersAreReusedAcrossKernels) {
  // Two independent row reductions separated by a broadcast: intermediates die and are reused.
  Graph g = graph_from_text(R"(
input x: f32[64, 64]
a = exp(x)
s = sum(a) {axes=[0], keepdim=true}
b = sub(x, s)
c = exp(b)
t = sum(c) {axes=[0], keepdim=true}
d = sub(c, t)
output d
)");
  CompileOptions o;
  o.store_all_intermediates = true;
  o.fusion = false;
  CompiledModel m = compile(g, o);
  int64_t one = 64 * 64 * F;
  EXPECT_LT(m.report().arena_bytes, 4 * one);  // 5 intermediates, never more than 3 alive
  EXPECT_TRUE(matches_reference(g, testing::random_inputs(g), o));
}

}  // namespace
}  // namespace coil

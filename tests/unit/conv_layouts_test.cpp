// keep_conv_layouts (lower/conv_layouts.cpp): a tensor that one oneDNN conv writes and only
// another oneDNN conv reads is passed channels-last (NHWC) between the two calls. Each case
// checks which calls take NHWC (the generated Conv2d's last two arguments: x NHWC, y NHWC) and
// compares the compiled result with the reference interpreter, NaN inputs included.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "driver/pipeline.h"
#include "graph/text_format.h"
#include "support/check_graph.h"
#include "support/cpu_module.h"

namespace coil {
namespace {

using testing::contains;
using testing::cpu_module;
using testing::Module;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(KeepConvLayouts, ResnetBlockPassesItsMiddleTensorChannelsLast) {
  // x -> conv1 + relu -> conv2 -> add x -> relu: conv1 writes NHWC, conv2 reads it; x and
  // conv2's output are read by coil's add kernel and stay NCHW. Odd channel counts, batch 2,
  // 3x3 convs with padding; then a stride-2 chain of three convs whose middle call takes NHWC
  // on both sides.
  const std::string block =
      "input x: f32[2, 12, 9, 11]\ninput w1: f32[12, 12, 3, 3]\ninput b1: f32[12]\n"
      "input w2: f32[12, 12, 3, 3]\n"
      "c1 = conv2d(x, w1, b1) {padding=[1, 1]}\nr1 = relu(c1)\n"
      "c2 = conv2d(r1, w2) {padding=[1, 1]}\na = add(c2, x)\ny = relu(a)\noutput y\n";
  Module m = cpu_module(block);
  EXPECT_EQ(count(m.source, "ConvPostOp::relu, false, false, true);"), 1u) << m.source;
  EXPECT_EQ(count(m.source, "ConvPostOp::none, false, true, false);"), 1u);
  Graph g = parse_graph(block, "<test>");
  std::vector<Tensor> in = testing::random_inputs(g, 4);
  EXPECT_TRUE(testing::matches_reference(g, in));
  in[0].data_as<float>()[30] = std::nanf("");
  EXPECT_TRUE(testing::matches_reference(g, in));

  const std::string chain =
      "input x: f32[2, 5, 17, 13]\ninput w1: f32[7, 5, 3, 3]\ninput w2: f32[9, 7, 3, 3]\n"
      "input w3: f32[6, 9, 3, 3]\n"
      "c1 = conv2d(x, w1) {stride=[2, 2], padding=[1, 1]}\nr1 = relu(c1)\n"
      "c2 = conv2d(r1, w2) {padding=[1, 1]}\ns = sigmoid(c2)\nr2 = mul(c2, s)\n"
      "y = conv2d(r2, w3) {stride=[2, 2], padding=[1, 1]}\noutput y\n";
  Module mc = cpu_module(chain);
  EXPECT_EQ(count(mc.source, "false, false, true);"), 1u) << mc.source;
  EXPECT_EQ(count(mc.source, "false, true, true);"), 1u);
  EXPECT_EQ(count(mc.source, "false, true, false);"), 1u);
  EXPECT_TRUE(testing::matches_reference(parse_graph(chain, "<test>"), 6));
}

TEST(KeepConvLayouts, ABlockOutputReadByAConvIsStoredOnceForEveryReader) {
  // y = relu(c1 + x) is read by the next conv and by the next residual add. The conv needs y
  // stored; the add reads that buffer instead of recomputing relu(c1 + x) from c1 and x
  // (lowering stores the conv's input in its shared box: src/lower/lowering.cpp). So the
  // module computes relu twice (y's and z's), not three times, and matches the reference.
  const std::string g =
      "input x: f32[1, 8, 9, 9]\ninput w1: f32[8, 8, 3, 3]\ninput w2: f32[8, 8, 3, 3]\n"
      "c1 = conv2d(x, w1) {padding=[1, 1]}\na = add(c1, x)\ny = relu(a)\n"
      "c2 = conv2d(y, w2) {padding=[1, 1]}\nb = add(c2, y)\nz = relu(b)\noutput z\n";
  Module m = cpu_module(g);
  EXPECT_EQ(count(m.source, "relu()") + count(m.source, "coil::relu("), 2u) << m.source;
  EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 8));
}

TEST(KeepConvLayouts, NotWhereAnythingElseReadsTheTensor) {
  // Read by two convs; read by a conv and a graph output; read by coil's depthwise kernel;
  // read by a pointwise kernel. Every call stays NCHW (no NHWC arguments at all).
  const char* graphs[] = {
      "input x: f32[1, 8, 9, 9]\ninput w: f32[8, 8, 3, 3]\ninput v: f32[8, 8, 3, 3]\n"
      "c = conv2d(x, w) {padding=[1, 1]}\nd = conv2d(c, v) {padding=[1, 1]}\n"
      "e = conv2d(c, w) {padding=[1, 1]}\ny = add(d, e)\noutput y\n",
      "input x: f32[1, 8, 9, 9]\ninput w: f32[8, 8, 3, 3]\ninput v: f32[8, 8, 3, 3]\n"
      "c = conv2d(x, w) {padding=[1, 1]}\ny = conv2d(c, v) {padding=[1, 1]}\noutput y\n"
      "output c\n",
      "input x: f32[1, 8, 9, 9]\ninput w: f32[8, 8, 3, 3]\ninput v: f32[8, 1, 3, 3]\n"
      "c = conv2d(x, w) {padding=[1, 1]}\ny = conv2d(c, v) {padding=[1, 1], groups=8}\n"
      "output y\n",
      "input x: f32[1, 8, 9, 9]\ninput w: f32[8, 8, 3, 3]\n"
      "c = conv2d(x, w) {padding=[1, 1]}\ny = neg(c)\noutput y\n",
  };
  for (const char* g : graphs) {
    SCOPED_TRACE(g);
    Module m = cpu_module(g);
    EXPECT_FALSE(contains(m.source, ", true);")) << m.source;
    EXPECT_FALSE(contains(m.source, ", true, false);"));
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 8));
  }
}

}  // namespace
}  // namespace coil

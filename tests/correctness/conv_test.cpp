// conv2d end to end (oneDNN extern kernel): strides, padding (symmetric and not), dilation,
// groups (incl. depthwise), bias, constant weights, odd sizes, and the separate epilogue kernel
// that follows an extern call, against the reference interpreter.
#include <gtest/gtest.h>

#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;

struct ConvCase {
  const char* x;
  const char* w;
  const char* attrs;
};

TEST(Conv2d, AttributeCombinations) {
  const ConvCase cases[] = {
      {"f32[1, 3, 7, 7]", "f32[4, 3, 3, 3]", ""},
      {"f32[2, 3, 17, 19]", "f32[8, 3, 3, 3]", " {stride=[2, 1], padding=[1, 2]}"},
      {"f32[1, 4, 9, 9]", "f32[6, 2, 3, 3]", " {groups=2, padding=[1, 1]}"},
      {"f32[1, 8, 12, 12]", "f32[8, 1, 3, 3]", " {groups=8, padding=[1, 1], stride=[2, 2]}"},
      {"f32[1, 5, 11, 13]", "f32[7, 5, 3, 3]", " {dilation=[2, 3], padding=[2, 3]}"},
      {"f32[3, 16, 5, 5]", "f32[32, 16, 1, 1]", ""},
      {"f32[1, 1, 1, 1]", "f32[1, 1, 1, 1]", ""},
      {"f32[1, 3, 8, 8]", "f32[2, 3, 5, 5]", " {padding=[2, 2], stride=[3, 3]}"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} * {}{}", c.x, c.w, c.attrs));
    Graph g = graph_from_text(
        fmt::format("input x: {}\ninput w: {}\ny = conv2d(x, w){}\noutput y\n", c.x, c.w, c.attrs));
    EXPECT_TRUE(matches_reference(g, 1, 4.0));
  }
}

TEST(Conv2d, BiasReluAndConstantWeights) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({2, 16, 14, 14}));
  int w = g.add_constant(random_tensor(DType::F32, {24, 16, 3, 3}, 5, -0.5, 0.5), "w");
  int b = g.add_constant(random_tensor(DType::F32, {24}, 6, -0.5, 0.5), "b");
  Attrs attrs;
  attrs.set("padding", std::vector<int64_t>{1, 1});
  int c = g.add_node("conv2d", {x, w, b}, attrs);
  int r = g.add_node("relu", {c});
  g.add_output(r, "y");
  CompiledModel m = compile(g);
  // The extern call with the ReLU folded in as a NaN-keeping post-op
  // (lower/fold_conv_activations.cpp): one kernel.
  ASSERT_EQ(m.report().kernels.size(), 1u);
  EXPECT_NE(m.report().kernels[0].name.find("cpp_extern_conv2d_relu"), std::string::npos);
  EXPECT_TRUE(matches_reference(g, 1, 4.0));
}

TEST(Conv2d, HalfPrecisionGoesThroughF32) {
  EXPECT_TRUE(matches_reference(graph_from_text(
      "input x: bf16[1, 4, 6, 6]\ninput w: bf16[4, 4, 3, 3]\ny = conv2d(x, w) {padding=[1, 1]}\n"
      "output y\n")));
}

TEST(Conv2d, SmallResidualBlock) {
  // conv -> relu -> conv + skip -> relu, then global average pooling: a CNN's building block.
  EXPECT_TRUE(matches_reference(
      graph_from_text("input x: f32[1, 8, 10, 10]\ninput w1: f32[8, 8, 3, 3]\n"
                      "input w2: f32[8, 8, 3, 3]\n"
                      "c1 = conv2d(x, w1) {padding=[1, 1]}\nr1 = relu(c1)\n"
                      "c2 = conv2d(r1, w2) {padding=[1, 1]}\ns = add(c2, x)\nr2 = relu(s)\n"
                      "y = global_avg_pool2d(r2)\noutput y\n"),
      1, 4.0));
}

}  // namespace
}  // namespace coil

// Depthwise convolutions on coil's own kernel (kernels/coil_depthwise.h) with the activation
// folded in (lower/fold_conv_activations.cpp): strides, paddings, dilations, kernel sizes, odd
// images and batches, no bias, and relu / clamp / silu applied to NaN inputs, each compiled
// and compared with the reference interpreter. Both of the kernel's loops are covered: the
// planes path (few channels or wide output rows) and, on AVX-512, channel blocks (at least 8
// channels and output rows of at most 14; detail::cblock::preferred).
#include <fmt/format.h>
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

/// A depthwise conv of `channels` over x [n, channels, h, w] with a k x k kernel; every name
/// ends in `sfx` (several convs in one graph).
std::string depthwise(int64_t n, int64_t channels, int64_t h, int64_t w, int64_t k,
                      const std::string& attrs, bool bias, const std::string& sfx = "") {
  auto s = [](int64_t v) { return std::to_string(v); };
  std::string g = "input x" + sfx + ": f32[" + s(n) + ", " + s(channels) + ", " + s(h) + ", " +
                  s(w) + "]\ninput w" + sfx + ": f32[" + s(channels) + ", 1, " + s(k) + ", " +
                  s(k) + "]\n";
  if (bias) g += "input b" + sfx + ": f32[" + s(channels) + "]\n";
  g += "c" + sfx + " = conv2d(x" + sfx + ", w" + sfx + (bias ? ", b" + sfx : std::string()) +
       ") {" + attrs + (attrs.empty() ? "" : ", ") + "groups=" + s(channels) + "}\n";
  return g;
}

TEST(DepthwiseConv, StridesPaddingsDilationsAndOddShapes) {
  struct Case {
    int64_t n, c, h, w, k;
    std::string attrs;
    bool bias;
  };
  const std::vector<Case> cases = {
      {1, 16, 13, 13, 3, "stride=[2, 2], padding=[1, 1]", true},
      {2, 5, 7, 11, 3, "padding=[1, 1]", false},
      {1, 3, 17, 9, 5, "stride=[2, 2], padding=[2, 2]", true},
      {3, 4, 9, 10, 3, "stride=[1, 2], padding=[0, 1]", true},
      {1, 6, 12, 12, 3, "padding=[2, 2], dilation=[2, 2]", true},
      {1, 2, 5, 40, 3, "stride=[3, 3], padding=[1, 1]", false},
      {1, 7, 1, 1, 3, "padding=[1, 1]", true},
      {1, 4, 6, 6, 3, "", true},
      {2, 3, 8, 33, 5, "padding=[3, 1]", true},
      // the AVX-512 fill's masked loads: a stride-2 row of three 32-column blocks with 2 zero
      // columns on each side; a stride-2 row whose last input column no tap reads (cols 11 of
      // 12); a stride-1 row of exactly one vector; output heights 7 and 5 (four rows at a
      // time, then one)
      {1, 3, 13, 70, 5, "stride=[2, 2], padding=[2, 2]", true},
      {1, 4, 12, 12, 3, "stride=[2, 2]", true},
      {2, 5, 7, 16, 3, "padding=[0, 1]", false},
      // large enough (>= 32K multiply-adds) for the planes to be spread over threads
      {2, 24, 40, 37, 3, "stride=[2, 2], padding=[1, 1]", true},
      // channel blocks (AVX-512, at least 8 channels and output rows of at most 14): partial
      // blocks (20, 33 channels), rows of at most 8 outputs computed two at a time (odd
      // output heights: a lone last row), narrow input rows transposed several rows at once,
      // a right edge no tap reads (stride 2 over 12 columns), rows of 28 inputs (one
      // transpose per 16 columns), 5x5, dilation, stride 3, threads over blocks and bands
      {1, 16, 7, 7, 3, "padding=[1, 1]", true},
      {2, 20, 7, 9, 3, "padding=[1, 1]", false},
      {1, 33, 14, 14, 3, "padding=[1, 1]", true},
      {1, 8, 13, 12, 3, "stride=[2, 2]", true},
      {1, 40, 28, 28, 3, "stride=[2, 2], padding=[1, 1]", true},
      {1, 17, 11, 11, 5, "padding=[2, 2]", true},
      {1, 24, 14, 14, 5, "stride=[2, 2], padding=[2, 2]", false},
      {1, 16, 10, 10, 3, "padding=[2, 2], dilation=[2, 2]", true},
      {1, 16, 15, 15, 3, "stride=[3, 3], padding=[1, 1]", true},
      {1, 48, 6, 5, 3, "stride=[1, 2], padding=[0, 1]", true},
      {3, 96, 14, 14, 3, "padding=[1, 1]", true},
  };
  // All cases in one graph per activation (one module each, not one per case: the compiles
  // were most of this test's time); each conv is a kernel of its own.
  for (const char* tail :
       {"y{0} = relu(c{0})\n", "y{0} = clamp(c{0}) {{min=0.0, max=6.0}}\n",
        "s{0} = sigmoid(c{0})\ny{0} = mul(c{0}, s{0})\n", "y{0} = neg(c{0})\n"}) {
    std::string g;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::string sfx = "_" + std::to_string(i);
      g += depthwise(c.n, c.c, c.h, c.w, c.k, c.attrs, c.bias, sfx) +
           fmt::format(fmt::runtime(tail), sfx) + "output y" + sfx + "\n";
    }
    SCOPED_TRACE(g);
    Module m = cpu_module(g);
    EXPECT_EQ(testing::count_of(m.source, "coil::depthwise::forward("), cases.size());
    // The activations fold into the kernel; another op stays a kernel of its own.
    EXPECT_EQ(m.kernels.size(), (contains(tail, "neg") ? 2 : 1) * cases.size());
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 3));
  }
}

TEST(DepthwiseConv, NanStaysNanThroughTheFoldedActivation) {
  // relu, clamp and silu of NaN are NaN in the reference and in torch (oneDNN's relu and clip
  // post-ops give 0, which is why they are not folded into oneDNN calls); NaN in x and in w.
  // 6 channels: the planes path; 20: channel blocks (kernels/coil_depthwise.h).
  for (int64_t channels : {6, 20}) {
    const std::string head = depthwise(2, channels, 9, 9, 3, "padding=[1, 1]", true);
    for (const char* tail :
         {"y = relu(c)\n", "y = clamp(c) {min=0.0, max=6.0}\n",
          "y = clamp(c) {min=-1.5, max=0.25}\n", "s = sigmoid(c)\ny = mul(c, s)\n"}) {
      for (int operand : {0, 1}) {
        SCOPED_TRACE(std::string(tail) + (operand == 0 ? " NaN in x" : " NaN in w"));
        Graph g = parse_graph(head + tail + "output y\n", "<test>");
        EXPECT_TRUE(contains(
            cpu_module(head + tail + "output y\n").source,
            "coil::depthwise::Activation::" + std::string(contains(tail, "relu")    ? "relu"
                                                          : contains(tail, "clamp") ? "clamp"
                                                                                    : "silu")));
        std::vector<Tensor> in = testing::random_inputs(g, 5);
        in[static_cast<size_t>(operand)].data_as<float>()[operand == 0 ? 40 : 4] = std::nanf("");
        EXPECT_TRUE(testing::matches_reference(g, in));
      }
    }
  }
}

TEST(DepthwiseConv, ChannelMultipliersAndGroupedConvsStayOneDnn) {
  // Two output channels per group, and groups that hold several input channels: oneDNN.
  const char* convs[] = {
      "input x: f32[1, 4, 9, 9]\ninput w: f32[8, 1, 3, 3]\nc = conv2d(x, w) {padding=[1, 1], "
      "groups=4}\n",
      "input x: f32[1, 8, 9, 9]\ninput w: f32[8, 2, 3, 3]\nc = conv2d(x, w) {padding=[1, 1], "
      "groups=4}\n"};
  for (const char* conv : convs) {
    const std::string g = std::string(conv) + "y = relu(c)\noutput y\n";
    SCOPED_TRACE(g);
    Module m = cpu_module(g);
    EXPECT_FALSE(contains(m.source, "coil::depthwise"));
    EXPECT_EQ(m.kernels.size(), 1u);  // the relu is a oneDNN post-op (NaN kept)
    EXPECT_TRUE(contains(m.source, "coil::ext::ConvPostOp::relu"));
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 3));
  }
}

}  // namespace
}  // namespace coil

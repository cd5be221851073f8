// Dense convolutions with few input channels (image stems) on coil's direct kernel
// (kernels/coil_direct_conv.h) with the activation folded in (lower/fold_conv_activations.cpp):
// strides, paddings, dilations, kernel sizes, output channel counts that are
// not multiples of 16 (the 16/8/4/2/1 channel blocks), odd images and batches, no bias, and
// relu / clamp / silu applied to NaN inputs, each compiled and compared with the reference
// interpreter.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "coil/runtime.h"
#include "driver/pipeline.h"
#include "graph/text_format.h"
#include "support/check_graph.h"
#include "support/cpu_module.h"

namespace coil {
namespace {

using testing::contains;
using testing::cpu_module;
using testing::Module;

/// conv2d of x [n, c, h, w] by w [oc, c, kh, kw].
/// Every name ends in `sfx` (several convs in one graph).
std::string conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                 const std::string& attrs, bool bias, const char* dtype = "f32",
                 const std::string& sfx = "") {
  auto s = [](int64_t v) { return std::to_string(v); };
  std::string g = "input x" + sfx + ": " + std::string(dtype) + "[" + s(n) + ", " + s(c) + ", " +
                  s(h) + ", " + s(w) + "]\ninput w" + sfx + ": " + dtype + "[" + s(oc) + ", " +
                  s(c) + ", " + s(kh) + ", " + s(kw) + "]\n";
  if (bias) g += "input b" + sfx + ": " + std::string(dtype) + "[" + s(oc) + "]\n";
  g += "c" + sfx + " = conv2d(x" + sfx + ", w" + sfx + (bias ? ", b" + sfx : std::string()) +
       ") {" + attrs + "}\n";
  return g;
}

TEST(DirectConv, StemsStridesPaddingsDilationsAndOddShapes) {
  struct Case {
    int64_t n, c, h, w, oc, kh, kw;
    std::string attrs;
    bool bias;
  };
  const std::vector<Case> cases = {
      // resnet's stem (smaller image), mobilenet's / efficientnet's
      {1, 3, 37, 41, 64, 7, 7, "stride=[2, 2], padding=[3, 3]", true},
      {1, 3, 33, 30, 32, 3, 3, "stride=[2, 2], padding=[1, 1]", true},
      // batch 2, output channels 16 + 8 + 4 + 2 + 1, no bias
      {2, 3, 13, 19, 31, 3, 3, "stride=[2, 2], padding=[1, 1]", false},
      {3, 1, 9, 10, 5, 3, 3, "padding=[1, 1]", true},
      {1, 4, 12, 12, 7, 3, 3, "padding=[2, 2], dilation=[2, 2]", true},
      {1, 2, 5, 40, 17, 3, 5, "stride=[3, 3], padding=[1, 2]", false},
      {2, 3, 1, 1, 4, 3, 3, "padding=[1, 1]", true},
      {1, 3, 8, 33, 9, 5, 2, "stride=[1, 2], padding=[2, 1]", true},
      // a 1x1 with stride 2 (stride 1 without padding is a matmul: convs_as_matmuls)
      {2, 3, 9, 9, 20, 1, 1, "stride=[2, 2]", true},
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
      g += conv(c.n, c.c, c.h, c.w, c.oc, c.kh, c.kw, c.attrs, c.bias, "f32", sfx) +
           fmt::format(fmt::runtime(tail), sfx) + "output y" + sfx + "\n";
    }
    SCOPED_TRACE(g);
    Module m = cpu_module(g);
    EXPECT_EQ(testing::count_of(m.source, "coil::direct::forward("), cases.size());
    EXPECT_FALSE(contains(m.source, "coil::ext::Conv2d"));
    // The activations fold into the kernel; another op stays a kernel of its own.
    EXPECT_EQ(m.kernels.size(), (contains(tail, "neg") ? 2 : 1) * cases.size());
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 3));
  }
}

TEST(DirectConv, NanStaysNanThroughTheFoldedActivation) {
  // relu, clamp and silu of NaN are NaN in the reference and in torch; NaN in x and in w.
  const std::string head = conv(2, 3, 11, 9, 21, 3, 3, "stride=[2, 2], padding=[1, 1]", true);
  for (const char* tail :
       {"y = relu(c)\n", "y = clamp(c) {min=0.0, max=6.0}\n", "y = clamp(c) {min=-1.5, max=0.25}\n",
        "s = sigmoid(c)\ny = mul(c, s)\n"}) {
    for (int operand : {0, 1}) {
      SCOPED_TRACE(std::string(tail) + (operand == 0 ? " NaN in x" : " NaN in w"));
      Graph g = parse_graph(head + tail + "output y\n", "<test>");
      EXPECT_TRUE(
          contains(cpu_module(head + tail + "output y\n").source,
                   "coil::direct::Activation::" + std::string(contains(tail, "relu")    ? "relu"
                                                              : contains(tail, "clamp") ? "clamp"
                                                                                        : "silu")));
      std::vector<Tensor> in = testing::random_inputs(g, 5);
      in[static_cast<size_t>(operand)].data_as<float>()[operand == 0 ? 40 : 4] = std::nanf("");
      EXPECT_TRUE(testing::matches_reference(g, in));
    }
  }
}

TEST(DirectConv, SameBitsAtOneAndTwoThreads) {
  // Tasks run band by band (every block of channels of a band of rows, then the next band) and
  // the padded planes are filled in bands of 16 rows spread over the threads; each output is
  // still computed by one thread in one order, so 1 and 2 threads give the same bits. Batch 2,
  // 45 output channels (blocks 8 x 5 + 4 + 1), 30 output rows (5 bands of 6), 61 padded rows
  // (4 fill bands), stride 2 (the AVX-512 column split of masked loads), with
  // NaN in the input.
  const std::string g = conv(2, 3, 59, 47, 45, 3, 3, "stride=[2, 2], padding=[1, 1]", true) +
                        "y = clamp(c) {min=0.0, max=6.0}\noutput y\n";
  Graph graph = parse_graph(g, "<test>");
  EXPECT_TRUE(contains(cpu_module(g).source, "coil::direct::forward"));
  std::vector<Tensor> in = testing::random_inputs(graph, 7);
  in[0].data_as<float>()[3 * 59 * 47 + 200] = std::nanf("");
  CompiledModel m = compile(graph);
  const std::vector<Tensor> got = testing::first_output_at_one_and_two_threads(m, in);
  EXPECT_TRUE(testing::same_bits(got[0], got[1]));
  EXPECT_TRUE(testing::matches_reference(graph, in));
}

TEST(DirectConv, TwoStemsOfOneModelAndLowPrecision) {
  // Two direct convs of different geometry in one module (each call re-zeroes the scratch it
  // shares with the other), the second reading the first; and f16 / bf16 stems (computed in
  // f32 like the library call).
  const std::string two =
      "input x: f32[1, 3, 20, 18]\ninput w: f32[4, 3, 3, 3]\ninput v: f32[6, 4, 5, 5]\n"
      "c = conv2d(x, w) {stride=[2, 2], padding=[1, 1]}\nr = relu(c)\n"
      "d = conv2d(r, v) {padding=[2, 2]}\ny = relu(d)\noutput y\n";
  Module m = cpu_module(two);
  EXPECT_EQ(m.kernels.size(), 2u);
  EXPECT_TRUE(testing::matches_reference(parse_graph(two, "<test>"), 3));
  for (const char* dtype : {"f16", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string g =
        conv(1, 3, 15, 14, 10, 3, 3, "stride=[2, 2], padding=[1, 1]", true, dtype) +
        "y = relu(c)\noutput y\n";
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 3));
  }
}

TEST(DirectConv, MoreInputChannelsOrGroupsStayOneDnn) {
  for (const char* g : {"input x: f32[1, 5, 9, 9]\ninput w: f32[8, 5, 3, 3]\nc = conv2d(x, w)\n",
                        "input x: f32[1, 4, 9, 9]\ninput w: f32[8, 2, 3, 3]\n"
                        "c = conv2d(x, w) {groups=2}\n"}) {
    SCOPED_TRACE(g);
    Module m = cpu_module(std::string(g) + "output c\n");
    EXPECT_FALSE(contains(m.source, "coil::direct"));
    EXPECT_TRUE(contains(m.source, "coil::ext::Conv2d"));
  }
}

}  // namespace
}  // namespace coil

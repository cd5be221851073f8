// fold_conv_activations (lower/fold_conv_activations.cpp): a conv2d library call absorbs a
// silu or relu that is its output's only reader, as a oneDNN post-op (clamp only on coil's
// depthwise kernel: depthwise_conv_test.cpp). Each case checks the
// kernels the CPU module has and compares the compiled result with the reference interpreter.
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

constexpr const char* kConvHead =
    "input x: f32[2, 6, 11, 9]\ninput w: f32[8, 6, 3, 3]\ninput b: f32[8]\n"
    "c = conv2d(x, w, b) {padding=[1, 1]}\n";

void expect_matches_reference(const std::string& text) {
  EXPECT_TRUE(testing::matches_reference(parse_graph(text, "<test>"), 3));
}

TEST(FoldConvActivations, SiluInEitherOperandOrderBecomesAPostOp) {
  for (const char* mul : {"y = mul(c, s)\n", "y = mul(s, c)\n"}) {
    SCOPED_TRACE(mul);
    const std::string g = std::string(kConvHead) + "s = sigmoid(c)\n" + mul + "output y\n";
    Module m = cpu_module(g);
    ASSERT_EQ(m.kernels.size(), 1u);
    EXPECT_TRUE(contains(m.kernels[0], "cpp_extern_conv2d"));
    EXPECT_TRUE(contains(m.source, "coil::ext::ConvPostOp::silu"));
    expect_matches_reference(g);
  }
}

TEST(FoldConvActivations, NanPropagatesWhateverIsFolded) {
  // relu, silu and clamp of NaN are NaN in the reference (and in torch): a post-op must not
  // turn a NaN from the input into 0 or a bound (oneDNN 2.6's relu and clip do: relu folds as
  // elu with alpha 0, and clamp does not fold into oneDNN).
  for (const char* tail :
       {"y = relu(c)\n", "s = sigmoid(c)\ny = mul(c, s)\n", "y = clamp(c) {min=0.0, max=6.0}\n"}) {
    SCOPED_TRACE(tail);
    const std::string text = std::string(kConvHead) + tail + "output y\n";
    Graph g = parse_graph(text, "<test>");
    std::vector<Tensor> in = testing::random_inputs(g, 5);
    in[0].data_as<float>()[17] = std::nanf("");
    EXPECT_TRUE(testing::matches_reference(g, in));
  }
}

TEST(FoldConvActivations, ReluBecomesAPostOpOnDenseConvs) {
  // resnet's conv + relu: one kernel, for odd shapes (stride 2, padding, channel counts that
  // are not multiples of 16, batch 2, a 7x7 stride-2 conv, a padded strided 1x1, which is no
  // matmul), with a NaN and an infinity in the input. (A stem of 3 input channels runs on coil's
  // direct kernel: direct_conv_test.cpp.)
  const char* convs[] = {
      kConvHead,
      "input x: f32[2, 5, 9, 11]\ninput w: f32[7, 5, 3, 3]\ninput b: f32[7]\n"
      "c = conv2d(x, w, b) {stride=[2, 2], padding=[1, 1]}\n",
      "input x: f32[1, 6, 23, 23]\ninput w: f32[8, 6, 7, 7]\ninput b: f32[8]\n"
      "c = conv2d(x, w, b) {stride=[2, 2], padding=[3, 3]}\n",
      "input x: f32[2, 24, 8, 8]\ninput w: f32[40, 24, 1, 1]\n"
      "c = conv2d(x, w) {stride=[2, 2], padding=[1, 1]}\n",
  };
  for (const char* conv : convs) {
    SCOPED_TRACE(conv);
    const std::string text = std::string(conv) + "y = relu(c)\noutput y\n";
    Module m = cpu_module(text);
    ASSERT_EQ(m.kernels.size(), 1u);
    EXPECT_TRUE(contains(m.kernels[0], "cpp_extern_conv2d"));
    EXPECT_TRUE(contains(m.source, "coil::ext::ConvPostOp::relu"));
    Graph g = parse_graph(text, "<test>");
    std::vector<Tensor> in = testing::random_inputs(g, 9);
    EXPECT_TRUE(testing::matches_reference(g, in));
    in[0].data_as<float>()[5] = std::nanf("");
    in[0].data_as<float>()[40] = -INFINITY;
    EXPECT_TRUE(testing::matches_reference(g, in));
  }
}

TEST(FoldConvActivations, DepthwiseStridedWithoutBias) {
  const std::string g =
      "input x: f32[1, 16, 13, 13]\ninput w: f32[16, 1, 3, 3]\n"
      "c = conv2d(x, w) {stride=[2, 2], padding=[1, 1], groups=16}\ns = sigmoid(c)\n"
      "y = mul(c, s)\noutput y\n";
  // A depthwise conv runs on coil's kernel (kernels/coil_depthwise.h), which applies it too.
  EXPECT_TRUE(contains(cpu_module(g).source, "coil::depthwise::Activation::silu"));
  expect_matches_reference(g);
}

TEST(FoldConvActivations, OddShapesStridesDilationsAndGroups) {
  // Each folds and matches the reference: odd batch and sizes, asymmetric stride, dilation,
  // grouped channels, a padded 1x1 image (an unpadded 1x1 conv is a matmul template:
  // convs_as_matmuls_test.cpp), a 7x7 stem.
  const char* convs[] = {
      "input x: f32[3, 4, 9, 7]\ninput w: f32[6, 2, 3, 3]\ninput b: f32[6]\n"
      "c = conv2d(x, w, b) {stride=[2, 1], padding=[1, 2], groups=2}\n",
      "input x: f32[1, 5, 10, 12]\ninput w: f32[7, 5, 3, 3]\n"
      "c = conv2d(x, w) {padding=[2, 3], dilation=[2, 3]}\n",
      "input x: f32[2, 3, 1, 1]\ninput w: f32[4, 3, 1, 1]\ninput b: f32[4]\n"
      "c = conv2d(x, w, b) {padding=[1, 0]}\n",
      "input x: f32[1, 3, 23, 23]\ninput w: f32[8, 3, 7, 7]\ninput b: f32[8]\n"
      "c = conv2d(x, w, b) {stride=[2, 2], padding=[3, 3]}\n",
  };
  for (const char* conv : convs) {
    SCOPED_TRACE(conv);
    const std::string g = std::string(conv) + "s = sigmoid(c)\ny = mul(c, s)\noutput y\n";
    // Three input channels and one group: coil's direct kernel (coil_direct_conv.h) takes it.
    const std::string source = cpu_module(g).source;
    EXPECT_TRUE(contains(source, "coil::ext::ConvPostOp::silu") ||
                contains(source, "coil::direct::Activation::silu"));
    expect_matches_reference(g);
  }
}

TEST(FoldConvActivations, NotWhereTheConvOutputIsReadElsewhere) {
  // The conv's output is a graph output too: the library writes it, the silu stays a kernel.
  const std::string both =
      std::string(kConvHead) + "s = sigmoid(c)\ny = mul(c, s)\noutput y\noutput c\n";
  Module m = cpu_module(both);
  EXPECT_TRUE(contains(m.source, "coil::ext::ConvPostOp::none"));
  EXPECT_EQ(m.kernels.size(), 2u);
  expect_matches_reference(both);
  // A second reader (the residual add reads c besides the silu).
  const std::string twice =
      std::string(kConvHead) + "s = sigmoid(c)\nr = mul(c, s)\ny = add(r, c)\noutput y\n";
  EXPECT_TRUE(contains(cpu_module(twice).source, "coil::ext::ConvPostOp::none"));
  expect_matches_reference(twice);
}

TEST(FoldConvActivations, NotForOtherActivationsOrMoreWork) {
  // relu6 (NaN, above) and gelu are not post-ops here; silu followed by a relu is more than
  // the activation.
  for (const char* tail : {"y = clamp(c) {min=0.0, max=6.0}\n", "y = gelu(c)\n",
                           "s = sigmoid(c)\nt = mul(c, s)\ny = relu(t)\n", "y = sigmoid(c)\n"}) {
    SCOPED_TRACE(tail);
    const std::string g = std::string(kConvHead) + tail + "output y\n";
    EXPECT_TRUE(contains(cpu_module(g).source, "coil::ext::ConvPostOp::none"));
    expect_matches_reference(g);
  }
}

TEST(FoldConvActivations, TheGpuModuleKeepsItsPointwiseKernel) {
  // CPU only: on the GPU the conv is torch's (cuDNN) and the silu a Triton kernel.
  CompileOptions o;
  o.device = "cuda";
  GeneratedProgram p =
      generate_program(parse_graph(std::string(kConvHead) + "s = sigmoid(c)\ny = mul(c, s)\n"
                                                            "output y\n",
                                   "<t>"),
                       o);
  ASSERT_EQ(p.triton.kernels.size(), 1u);
  EXPECT_TRUE(contains(p.triton.kernels[0].name, "sigmoid"));
}

}  // namespace
}  // namespace coil

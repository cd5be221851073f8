// convs_as_matmuls (lower/convs_as_matmuls.cpp): a 1x1 convolution runs as the matmul template
// over NCHW and its bias, activation and residual add fuse into the template's epilogue. Each
// case checks the kernels of the CPU module and compares the compiled result with the
// reference interpreter, NaN inputs included (coil's epilogue keeps NaN where oneDNN's relu and
// clip post-ops would not).
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

std::vector<std::string> cpu_kernels(const std::string& text) {
  CompileOptions o;
  GeneratedProgram p = generate_program(parse_graph(text, "<test>"), o);
  std::vector<std::string> names;
  for (const auto& k : p.module.kernels) names.push_back(k.name);
  return names;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string conv_head(const std::string& x, const std::string& w, bool bias) {
  return "input x: f32" + x + "\ninput w: f32" + w + "\n" +
         (bias ? "input b: f32[" + w.substr(1, w.find(',') - 1) + "]\nc = conv2d(x, w, b)\n"
               : "c = conv2d(x, w)\n");
}

TEST(ConvsAsMatmuls, ActivationsAndResidualAddFuseIntoOneTemplateKernel) {
  // relu, relu6 (clamp), silu and a residual add after a 1x1 conv: one template kernel each.
  const std::string head = conv_head("[2, 6, 11, 9]", "[8, 6, 1, 1]", true);
  for (const char* tail :
       {"y = relu(c)\n", "y = clamp(c) {min=0.0, max=6.0}\n", "s = sigmoid(c)\ny = mul(c, s)\n",
        "input r: f32[2, 8, 11, 9]\ny = add(c, r)\n", "y = add(c, c)\n"}) {
    SCOPED_TRACE(tail);
    const std::string g = head + tail + "output y\n";
    std::vector<std::string> k = cpu_kernels(g);
    ASSERT_EQ(k.size(), 1u) << k[0];
    EXPECT_TRUE(contains(k[0], "cpp_template_conv2d"));
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 3));
  }
}

TEST(ConvsAsMatmuls, NanStaysNanThroughEveryEpilogue) {
  // relu, clamp and silu of NaN are NaN in the reference (and in torch); a NaN in x reaches a
  // whole column of the product, a NaN weight a whole row.
  const std::string head = conv_head("[2, 6, 11, 9]", "[8, 6, 1, 1]", true);
  for (const char* tail :
       {"y = relu(c)\n", "y = clamp(c) {min=0.0, max=6.0}\n", "s = sigmoid(c)\ny = mul(c, s)\n"}) {
    for (int operand : {0, 1}) {
      SCOPED_TRACE(std::string(tail) + (operand == 0 ? " NaN in x" : " NaN in w"));
      Graph g = parse_graph(head + tail + "output y\n", "<test>");
      std::vector<Tensor> in = testing::random_inputs(g, 5);
      in[static_cast<size_t>(operand)].data_as<float>()[operand == 0 ? 17 : 3] = std::nanf("");
      EXPECT_TRUE(testing::matches_reference(g, in));
    }
  }
}

TEST(ConvsAsMatmuls, OddShapesBatchesAndNoBias) {
  // Odd channel counts and images, a batch of 3 (B advances per image), a 1x1 image (the SE
  // blocks' convs), a 1xW row and no bias.
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"[3, 5, 7, 13]", "[7, 5, 1, 1]"},
      {"[1, 33, 1, 1]", "[17, 33, 1, 1]"},
      {"[2, 1, 1, 29]", "[3, 1, 1, 1]"},
      {"[1, 24, 14, 14]", "[144, 24, 1, 1]"}};
  for (const auto& [x, w] : shapes) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(x + " " + w + (bias ? " bias" : ""));
      const std::string g = conv_head(x, w, bias) + "y = clamp(c) {min=0.0, max=6.0}\noutput y\n";
      std::vector<std::string> k = cpu_kernels(g);
      ASSERT_EQ(k.size(), 1u);
      EXPECT_TRUE(contains(k[0], "cpp_template_conv2d"));
      EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 7));
    }
  }
}

TEST(ConvsAsMatmuls, TheConvOutputReadElsewhereOrAsAGraphOutput) {
  // c is a graph output as well as the relu's input, then read by a later reduction and by a
  // transposed (non-epilogue) reader: each still matches the reference.
  const std::string head = conv_head("[2, 6, 5, 7]", "[4, 6, 1, 1]", true);
  for (const char* tail : {"y = relu(c)\noutput y\noutput c\n",
                           "y = relu(c)\nm = sum(c) {axes=[2, 3]}\noutput y\n"
                           "output m\n",
                           "t = transpose(c) {dim0=2, dim1=3}\ny = relu(t)\noutput y\n"}) {
    SCOPED_TRACE(tail);
    const std::string g = head + tail;
    EXPECT_TRUE(contains(cpu_kernels(g)[0], "cpp_template_conv2d"));
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 11));
  }
}

/// How many buffers of the program have `sizes` (the scale pass's [N, C, H, W] output is
/// one more than the input's).
size_t buffers_shaped(const std::string& text, const std::vector<int64_t>& sizes) {
  CompileOptions o;
  GeneratedProgram p = generate_program(parse_graph(text, "<test>"), o);
  size_t n = 0;
  for (const Buffer& b : p.program.buffers) {
    bool same = b.layout.sizes.size() == sizes.size();
    for (size_t i = 0; same && i < sizes.size(); ++i)
      same = b.layout.sizes[i] == sym::Expr(sizes[i]);
    n += same;
  }
  return n;
}

/// `const NAME: f32[dims] = [...]` with `count` values in [-1, 1] (a fixed pattern).
std::string constant(const std::string& name, const std::string& dims, int64_t count) {
  std::string v;
  for (int64_t i = 0; i < count; ++i)
    v += (i ? ", " : "") + std::to_string(static_cast<double>((i * 37 + 11) % 23) / 11.0 - 1.0);
  return "const " + name + ": f32" + dims + " = [" + v + "]\n";
}

TEST(ConvsAsMatmuls, ConstantWeightsArePackedOnceAtLoadTime) {
  // A constant weight is the product's A (W[OC, C] @ x[C, H * W]): packed when the module is
  // loaded (coil::gemm::pack_a_all in coil_graph_pack) and read in place by matmul_packed_a,
  // the same packed copy for every image of the batch. OC around the 8-row tile, and a plain
  // matmul whose constant left operand is shared by a batch; a weight that is a graph input is
  // packed per call as before.
  struct Case {
    std::string graph;
    bool packed;
  };
  const std::vector<Case> cases = {
      {constant("w", "[17, 33, 1, 1]", 17 * 33) +
           "input x: f32[2, 33, 5, 7]\nc = conv2d(x, w)\ny = relu(c)\noutput y\n",
       true},
      {constant("w", "[8, 3, 1, 1]", 24) + constant("b", "[8]", 8) +
           "input x: f32[1, 3, 4, 4]\nc = conv2d(x, w, b)\ny = clamp(c) {min=0.0, max=6.0}\n"
           "output y\n",
       true},
      {constant("a", "[13, 20]", 260) + "input x: f32[3, 20, 9]\ny = matmul(a, x)\noutput y\n",
       true},
      {conv_head("[2, 33, 5, 7]", "[17, 33, 1, 1]", false) + "y = relu(c)\noutput y\n", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    testing::Module m = testing::cpu_module(c.graph);
    EXPECT_EQ(contains(m.source, "const float* packed_a = packed_ptr"), c.packed);
    // x, B, changes every call: packed inside the call by the threads that read it
    EXPECT_TRUE(contains(m.source, "coil::gemm::matmul_raw_b(")) << m.source;
    EXPECT_EQ(contains(m.source, "coil::gemm::pack_a_all("), c.packed);
    EXPECT_TRUE(testing::matches_reference(parse_graph(c.graph, "<test>"), 23));
  }
}

TEST(ConvsAsMatmuls, ChannelScaleFoldsIntoTheWeights) {
  // x * sigmoid(se) (squeeze-and-excitation) read only by a 1x1 conv with fewer output
  // channels than pixels: the conv reads x, its weights are scaled per image; both operand
  // orders, a batch of 2 (each image its own weights), NaN in the scale.
  for (const char* mul : {"m = mul(x, g)\n", "m = mul(g, x)\n"}) {
    const std::string g = std::string(
                              "input x: f32[2, 16, 12, 12]\ninput s: f32[2, 16, 1, 1]\n"
                              "input w: f32[8, 16, 1, 1]\ninput b: f32[8]\ng = sigmoid(s)\n") +
                          mul + "c = conv2d(m, w, b)\ny = relu(c)\noutput y\n";
    SCOPED_TRACE(g);
    EXPECT_EQ(buffers_shaped(g, {2, 16, 12, 12}), 1u);  // the input only
    Graph graph = parse_graph(g, "<test>");
    EXPECT_TRUE(testing::matches_reference(graph, 17));
    std::vector<Tensor> in = testing::random_inputs(graph, 19);
    in[1].data_as<float>()[5] = std::nanf("");
    EXPECT_TRUE(testing::matches_reference(graph, in));
  }
}

TEST(ConvsAsMatmuls, ChannelScaleStaysAPassWhereItMustOrIsCheaper) {
  const std::string head =
      "input x: f32[1, 16, 3, 5]\ninput s: f32[1, 16, 1, 1]\ninput w: f32[8, 16, 1, 1]\n";
  const char* cases[] = {
      // more output channels than pixels: the scaled weights would be the bigger pass
      "input v: f32[20, 16, 1, 1]\nm = mul(x, s)\nc = conv2d(m, v)\noutput c\n",
      // the scaled value is read elsewhere too
      "m = mul(x, s)\nc = conv2d(m, w)\noutput c\noutput m\n",
      // the factor varies over the pixels
      "t = transpose(x) {dim0=2, dim1=3}\nu = reshape(t) {shape=[1, 16, 3, 5]}\n"
      "m = mul(x, u)\nc = conv2d(m, w)\noutput c\n"};
  for (const char* tail : cases) {
    const std::string g = head + tail;
    SCOPED_TRACE(g);
    EXPECT_EQ(buffers_shaped(g, {1, 16, 3, 5}), 2u);  // the input and the scaled x
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 23));
  }
}

TEST(ConvsAsMatmuls, StridedConvsGatherTheirPixelsThenMultiply) {
  // A strided 1x1 conv (resnet's downsample) reads x[n, c, sh * i, sw * j]: those pixels are
  // gathered into a contiguous buffer by a pointwise kernel, then the template multiplies and
  // its epilogue takes the bias, relu and a residual add. Strides 2, 3 and (1, 2); odd images
  // whose last row and column are read ((H - 1) / s + 1 outputs) or not; a 1x1 image; a batch;
  // NaN in x, at a pixel that is read and one that is not.
  const char* convs[] = {
      "input x: f32[2, 8, 9, 9]\ninput w: f32[8, 8, 1, 1]\ninput b: f32[8]\n"
      "c = conv2d(x, w, b) {stride=[2, 2]}\ny = relu(c)\n",
      "input x: f32[1, 9, 10, 7]\ninput w: f32[3, 9, 1, 1]\nc = conv2d(x, w) {stride=[3, 3]}\n"
      "y = clamp(c) {min=0.0, max=6.0}\n",
      "input x: f32[3, 12, 6, 11]\ninput w: f32[9, 12, 1, 1]\nc = conv2d(x, w) {stride=[1, 2]}\n"
      "input r: f32[3, 9, 6, 6]\ns = add(c, r)\ny = relu(s)\n",
      "input x: f32[2, 16, 1, 1]\ninput w: f32[4, 16, 1, 1]\nc = conv2d(x, w) {stride=[2, 2]}\n"
      "y = neg(c)\n",
      "input x: f32[1, 64, 56, 56]\ninput w: f32[128, 64, 1, 1]\ninput b: f32[128]\n"
      "c = conv2d(x, w, b) {stride=[2, 2]}\ninput r: f32[1, 128, 28, 28]\ns = add(c, r)\n"
      "y = relu(s)\n"};
  for (const char* conv : convs) {
    SCOPED_TRACE(conv);
    const std::string g = std::string(conv) + "output y\n";
    const std::vector<std::string> k = cpu_kernels(g);
    ASSERT_GE(k.size(), 2u);
    EXPECT_TRUE(contains(k[0], "cpp_fused_conv2d")) << k[0];  // the gather
    EXPECT_TRUE(contains(k[1], "cpp_template_conv2d")) << k[1];
    Graph graph = parse_graph(g, "<test>");
    EXPECT_TRUE(testing::matches_reference(graph, 29));
    std::vector<Tensor> in = testing::random_inputs(graph, 31);
    in[0].data_as<float>()[0] = std::nanf("");  // pixel (0, 0): read
    in[0].data_as<float>()[1] = std::nanf("");  // (0, 1): read only with a column stride of 1
    EXPECT_TRUE(testing::matches_reference(graph, in));
  }
}

TEST(ConvsAsMatmuls, OtherConvsStayLibraryCalls) {
  // A padded, grouped or spatial conv is not a plain product, and a strided 1x1 of fewer than
  // 8 input channels is not worth a gather: oneDNN computes them.
  const char* convs[] = {
      "input x: f32[2, 6, 9, 9]\ninput w: f32[8, 6, 1, 1]\nc = conv2d(x, w) {stride=[2, 2]}\n",
      "input x: f32[2, 6, 9, 9]\ninput w: f32[8, 6, 1, 1]\nc = conv2d(x, w) {padding=[1, 1]}\n",
      "input x: f32[2, 6, 9, 9]\ninput w: f32[8, 3, 1, 1]\nc = conv2d(x, w) {groups=2}\n",
      "input x: f32[2, 6, 9, 9]\ninput w: f32[8, 6, 3, 3]\nc = conv2d(x, w)\n"};
  for (const char* conv : convs) {
    SCOPED_TRACE(conv);
    const std::string g = std::string(conv) + "y = relu(c)\noutput y\n";
    EXPECT_TRUE(contains(cpu_kernels(g)[0], "cpp_extern_conv2d"));
    EXPECT_TRUE(testing::matches_reference(parse_graph(g, "<test>"), 13));
  }
}

}  // namespace
}  // namespace coil

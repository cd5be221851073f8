// An expand conv (1x1) and the depthwise conv that reads it, fused into one call of
// kernels/coil_expand_depthwise.h by fuse_expand_depthwise (lower/expand_depthwise.cpp):
// which graphs fuse and which do not, and the fused call's values against the reference
// interpreter and, bit for bit, against the two kernels apart (CompileOptions::
// store_all_intermediates skips the pass) over strides, kernel sizes, paddings, dilation,
// batches, odd images, no biases, every activation, NaN, and 1 and 2 threads.
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
using testing::count_of;
using testing::cpu_module;

struct Block {
  int64_t n, c_in, c, h, w, k;
  std::string attrs;   // the depthwise conv's
  std::string act;     // after the expand conv: "", relu, clamp, silu
  bool bias1, bias2;   // the expand's and the depthwise conv's
  std::string dw_act;  // after the depthwise conv: "", relu, clamp
};

/// x -> conv 1x1 (c_in -> c) -> act -> depthwise k x k -> dw_act -> y{sfx}.
std::string block(const Block& b, const std::string& sfx = "") {
  auto s = [](int64_t v) { return std::to_string(v); };
  std::string g = fmt::format(
      "input x{0}: f32[{1}, {2}, {3}, {4}]\ninput w{0}: f32[{5}, {2}, 1, 1]\n"
      "input d{0}: f32[{5}, 1, {6}, {6}]\n",
      sfx, b.n, b.c_in, b.h, b.w, b.c, b.k);
  if (b.bias1) g += fmt::format("input b{0}: f32[{1}]\n", sfx, b.c);
  if (b.bias2) g += fmt::format("input e{0}: f32[{1}]\n", sfx, b.c);
  g += fmt::format("p{0} = conv2d(x{0}, w{0}{1})\n", sfx, b.bias1 ? ", b" + sfx : "");
  std::string in = "p" + sfx;
  if (b.act == "relu") g += fmt::format("a{0} = relu(p{0})\n", sfx);
  if (b.act == "clamp") g += fmt::format("a{0} = clamp(p{0}) {{min=0.0, max=6.0}}\n", sfx);
  if (b.act == "silu") g += fmt::format("s{0} = sigmoid(p{0})\na{0} = mul(p{0}, s{0})\n", sfx);
  if (!b.act.empty()) in = "a" + sfx;
  g += fmt::format("q{0} = conv2d({1}, d{0}{2}) {{{3}{4}groups={5}}}\n", sfx, in,
                   b.bias2 ? ", e" + sfx : "", b.attrs, b.attrs.empty() ? "" : ", ", s(b.c));
  std::string out = "q" + sfx;
  if (b.dw_act == "relu") g += fmt::format("y{0} = relu(q{0})\n", sfx);
  if (b.dw_act == "clamp") g += fmt::format("y{0} = clamp(q{0}) {{min=0.0, max=6.0}}\n", sfx);
  if (!b.dw_act.empty()) out = "y" + sfx;
  return g + "output " + out + "\n";
}

/// The graph's outputs compiled with the fusion and with every intermediate stored (no fusion),
/// compared bit for bit, and the fused outputs against the reference interpreter.
void expect_same_as_apart(const std::string& text, const std::vector<Tensor>& in) {
  Graph g = parse_graph(text, "<test>");
  CompileOptions apart;
  apart.store_all_intermediates = true;
  std::vector<Tensor> fused = compile(g).run(in), want = compile(g, apart).run(in);
  ASSERT_EQ(fused.size(), want.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(testing::same_bits(fused[i], want[i]))
        << "output " << i << " differs from the two kernels apart";
  }
  EXPECT_TRUE(testing::matches_reference(g, in));
}

TEST(ExpandDepthwise, FusesAndMatchesTheKernelsApart) {
  const std::vector<Block> blocks = {
      // mobilenet_v2's second block, smaller: stride 2, clamp after both convs
      {1, 16, 24, 40, 40, 3, "stride=[2, 2], padding=[1, 1]", "clamp", true, true, "clamp"},
      // stride 1 (two recomputed rows per band boundary), relu, batch 2, odd image
      {2, 8, 16, 37, 29, 3, "padding=[1, 1]", "relu", true, true, "relu"},
      // efficientnet: 5x5, silu, no activation after the depthwise conv
      {1, 12, 40, 33, 33, 5, "stride=[2, 2], padding=[2, 2]", "silu", true, true, ""},
      // no activation between, no biases, dilation, asymmetric padding, stride (1, 2)
      {1, 5, 9, 21, 45, 3, "padding=[2, 1], dilation=[2, 2]", "", false, false, ""},
      {2, 3, 7, 18, 64, 3, "stride=[1, 2], padding=[0, 1]", "clamp", false, true, "clamp"},
      // fewer than 8 channels: planes even for narrow rows; a single input channel; 1 row
      {1, 1, 4, 12, 12, 3, "padding=[1, 1]", "relu", true, false, ""},
      {1, 6, 6, 1, 50, 3, "padding=[1, 1]", "clamp", true, true, ""},
      // bands over a tall image (the last band shorter), stride 3
      {1, 4, 16, 131, 61, 3, "stride=[3, 3], padding=[1, 1]", "relu", true, true, ""},
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string text = block(blocks[i]);
    SCOPED_TRACE(text);
    testing::Module m = cpu_module(text);
    EXPECT_EQ(count_of(m.source, "coil::expand_depthwise::forward("), 1u);
    EXPECT_EQ(m.kernels.size(), 1u);  // the expand, both activations and the depthwise conv
    EXPECT_FALSE(contains(m.source, "coil::gemm::matmul_packed_a("));
    Graph g = parse_graph(text, "<test>");
    expect_same_as_apart(text, testing::random_inputs(g, 11 + i));
  }
}

TEST(ExpandDepthwise, NanAndThreadCountsGiveTheSameBits) {
  // NaN in x, in the expand's weights and in the depthwise weights propagate as apart (relu and
  // clamp keep NaN); 1 and 2 threads split the bands differently, yet every value is the same
  // chain of operations.
  const Block b{2, 8, 24, 30, 30, 3, "stride=[2, 2], padding=[1, 1]", "clamp", true, true, "relu"};
  const std::string text = block(b);
  Graph g = parse_graph(text, "<test>");
  for (int operand : {0, 1, 2}) {
    SCOPED_TRACE(operand);
    std::vector<Tensor> in = testing::random_inputs(g, 3);
    in[static_cast<size_t>(operand)].data_as<float>()[operand == 0 ? 8 * 900 + 77 : 5] =
        std::nanf("");
    expect_same_as_apart(text, in);
    CompiledModel m = compile(g);
    const std::vector<Tensor> got = testing::first_output_at_one_and_two_threads(m, in);
    EXPECT_TRUE(testing::same_bits(got[0], got[1]));
  }
}

TEST(ExpandDepthwise, EveryIsa) {
  // The kernel is generic code over coil_vec.h (the depthwise planes path and the matmul
  // template of each ISA): each ISA this machine runs, against the reference.
  const std::string text =
      block({2, 8, 16, 37, 29, 3, "stride=[2, 2], padding=[1, 1]", "clamp", true, true, "relu"});
  Graph g = parse_graph(text, "<test>");
  for (const std::string& isa : testing::runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    EXPECT_TRUE(testing::matches_reference(g, testing::random_inputs(g, 4), o));
  }
}

TEST(ExpandDepthwise, WhatStaysApart) {
  struct Case {
    const char* why;
    std::string text;
  };
  const Block base{1, 16, 24, 40, 40, 3, "stride=[2, 2], padding=[1, 1]", "clamp", true, true, ""};
  std::vector<Case> cases;
  // The expanded tensor is read by something else too (it must be stored).
  std::string shared = block(base);
  shared += "z = relu(a)\noutput z\n";
  cases.push_back({"the activation has a second reader", shared});
  std::string shared_conv =
      block({1, 16, 24, 40, 40, 3, "stride=[2, 2], padding=[1, 1]", "", true, true, ""});
  shared_conv += "z = neg(p)\noutput z\n";
  cases.push_back({"the expand conv's output has a second reader", shared_conv});
  // The expanded tensor is an output.
  cases.push_back({"the activation is an output", block(base) + "output a\n"});
  // Narrow rows with at least 8 channels: the depthwise kernel's channel blocks.
  cases.push_back(
      {"channel blocks", block({1, 16, 24, 14, 14, 3, "padding=[1, 1]", "clamp", true, true, ""})});
  // An activation the depthwise call does not take between them (neg), and a strided or
  // padded 1x1 conv.
  std::string neg = block({1, 16, 24, 40, 40, 3, "padding=[1, 1]", "", true, true, ""});
  neg.replace(neg.find("q = conv2d(p,"), 13, "n = neg(p)\nq = conv2d(n,");
  cases.push_back({"neg between", neg});
  std::string strided = block(base);
  strided.replace(strided.find("p = conv2d(x, w, b)"), 19, "p = conv2d(x, w, b) {stride=[2, 2]}");
  cases.push_back({"a strided 1x1 conv", strided});
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.why) + "\n" + c.text);
    testing::Module m = cpu_module(c.text);
    EXPECT_FALSE(contains(m.source, "coil::expand_depthwise")) << c.why;
    EXPECT_TRUE(testing::matches_reference(parse_graph(c.text, "<test>"), 5));
  }
}

}  // namespace
}  // namespace coil

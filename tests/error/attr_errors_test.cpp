// Attributes are checked against the op registry's declarations when a node is added
// (graph/attr_check.h): an unknown name (with the nearest declared one suggested), a value of
// the wrong kind, one out of range, a missing required one. Each test checks the message.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "error/op_samples.h"
#include "graph/attr_check.h"
#include "graph/text_format.h"
#include "support/error_of.h"

namespace coil {
namespace {

using testing::error_of;

// The misspelling the table test uses: a plural dropped or added (`keepdims`, `stride`s).
std::string misspelled(std::string_view name) {
  if (name.ends_with('s')) return std::string(name.substr(0, name.size() - 1));
  return std::string(name) + "s";
}

// Every op, every declared attribute: a node giving the attribute misspelled is an error that
// suggests the declared name; an op without attributes says so.
TEST(AttrErrors, EveryOpRejectsAMisspelledAttribute) {
  for (const OpDef& op : all_ops()) {
    std::vector<std::string> samples = testing::op_samples(op);
    if (samples.empty()) continue;
    Graph g = parse_graph(testing::sample_graph(samples[0]), "<sample>");
    const Node& r = g.node(g.find("r"));
    auto error_with = [&](const std::string& name) {
      Attrs a = r.attrs;
      a.set(name, int64_t{1});
      return error_of([&] { g.add_node(op.name, r.inputs, a, "y"); });
    };
    if (op.attrs.empty()) {
      EXPECT_EQ(error_with("axis"),
                fmt::format("unknown attribute 'axis' of {} (node y); {} takes no attributes",
                            op.name, op.name));
      continue;
    }
    for (const AttrSpec& s : op.attrs) {
      std::string bad = misspelled(s.name);
      EXPECT_EQ(error_with(bad), fmt::format("unknown attribute '{}' of {} (node y); did you mean "
                                             "'{}'?",
                                             bad, op.name, s.name));
    }
  }
}

TEST(AttrErrors, UnknownAttribute) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({4, 3}));
  using V = std::vector<int64_t>;
  // The example: before the check, keepdims was ignored and y was f32[4].
  EXPECT_EQ(error_of([&] {
              g.add_node("sum", {x}, Attrs{{"axes", V{1}}, {"keepdims", true}}, "y");
            }),
            "unknown attribute 'keepdims' of sum (node y); did you mean 'keepdim'?");
  EXPECT_EQ(error_of([&] {
              g.add_node("sum", {x}, Attrs{{"foo", int64_t{1}}}, "y");
            }),
            "unknown attribute 'foo' of sum (node y); its attributes are axes, axis, keepdim");
  EXPECT_EQ(error_of([&] {
              g.add_node("exp", {x}, Attrs{{"axis", int64_t{1}}}, "y");
            }),
            "unknown attribute 'axis' of exp (node y); exp takes no attributes");
  // torch's names: kernel_size starts with kernel; an avg_pool2d has no dilation.
  EXPECT_EQ(error_of([&] {
              g.add_node("max_pool2d", {g.add_input("c", DType::F32, make_shape({1, 1, 4, 4}))},
                         Attrs{{"kernel_size", int64_t{2}}}, "p");
            }),
            "unknown attribute 'kernel_size' of max_pool2d (node p); did you mean 'kernel'?");
  EXPECT_EQ(error_of([&] {
              g.add_node("avg_pool2d", {g.find("c")},
                         Attrs{{"kernel", int64_t{2}}, {"dilation", int64_t{2}}}, "p");
            }),
            "unknown attribute 'dilation' of avg_pool2d (node p); its attributes are kernel, "
            "stride, padding, ceil_mode, count_include_pad");
  EXPECT_EQ(error_of([&] {
              g.add_node("argmax", {x}, Attrs{{"axes", V{1}}}, "y");
            }),
            "unknown attribute 'axes' of argmax (node y); did you mean 'axis'?");
  // An unnamed node is named by the name it would get.
  EXPECT_EQ(error_of([&] {
              g.add_node("softmax", {x}, Attrs{{"dim", int64_t{0}}});
            }),
            "unknown attribute 'dim' of softmax (node t0); its attributes are axis");
}

TEST(AttrErrors, WrongKind) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({4, 3}));
  using V = std::vector<int64_t>;
  auto error = [&](std::string_view op, Attrs a) {
    return error_of([&] { g.add_node(op, {x}, std::move(a), "y"); });
  };
  EXPECT_EQ(error("sum", {{"keepdim", 1.5}}),
            "attribute 'keepdim' of sum (node y) must be a bool, got 1.5");
  EXPECT_EQ(error("sum", {{"axes", int64_t{1}}}),
            "attribute 'axes' of sum (node y) must be a list of integers, got 1");
  EXPECT_EQ(error("gelu", {{"approximate", true}}),
            "attribute 'approximate' of gelu (node y) must be a string, got true");
  EXPECT_EQ(error("cast", {{"dtype", std::string("f16")}}),
            "attribute 'dtype' of cast (node y) must be a dtype, got \"f16\"");
  EXPECT_EQ(error("slice", {{"step", 2.0}}),
            "attribute 'step' of slice (node y) must be an integer, got 2.0");
  EXPECT_EQ(error("layer_norm", {{"eps", std::string("1e-5")}}),
            "attribute 'eps' of layer_norm (node y) must be a number, got \"1e-5\"");
  // A float attribute takes an integer (as Attrs::get_float reads it).
  EXPECT_EQ(error_of([&] { g.add_node("layer_norm", {x}, Attrs{{"eps", int64_t{0}}}, "n0"); }), "");
  EXPECT_EQ(error_of([&] { g.add_node("clamp", {x}, Attrs{{"min", int64_t{-1}}}, "n1"); }), "");
  int c = g.add_input("c", DType::F32, make_shape({1, 1, 4, 4}));
  EXPECT_EQ(error_of([&] {
              g.add_node("max_pool2d", {c}, Attrs{{"kernel", V{2, 2, 2}}}, "p");
            }),
            "attribute 'kernel' of max_pool2d (node p) must be an integer or a list of 1 or 2 "
            "integers, got [2, 2, 2]");
  EXPECT_EQ(error_of([&] {
              g.add_node("max_pool2d", {c}, Attrs{{"kernel", V{}}}, "p");
            }),
            "attribute 'kernel' of max_pool2d (node p) must be an integer or a list of 1 or 2 "
            "integers, got []");
}

TEST(AttrErrors, OutOfRange) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({4, 3}));
  using V = std::vector<int64_t>;
  auto error = [&](std::string_view op, Attrs a, std::vector<int> in = {}) {
    return error_of(
        [&] { g.add_node(op, in.empty() ? std::vector<int>{x} : in, std::move(a), "y"); });
  };
  EXPECT_EQ(error("slice", {{"step", int64_t{0}}}),
            "attribute 'step' of slice (node y) must be >= 1, got 0");
  EXPECT_EQ(error("gelu", {{"approximate", std::string("exact")}}),
            "attribute 'approximate' of gelu (node y) must be \"none\" or \"tanh\", got \"exact\"");
  EXPECT_EQ(error("layer_norm", {{"eps", -1e-5}}),
            "attribute 'eps' of layer_norm (node y) must be >= 0, got -1e-05");
  EXPECT_EQ(error("rms_norm", {{"eps", std::numeric_limits<double>::quiet_NaN()}}),
            "attribute 'eps' of rms_norm (node y) must be >= 0, got nan");
  EXPECT_EQ(error("layer_norm", {{"dims", int64_t{0}}}),
            "attribute 'dims' of layer_norm (node y) must be >= 1, got 0");
  EXPECT_EQ(error("reshape", {{"shape", V{-2, 6}}}),
            "attribute 'shape' of reshape (node y) must be >= -1, got [-2, 6]");
  EXPECT_EQ(error_of([&] {
              g.add_node("full", {}, Attrs{{"shape", V{2, -1}}, {"value", 1.0}}, "y");
            }),
            "attribute 'shape' of full (node y) must be >= 0, got [2, -1]");
  EXPECT_EQ(error_of([&] {
              g.add_node("iota", {}, Attrs{{"size", int64_t{-3}}}, "y");
            }),
            "attribute 'size' of iota (node y) must be >= 0, got -3");
  int c = g.add_input("c", DType::F32, make_shape({1, 4, 8, 8}));
  int w = g.add_input("w", DType::F32, make_shape({4, 4, 3, 3}));
  EXPECT_EQ(error("conv2d", {{"stride", V{1, 0}}}, {c, w}),
            "attribute 'stride' of conv2d (node y) must be >= 1, got [1, 0]");
  EXPECT_EQ(error("conv2d", {{"padding", int64_t{-1}}}, {c, w}),
            "attribute 'padding' of conv2d (node y) must be >= 0, got -1");
  EXPECT_EQ(error("conv2d", {{"groups", int64_t{0}}}, {c, w}),
            "attribute 'groups' of conv2d (node y) must be >= 1, got 0");
  // Two declared attributes that exclude each other (the type rule checks the pair).
  EXPECT_EQ(error("sum", {{"axes", V{0}}, {"axis", int64_t{1}}}),
            "sum: give 'axes' or 'axis', not both");
}

TEST(AttrErrors, MissingRequired) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({4, 3}));
  EXPECT_EQ(error_of([&] { g.add_node("permute", {x}, {}, "y"); }),
            "missing attribute 'dims' of permute (node y)");
  // reshape takes its target as `shape` (integers) or `sizes` (text with symbols): one of them
  EXPECT_EQ(error_of([&] { g.add_node("reshape", {x}, {}, "y"); }),
            "reshape: needs exactly one of the attributes shape and sizes");
  EXPECT_EQ(error_of([&] {
              g.add_node("full", {}, Attrs{{"shape", std::vector<int64_t>{2}}}, "y");
            }),
            "missing attribute 'value' of full (node y)");
  EXPECT_EQ(error_of([&] { g.add_node("max_pool2d", {x}, {}, "y"); }),
            "missing attribute 'kernel' of max_pool2d (node y)");
}

// The text format points at the name of an unknown attribute and at the value of a bad one;
// a missing one is reported at the op, as other errors of Graph::add_node are.
TEST(AttrErrors, TextFormatPointsAtTheAttribute) {
  auto error = [](const std::string& node) {
    return error_of([&] { parse_graph("input x: f32[4, 3]\n" + node + "\noutput y\n", "m.coil"); });
  };
  EXPECT_EQ(error("y = sum(x) {axes=[1], keepdims=true}"),
            "m.coil:2:23: unknown attribute 'keepdims' of sum (node y); did you mean 'keepdim'?");
  EXPECT_EQ(error("y = sum(x) {axes=[1], keepdim=1.5}"),
            "m.coil:2:31: attribute 'keepdim' of sum (node y) must be a bool, got 1.5");
  EXPECT_EQ(error("y = slice(x) {dim=1, step=-1}"),
            "m.coil:2:27: attribute 'step' of slice (node y) must be >= 1, got -1");
  EXPECT_EQ(error("y = permute(x)"), "m.coil:2:5: missing attribute 'dims' of permute (node y)");
  // With the check, the graph no longer compiles to a silently different shape.
  EXPECT_EQ(error("y = sum(x) {axes=[1], keepdim=true} : f32[4, 1]"), "");
}

TEST(AttrErrors, Signatures) {
  EXPECT_EQ(attr_signature(get_op("sum")), "{axes?, axis?, keepdim=false}");
  EXPECT_EQ(attr_signature(get_op("max_pool2d")),
            "{kernel, stride?, padding=[0, 0], dilation=[1, 1], ceil_mode=false}");
  EXPECT_EQ(attr_signature(get_op("gelu")), "{approximate=\"none\"}");
  EXPECT_EQ(attr_signature(get_op("exp")), "");
}

}  // namespace
}  // namespace coil

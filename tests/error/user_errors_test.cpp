// Bad input gives a coil::Error whose message names the op, the value and the mismatch;
// never a crash. Each test checks the message.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/error_of.h"

#include "coil/coil.h"
#include "graph/text_format.h"

namespace coil {
namespace {

using coil::testing::error_of;

TEST(UserErrors, GraphConstruction) {
  Graph g;
  int a = g.add_input("a", DType::F32, make_shape({3}));
  int b = g.add_input("b", DType::F32, make_shape({4}));
  EXPECT_EQ(error_of([&] {
              g.add_node("add", {a, b});
            }),
            "add: cannot broadcast shapes [3] and [4] (dim 0: 3 vs 4)");
  EXPECT_EQ(error_of([&] { g.add_node("fooo", {a}); }), "unknown op 'fooo'");
  EXPECT_EQ(error_of([&] { g.add_node("exp", {a, b}); }), "exp: expected 1 inputs, got 2");
  EXPECT_EQ(error_of([&] {
              g.add_node("sum", {a}, Attrs{{"axes", std::vector<int64_t>{1}}});
            }),
            "sum: axis 1 is out of range for a tensor of rank 1");
  EXPECT_EQ(error_of([&] {
              g.add_node("sum", {a}, Attrs{{"axes", std::string("x")}});
            }),
            "attribute 'axes' of sum (node t0) must be a list of integers, got \"x\"");
  EXPECT_EQ(error_of([&] {
              g.add_node("slice", {a}, Attrs{{"step", int64_t{0}}});
            }),
            "attribute 'step' of slice (node t0) must be >= 1, got 0");
  EXPECT_EQ(error_of([&] {
              g.add_node("reshape", {a}, Attrs{{"shape", std::vector<int64_t>{2, 2}}});
            }),
            "reshape: cannot reshape [3] (3 elements) to [2, 2]");
  EXPECT_EQ(error_of([&] { g.add_node("neg", {g.add_input("m", DType::Bool, make_shape({2}))}); }),
            "neg: not supported for bool inputs");
  EXPECT_EQ(error_of([&] { g.add_input("a", DType::F32, make_shape({1})); }),
            "value name 'a' is defined twice");
  int e = g.add_input("e", DType::F32, make_shape({2, 0}));
  EXPECT_EQ(error_of([&] {
              g.add_node("max", {e}, Attrs{{"axes", std::vector<int64_t>{1}}});
            }),
            "max: reduction over dim 1 of extent 0 has no identity");
  EXPECT_EQ(error_of([&] { g.add_node("argmax", {e}); }), "argmax: input [2, 0] is empty");
  EXPECT_EQ(error_of([&] {
              g.add_node("where", {a, a, a});
            }),
            "where: condition must be bool, got f32");
}

TEST(UserErrors, RunWithWrongInputs) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({4, 5}));
  g.add_output(g.add_node("exp", {x}), "y");
  CompiledModel m = compile(g);
  Tensor wrong_shape = Tensor::zeros(DType::F32, {4, 6});
  Tensor wrong_dtype = Tensor::zeros(DType::F64, {4, 5});
  EXPECT_EQ(error_of([&] { m.run({wrong_shape}); }), "input x: expected shape [4, 5], got [4, 6]");
  EXPECT_EQ(error_of([&] { m.run({wrong_dtype}); }), "input x: expected dtype f32, got f64");
  EXPECT_EQ(error_of([&] { m.run(std::vector<Tensor>{}); }), "the model takes 1 inputs, got 0");
  CompiledModel empty;
  EXPECT_EQ(error_of([&] { empty.run(std::vector<Tensor>{}); }),
            "run: the model is empty (moved from or default-constructed)");
}

TEST(UserErrors, OutOfMemoryIsAUserError) {
  EXPECT_EQ(error_of([] {
              Tensor::empty(DType::F32, {4000000000, 4});
            }),
            "cannot allocate 64000000000 bytes for a f32 tensor of shape [4000000000, 4]");
}

TEST(UserErrors, UnboundSizeSymbol) {
  // An unbound size makes a size-generic model (docs/dynamic-shapes.md): what needs bound
  // sizes says so.
  Graph g = parse_graph("input x: f32[s0, 4]\ny = exp(x)\noutput y\n");
  CompiledModel generic = compile(g);
  EXPECT_TRUE(generic.size_generic());
  EXPECT_EQ(error_of([&] { generic.report(); }),
            "report: a size-generic model compiles at its first call; run it first");
  EXPECT_EQ(error_of([&] { generic.export_to("/tmp/coil-never-written"); }),
            "export: the model is size-generic (s0); exported models have bound sizes for now: "
            "compile with CompileOptions::sizes (--size)");
  EXPECT_EQ(error_of([&] {
              generic.run({Tensor::zeros(DType::F32, {2, 5})});
            }),
            "input x: expected shape [s0, 4], got [2, 5] (dim 1 must be 4)");
  CompileOptions o;
  o.sizes["s0"] = 3;
  CompiledModel m = compile(g, o);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{3, 4}));
}

// The error of a node `op` over inputs of the given types ("" when there is none).
struct In {
  DType dtype;
  std::vector<int64_t> shape;
};
std::string node_error(std::string_view op, const std::vector<In>& ins, Attrs attrs = {}) {
  Graph g;
  std::vector<int> ids;
  for (size_t i = 0; i < ins.size(); ++i)
    ids.push_back(g.add_input(fmt::format("x{}", i), ins[i].dtype, make_shape(ins[i].shape)));
  return error_of([&] { g.add_node(op, ids, attrs); });
}

TEST(UserErrors, MatmulFamily) {
  const DType f32 = DType::F32;
  EXPECT_EQ(node_error("matmul", {{f32, {3, 4}}, {f32, {5, 6}}}),
            "matmul: cannot multiply [3, 4] by [5, 6] (K: 4 vs 5)");
  EXPECT_EQ(node_error("matmul", {{f32, {7}}, {f32, {6}}}),
            "matmul: cannot multiply [7] by [6] (K: 7 vs 6)");
  EXPECT_EQ(node_error("matmul", {{f32, {3, 4}}, {DType::F16, {4, 5}}}),
            "matmul: inputs must have the same dtype, got f32[3, 4] and f16[4, 5]");
  EXPECT_EQ(node_error("matmul", {{DType::I32, {3, 4}}, {DType::I32, {4, 5}}}),
            "matmul: inputs must be floating point (f32, f64, f16, bf16), got i32[3, 4] and "
            "i32[4, 5]");
  EXPECT_EQ(node_error("matmul", {{f32, {}}, {f32, {3}}}),
            "matmul: inputs must have at least 1 dim, got f32[] and f32[3]");
  EXPECT_EQ(node_error("matmul", {{f32, {2, 3, 4}}, {f32, {3, 4, 5}}}),
            "matmul: batch dims of [2, 3, 4] and [3, 4, 5]: cannot broadcast shapes [2] and [3] "
            "(dim 0: 2 vs 3)");
  EXPECT_EQ(node_error("bmm", {{f32, {3, 4}}, {f32, {4, 5}}}),
            "bmm: inputs must be 3-D, got f32[3, 4] and f32[4, 5]");
  EXPECT_EQ(node_error("bmm", {{f32, {2, 3, 4}}, {f32, {3, 4, 5}}}),
            "bmm: batch sizes differ: f32[2, 3, 4] and f32[3, 4, 5]");
  EXPECT_EQ(node_error("matmul", {{f32, {3, 4}}}), "matmul: expected 2 inputs, got 1");
  EXPECT_EQ(node_error("linear", {{f32, {2, 5}}, {f32, {4}}}),
            "linear: weight must be 2-D [out, in], got f32[4]");
  EXPECT_EQ(node_error("linear", {{f32, {2, 5}}, {f32, {4, 3}}}),
            "linear: input [2, 5] has 5 features, weight [4, 3] takes 3");
  EXPECT_EQ(node_error("linear", {{f32, {2, 3}}, {f32, {4, 3}}, {f32, {3}}}),
            "linear: bias [3] must have shape [4]");
  EXPECT_EQ(node_error("linear", {{f32, {2, 3}}, {f32, {4, 3}}, {DType::F64, {4}}}),
            "linear: inputs must have the same dtype, got f32[2, 3], f32[4, 3], f64[4]");
  EXPECT_EQ(node_error("addmm", {{f32, {2, 5}}, {f32, {3, 4}}, {f32, {4, 5}}}),
            "addmm: bias [2, 5] does not broadcast to the product's shape [3, 5]");
  EXPECT_EQ(node_error("addmm", {{f32, {5}}, {f32, {4}}, {f32, {4, 5}}}),
            "addmm: a and b must be 2-D, got f32[4] and f32[4, 5]");
  EXPECT_EQ(node_error("addmm", {{f32, {5}}, {f32, {3, 4}}, {f32, {4, 5}}},
                       Attrs{{"alpha", std::string("x")}}),
            "attribute 'alpha' of addmm (node t0) must be a number, got \"x\"");
}

TEST(UserErrors, Conv2d) {
  const DType f32 = DType::F32;
  using A = std::vector<int64_t>;
  const In x{f32, {1, 4, 8, 8}}, w{f32, {6, 2, 3, 3}};
  EXPECT_EQ(node_error("conv2d", {{f32, {4, 8, 8}}, w}),
            "conv2d: input must be 4-D [N, C, H, W], got f32[4, 8, 8]");
  EXPECT_EQ(node_error("conv2d", {x, {f32, {6, 2, 3}}}),
            "conv2d: weight must be 4-D [OC, C/groups, KH, KW], got f32[6, 2, 3]");
  EXPECT_EQ(node_error("conv2d", {x, {DType::BF16, {6, 2, 3, 3}}}),
            "conv2d: inputs must have the same dtype, got f32[1, 4, 8, 8] and bf16[6, 2, 3, 3]");
  EXPECT_EQ(node_error("conv2d", {x, w}),
            "conv2d: weight [6, 2, 3, 3] takes 2 input channels per group, but the input "
            "[1, 4, 8, 8] has 4 channels for groups=1");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{3}}}),
            "conv2d: input channels 4 are not divisible by groups=3 (input [1, 4, 8, 8])");
  EXPECT_EQ(node_error("conv2d", {x, {f32, {5, 2, 3, 3}}}, Attrs{{"groups", int64_t{2}}}),
            "conv2d: output channels 5 are not divisible by groups=2 (weight [5, 2, 3, 3])");
  EXPECT_EQ(node_error("conv2d", {x, w, {f32, {4}}}, Attrs{{"groups", int64_t{2}}}),
            "conv2d: bias [4] must have shape [6]");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{0}}}),
            "attribute 'groups' of conv2d (node t0) must be >= 1, got 0");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{2}}, {"stride", A{1, 0}}}),
            "attribute 'stride' of conv2d (node t0) must be >= 1, got [1, 0]");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{2}}, {"padding", int64_t{-1}}}),
            "attribute 'padding' of conv2d (node t0) must be >= 0, got -1");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{2}}, {"dilation", A{1, 2, 3}}}),
            "attribute 'dilation' of conv2d (node t0) must be an integer or a list of 1 or 2 "
            "integers, got [1, 2, 3]");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{2}}, {"dilation", A{4, 1}}}),
            "conv2d: input [1, 4, 8, 8] is too small for the window: output size would be 0x6 "
            "(kernel [3, 3], stride [1, 1], padding [0, 0], dilation [4, 1])");
  EXPECT_EQ(node_error("conv2d", {{DType::I64, {1, 4, 8, 8}}, {DType::I64, {6, 2, 3, 3}}},
                       Attrs{{"groups", int64_t{2}}}),
            "conv2d: inputs must be floating point (f32, f64, f16, bf16), got i64[1, 4, 8, 8] and "
            "i64[6, 2, 3, 3]");
  EXPECT_EQ(node_error("conv2d", {x, w}, Attrs{{"groups", int64_t{2}}}), "");
}

TEST(UserErrors, Pooling) {
  const DType f32 = DType::F32;
  using A = std::vector<int64_t>;
  const In x{f32, {1, 2, 5, 5}};
  EXPECT_EQ(node_error("max_pool2d", {x}), "missing attribute 'kernel' of max_pool2d (node t0)");
  EXPECT_EQ(node_error("avg_pool2d", {x}, Attrs{{"kernel", A{0, 2}}}),
            "attribute 'kernel' of avg_pool2d (node t0) must be >= 1, got [0, 2]");
  EXPECT_EQ(node_error("max_pool2d", {x}, Attrs{{"kernel", A{3, 3}}, {"padding", A{2, 1}}}),
            "max_pool2d: padding [2, 1] must be at most half of the kernel [3, 3]");
  EXPECT_EQ(node_error("max_pool2d", {x}, Attrs{{"kernel", A{2, 2}}, {"stride", A{0, 1}}}),
            "attribute 'stride' of max_pool2d (node t0) must be >= 1, got [0, 1]");
  EXPECT_EQ(node_error("avg_pool2d", {x}, Attrs{{"kernel", A{2, 2}}, {"dilation", A{2, 2}}}),
            "unknown attribute 'dilation' of avg_pool2d (node t0); its attributes are kernel, "
            "stride, padding, ceil_mode, count_include_pad");
  EXPECT_EQ(node_error("max_pool2d", {x}, Attrs{{"kernel", A{2, 2}}, {"count_include_pad", true}}),
            "unknown attribute 'count_include_pad' of max_pool2d (node t0); its attributes are "
            "kernel, stride, padding, dilation, ceil_mode");
  EXPECT_EQ(node_error("max_pool2d", {x}, Attrs{{"kernel", A{2, 2}}, {"ceil_mode", int64_t{1}}}),
            "attribute 'ceil_mode' of max_pool2d (node t0) must be a bool, got 1");
  EXPECT_EQ(node_error("max_pool2d", {{f32, {5, 5}}}, Attrs{{"kernel", A{2, 2}}}),
            "max_pool2d: input must have at least 3 dims ([..., C, H, W]), got f32[5, 5]");
  EXPECT_EQ(node_error("max_pool2d", {{DType::Bool, {1, 5, 5}}}, Attrs{{"kernel", A{2, 2}}}),
            "max_pool2d: not supported for bool inputs");
  EXPECT_EQ(node_error("avg_pool2d", {{DType::I32, {1, 5, 5}}}, Attrs{{"kernel", A{2, 2}}}),
            "avg_pool2d: input must be floating point, got i32[1, 5, 5]");
  EXPECT_EQ(node_error("max_pool2d", {x}, Attrs{{"kernel", A{3, 6}}, {"padding", A{0, 0}}}),
            "max_pool2d: input [1, 2, 5, 5] is too small for the window: output size would be "
            "1x0 (kernel [3, 6], stride [3, 6], padding [0, 0], dilation [1, 1])");
  EXPECT_EQ(node_error("global_avg_pool2d", {{f32, {5, 5}}}),
            "global_avg_pool2d: input must have at least 3 dims ([..., C, H, W]), got f32[5, 5]");
  EXPECT_EQ(node_error("global_avg_pool2d", {{DType::I64, {1, 5, 5}}}),
            "global_avg_pool2d: input must be floating point, got i64[1, 5, 5]");
  // Symbolic sizes: fine without ceil_mode; ceil_mode needs the size.
  Graph g = parse_graph("input x: f32[2, 3, h, w]\ny = max_pool2d(x) {kernel=[2, 2]}\noutput y\n");
  EXPECT_EQ(shape_str(g.node(g.outputs()[0].node).type.shape),
            "[2, 3, (h - 2) // 2 + 1, (w - 2) // 2 + 1]");
  EXPECT_EQ(error_of([] {
              parse_graph(
                  "input x: f32[2, 3, h, 4]\ny = max_pool2d(x) {kernel=[2, 2], "
                  "ceil_mode=true}\n",
                  "m.coil");
            }),
            "m.coil:2:5: max_pool2d: ceil_mode needs a static input size, got h");
  // Windows beyond 64 elements are not lowered yet.
  Graph big =
      parse_graph("input x: f32[1, 1, 9, 9]\ny = max_pool2d(x) {kernel=[9, 9]}\noutput y\n");
  EXPECT_EQ(error_of([&] { compile(big); }),
            "max_pool2d: windows of more than 64 elements are not supported yet (kernel [9, 9] has "
            "81)");
}

TEST(UserErrors, BadTextGraphPointsAtTheToken) {
  EXPECT_EQ(error_of([] { parse_graph("input x: f32[4]\ny = frobnicate(x)\n", "m.coil"); }),
            "m.coil:2:5: unknown op 'frobnicate'");
  EXPECT_EQ(
      error_of([] { parse_graph("input x: f32[4]\ny = add(x, z)\n", "m.coil"); }).substr(0, 11),
      "m.coil:2:12");
}

}  // namespace
}  // namespace coil

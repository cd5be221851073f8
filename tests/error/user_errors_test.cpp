// Bad input gives a coil::Error whose message names the op, the value and the mismatch;
// never a crash. Each test checks the message.
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
            "sum: attribute 'axes' must be a list of integers, got \"x\"");
  EXPECT_EQ(error_of([&] {
              g.add_node("slice", {a}, Attrs{{"step", int64_t{0}}});
            }),
            "slice: step must be positive, got 0");
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
  Graph g = parse_graph("input x: f32[s0, 4]\ny = exp(x)\noutput y\n");
  EXPECT_EQ(error_of([&] { compile(g); }),
            "input x: size 's0' is not bound; give it a value (e.g. --size s0=N)");
  CompileOptions o;
  o.sizes["s0"] = 3;
  CompiledModel m = compile(g, o);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{3, 4}));
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

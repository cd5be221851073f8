// Every elementwise op, compiled and compared with the reference interpreter, across dtypes
// and shapes (0-size, 1, odd, 1000003, multi-dim), broadcasting and strided inputs. Ops that
// share a dtype and shape go into one graph with one output each, so one compile covers many.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "support/check_graph.h"
#include "support/slow_tests.h"

namespace coil {
namespace {

using testing::matches_reference;
using testing::random_inputs;

const std::vector<std::vector<int64_t>> kShapes = {{0},       {1},     {3},      {17},
                                                   {1000003}, {3, 17}, {2, 3, 5}};

const std::vector<std::string> kFloatUnary = {
    "abs",        "neg",   "exp",     "log",   "log1p", "expm1",       "sqrt", "rsqrt",
    "reciprocal", "relu",  "sigmoid", "tanh",  "erf",   "gelu",        "silu", "sin",
    "cos",        "floor", "ceil",    "round", "sign",  "logical_not", "isnan"};
const std::vector<std::string> kIntUnary = {"abs",         "neg",   "exp",    "relu",
                                            "floor",       "ceil",  "round",  "sign",
                                            "logical_not", "isnan", "sigmoid"};
const std::vector<std::string> kBinary = {"add",     "sub", "mul",         "div",       "maximum",
                                          "minimum", "eq",  "ne",          "lt",        "le",
                                          "gt",      "ge",  "logical_and", "logical_or"};

Graph unary_graph(DType t, const std::vector<int64_t>& shape, const std::vector<std::string>& ops) {
  Graph g;
  int x = g.add_input("x", t, make_shape(shape));
  for (const auto& op : ops) g.add_output(g.add_node(op, {x}), op + "_out");
  if (is_floating(t)) {
    g.add_output(g.add_node("gelu", {x}, Attrs{{"approximate", std::string("tanh")}}), "gelu_tanh");
  }
  return g;
}

// The default tier runs half of the dtype x shape grid, every dtype and every shape in it
// (tests/support/slow_tests.h); COIL_SLOW_TESTS=1 the whole grid.
TEST(Elementwise, UnaryFloatOpsEveryDtypeAndShape) {
  const DType dtypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    const DType t = dtypes[i];
    for (size_t j = 0; j < kShapes.size(); ++j) {
      if (!testing::in_default_tier(i + j, 2)) continue;
      const auto& shape = kShapes[j];
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(t), shape_str(shape)));
      EXPECT_TRUE(matches_reference(unary_graph(t, shape, kFloatUnary)));
    }
  }
}

TEST(Elementwise, UnaryIntegerAndBoolOps) {
  for (DType t : {DType::I32, DType::I64, DType::I8, DType::U8}) {
    for (const auto& shape : {std::vector<int64_t>{17}, std::vector<int64_t>{3, 5}}) {
      SCOPED_TRACE(fmt::format("{}{}", dtype_name(t), shape_str(shape)));
      EXPECT_TRUE(matches_reference(unary_graph(t, shape, kIntUnary)));
    }
  }
  EXPECT_TRUE(
      matches_reference(unary_graph(DType::Bool, {33}, {"logical_not", "isnan", "exp", "abs"})));
}

TEST(Elementwise, SpecialFloatValues) {
  // NaN, infinities, signed zeros, halfway cases for round (half to even).
  Graph g = unary_graph(DType::F32, {12}, kFloatUnary);
  Tensor x = Tensor::empty(DType::F32, {12});
  const double vals[] = {NAN, INFINITY, -INFINITY, 0.0,  -0.0, 0.5,
                         1.5, 2.5,      -0.5,      -2.5, 1e30, -1e-30};
  for (int i = 0; i < 12; ++i) x.set_from_double(i, vals[i]);
  EXPECT_TRUE(matches_reference(g, {x}));
}

Graph binary_graph(DType a, const std::vector<int64_t>& sa, DType b, const std::vector<int64_t>& sb,
                   const std::vector<std::string>& ops) {
  Graph g;
  int x = g.add_input("a", a, make_shape(sa));
  int y = g.add_input("b", b, make_shape(sb));
  for (const auto& op : ops) g.add_output(g.add_node(op, {x, y}), op + "_out");
  return g;
}

TEST(Elementwise, BinaryOpsWithBroadcasting) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> pairs = {
      {{17}, {17}}, {{3, 1}, {1, 17}},      {{17}, {4, 17}}, {{2, 3, 5}, {5}},
      {{}, {3, 4}}, {{1000003}, {1000003}}, {{0, 3}, {3}},   {{1}, {1}}};
  const DType dtypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    const DType t = dtypes[i];
    for (size_t j = 0; j < pairs.size(); ++j) {
      if (!testing::in_default_tier(i + j, 2)) continue;  // half the grid (as above)
      const auto& [sa, sb] = pairs[j];
      SCOPED_TRACE(fmt::format("{} {} x {}", dtype_name(t), shape_str(sa), shape_str(sb)));
      std::vector<std::string> ops = kBinary;
      ops.push_back("fmod");
      ops.push_back("pow");
      EXPECT_TRUE(
          matches_reference(binary_graph(t, sa, t, sb, ops), 7, t == DType::F32 ? 10.0 : 1.0));
    }
  }
}

TEST(Elementwise, BinaryIntegerOps) {
  for (DType t : {DType::I32, DType::I64, DType::I8, DType::U8, DType::Bool}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<std::string> ops = {"add", "mul",         "div",       "maximum", "minimum",
                                    "eq",  "ne",          "lt",        "le",      "gt",
                                    "ge",  "logical_and", "logical_or"};
    if (t != DType::Bool) ops.push_back("sub");
    EXPECT_TRUE(matches_reference(binary_graph(t, {5, 7}, t, {7}, ops)));
  }
  // fmod and pow on integers: keep divisors non-zero and exponents non-negative.
  for (DType t : {DType::I32, DType::I64, DType::I8}) {
    Graph g;
    int a = g.add_input("a", t, make_shape({64}));
    int b = g.add_input("b", t, make_shape({64}));
    int one = g.add_node("full", {},
                         Attrs{{"shape", std::vector<int64_t>{}}, {"value", 1.0}, {"dtype", t}});
    int pos = g.add_node("add", {g.add_node("abs", {b}), one});
    g.add_output(g.add_node("fmod", {a, pos}), "fmod_pos");
    g.add_output(g.add_node("fmod", {a, g.add_node("neg", {pos})}), "fmod_neg");
    g.add_output(g.add_node("pow", {a, g.add_node("abs", {b})}), "pow");
    EXPECT_TRUE(matches_reference(g));
  }
}

TEST(Elementwise, PowOfTwoIsOneMultiply) {
  // x ** 2 (RMSNorm's mean of squares) lowers to x * x: no pow call in the kernel, and for f32
  // the square correctly rounded (what the reference's double pow rounds to), NaN, infinities,
  // signed zeros, overflow and underflow included; an exponent of 2 as an integer constant (a
  // torch Scalar) too. Other exponents keep pow.
  const double vals[] = {NAN,     INFINITY, -INFINITY, 0.0, -0.0, 1.5,     -3.25, 1e20, -1e-30,
                         7.0e-23, 3.4e38,   1.0000001, 0.1, -2.0, 65504.0, 1e-3,  17.0};
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    int x = g.add_input("x", t, make_shape({17}));
    auto scalar = [&](double v, DType dt) {
      return g.add_node("full", {},
                        Attrs{{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", dt}});
    };
    g.add_output(g.add_node("pow", {x, scalar(2.0, t)}), "float_two");
    g.add_output(g.add_node("pow", {x, scalar(2.0, DType::I64)}), "int_two");
    Tensor in = Tensor::empty(t, {17});
    for (int i = 0; i < 17; ++i) in.set_from_double(i, vals[i]);
    EXPECT_TRUE(matches_reference(g, {in}));
    CompiledModel m = compile(g);
    // No pow call ("(pow)" names the graph nodes in comments).
    EXPECT_EQ(m.report().source.find("pow("), std::string::npos) << m.report().source;
    if (t == DType::F32) {
      std::vector<Tensor> out = m.run({in});
      for (int i = 0; i < 17; ++i) {
        const float v = in.data_as<float>()[i], want = v * v;
        for (const Tensor& o : out) {
          const float got = o.data_as<float>()[i];
          EXPECT_TRUE(std::memcmp(&got, &want, 4) == 0 || (std::isnan(got) && std::isnan(want)))
              << v << " squared: " << got << ", want " << want;
        }
      }
    }
  }
  Graph g = testing::graph_from_text(R"(
input x: f32[9]
y = pow(x, x)
z = full() {shape=[], value=3.0, dtype=f32}
w = pow(x, z)
output y
output w
)");
  EXPECT_NE(compile(g).report().source.find("pow("), std::string::npos);
}

TEST(Elementwise, TypePromotion) {
  struct Case {
    DType a, b;
    std::vector<int64_t> sa, sb;
  };
  const Case cases[] = {
      {DType::F32, DType::I64, {9}, {9}},  {DType::I32, DType::F64, {9}, {9}},
      {DType::U8, DType::I8, {9}, {9}},    {DType::Bool, DType::F32, {9}, {9}},
      {DType::F16, DType::BF16, {9}, {9}}, {DType::F32, DType::F64, {9}, {}},
      {DType::I32, DType::F32, {9}, {}},   {DType::I64, DType::Bool, {3, 3}, {3}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} with {}", dtype_name(c.a), dtype_name(c.b)));
    EXPECT_TRUE(matches_reference(
        binary_graph(c.a, c.sa, c.b, c.sb, {"add", "mul", "div", "lt", "maximum"})));
  }
  // 0-dim f64 with an f32 tensor stays f32 (torch.result_type).
  Graph g = binary_graph(DType::F32, {4}, DType::F64, {}, {"add"});
  EXPECT_EQ(g.node(g.outputs()[0].node).type.dtype, DType::F32);
}

TEST(Elementwise, WhereCastClampFullIota) {
  Graph g;
  int c = g.add_input("c", DType::Bool, make_shape({4, 17}));
  int a = g.add_input("a", DType::F32, make_shape({4, 17}));
  int b = g.add_input("b", DType::I32, make_shape({17}));
  g.add_output(g.add_node("where", {c, a, b}), "where_out");
  g.add_output(g.add_node("clamp", {a}, Attrs{{"min", -0.5}, {"max", 0.75}}), "clamp_both");
  g.add_output(g.add_node("clamp", {a}, Attrs{{"min", 0.0}}), "clamp_min");
  g.add_output(g.add_node("clamp", {b}, Attrs{{"max", 2.0}}), "clamp_int");
  for (DType t : {DType::Bool, DType::U8, DType::I8, DType::I32, DType::I64, DType::F16,
                  DType::BF16, DType::F32, DType::F64}) {
    g.add_output(g.add_node("cast", {a}, Attrs{{"dtype", t}}),
                 fmt::format("a_to_{}", dtype_name(t)));
    g.add_output(g.add_node("cast", {b}, Attrs{{"dtype", t}}),
                 fmt::format("b_to_{}", dtype_name(t)));
    g.add_output(g.add_node("cast", {c}, Attrs{{"dtype", t}}),
                 fmt::format("c_to_{}", dtype_name(t)));
  }
  int f = g.add_node("full", {}, Attrs{{"shape", std::vector<int64_t>{2, 3}}, {"value", 0.25}});
  g.add_output(f, "full_out");
  g.add_output(
      g.add_node("iota", {},
                 Attrs{{"size", int64_t{10}}, {"start", int64_t{-3}}, {"step", int64_t{2}}}),
      "iota_out");
  g.add_output(g.add_node("iota", {}, Attrs{{"size", int64_t{7}}, {"dtype", DType::F32}}),
               "iota_f32");
  int three = g.add_node("full", {}, Attrs{{"shape", std::vector<int64_t>{}}, {"value", 3.0}});
  g.add_output(g.add_node("mul", {a, three}), "scaled");
  EXPECT_TRUE(matches_reference(g));
}

TEST(Elementwise, NonContiguousInputs) {
  // The model takes a [17, 5] input; pass a transposed view and a strided slice of a bigger one.
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({17, 5}));
  int y = g.add_input("y", DType::F32, make_shape({17, 5}));
  g.add_output(g.add_node("mul", {g.add_node("exp", {x}), y}), "out");
  Tensor big = random_tensor(DType::F32, {5, 17}, 3);
  Tensor xt = big.strided({17, 5}, {1, 17});  // transposed view
  Tensor wide = random_tensor(DType::F32, {17, 10}, 4);
  Tensor ys = wide.strided({17, 5}, {10, 2}, 1);  // every other column
  EXPECT_TRUE(matches_reference(g, {xt, ys}));
  Tensor bcast = random_tensor(DType::F32, {5}, 5).strided({17, 5}, {0, 1});  // stride-0 broadcast
  EXPECT_TRUE(matches_reference(g, {bcast, ys}));
}

TEST(Elementwise, LongChainIsInlinedIntoOneKernel) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({1000}));
  int v = x;
  for (const char* op :
       {"exp", "neg", "sigmoid", "tanh", "abs", "sqrt", "log1p", "sin", "cos", "relu"})
    v = g.add_node(op, {v});
  g.add_output(v, "y");
  CompiledModel m = compile(g);
  EXPECT_EQ(m.report().kernels.size(), 1u);
  EXPECT_TRUE(matches_reference(g));
}

}  // namespace
}  // namespace coil

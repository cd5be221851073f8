// Size-generic models (driver/dynamic_model.h): one compiled model, run at many sizes against
// the reference interpreter, for pointwise, reductions over symbolic axes, softmax and
// layer_norm, transposes, matmul with an epilogue, convolution with a symbolic batch; and the
// guard: a module is reused only for sizes that print the same source, so the counts of
// modules stay small where the code does not depend on the size.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "driver/dynamic_model.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

using testing::graph_from_text;

const std::vector<int64_t> kSizes = {1, 2, 3, 7, 16, 17, 1000, 1023, 4097};

/// Random inputs for `g` with its symbols bound by `sizes`.
std::vector<Tensor> inputs_at(const Graph& g, const std::map<std::string, int64_t>& sizes,
                              uint64_t seed) {
  std::vector<Tensor> out;
  for (int id : g.inputs()) {
    const Node& n = g.node(id);
    std::vector<int64_t> shape;
    for (const sym::Expr& d : n.type.shape) shape.push_back(sym::evaluate(d, sizes));
    out.push_back(random_tensor(n.type.dtype, shape, seed++, -2, 2));
  }
  return out;
}

::testing::AssertionResult matches_at(const CompiledModel& m, const Graph& g,
                                      const std::map<std::string, int64_t>& sizes,
                                      double tol_scale = 1) {
  std::vector<Tensor> in = inputs_at(g, sizes, 7);
  std::vector<Tensor> got = m.run(in);
  std::vector<Tensor> want = interpret(g, in);
  for (size_t i = 0; i < got.size(); ++i) {
    Tolerance tol = default_tolerance(got[i].dtype());
    tol.rtol *= tol_scale;
    tol.atol *= tol_scale;
    CompareResult c = compare_tensors(got[i], want[i], tol);
    if (!c.ok) {
      std::string at;
      for (const auto& [k, v] : sizes) at += fmt::format(" {}={}", k, v);
      return ::testing::AssertionFailure()
             << "at" << at << ": output " << g.outputs()[i].name << ": " << c.message;
    }
  }
  return ::testing::AssertionSuccess();
}

// One symbol, every size of kSizes, one model.
void sweep(const std::string& text, int max_modules, double tol_scale = 1) {
  Graph g = graph_from_text(text);
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  for (int64_t n : kSizes) ASSERT_TRUE(matches_at(m, g, {{"n", n}}, tol_scale)) << text;
  // The compile count is not a correctness property, but a regression here means sizes
  // stopped sharing code.
  EXPECT_LE(m.size_stats().modules, max_modules) << text;
  EXPECT_EQ(m.size_stats().specialized, 0) << text;
}

TEST(DynamicShapes, Pointwise) {
  sweep(
      "input x: f32[n, 64]\ninput y: f32[64]\na = mul(x, y)\nb = gelu(a)\nc = add(b, x)\n"
      "output c\n",
      3);
}

TEST(DynamicShapes, PointwiseAlongTheSymbol) {
  sweep("input x: f32[3, n]\na = exp(x)\nb = mul(a, x)\noutput b\n", 4);
}

TEST(DynamicShapes, ReductionOverASymbolicAxis) {
  sweep(
      "input x: f32[5, n]\ns = sum(x) {axes=[1]}\nm = max(x) {axes=[1], keepdim=true}\n"
      "output s\noutput m\n",
      6, 4);
}

TEST(DynamicShapes, ReductionAlongAStaticAxis) {
  sweep(
      "input x: f32[n, 33]\ns = sum(x) {axes=[1]}\nt = mean(x) {axes=[1]}\n"
      "u = sum(x) {axes=[0]}\noutput s\noutput t\noutput u\n",
      6, 4);
}

// A mean or variance over a symbolic axis divides by a count that is a size: the
// decomposition sums ones over the axis (fused into the same loop) instead of a constant.
TEST(DynamicShapes, MeanAndVarOverASymbolicAxis) {
  sweep(
      "input x: f32[n, 5]\nt = mean(x) {axes=[0]}\nv = var(x) {axes=[0], keepdim=true}\n"
      "u = var(x) {axes=[0, 1], correction=0}\noutput t\noutput v\noutput u\n",
      4, 8);
}

TEST(DynamicShapes, SoftmaxAndLayerNorm) {
  sweep(
      "input x: f32[n, 48]\ninput w: f32[48]\ninput b: f32[48]\n"
      "s = softmax(x) {axis=-1}\nl = layer_norm(x, w, b) {dims=1}\n"
      "output s\noutput l\n",
      4, 4);
}

TEST(DynamicShapes, SoftmaxOverTheSymbol) {
  sweep("input x: f32[4, n]\ns = softmax(x) {axis=-1}\noutput s\n", 6, 4);
}

TEST(DynamicShapes, Transpose) {
  sweep(
      "input x: f32[n, 24]\ninput y: f32[24, n]\nt = transpose(y) {dim0=0, dim1=1}\n"
      "z = add(x, t)\noutput z\n",
      6);
}

// A transposed operand read through 2-D register tiles: the tile loops run to the symbol (not
// to the size the variant was compiled at), so sizes with the same tile decisions (whole tiles
// for multiples of the lanes) share one module, and the others stay right.
TEST(DynamicShapes, TransposedTilesBoundByTheSymbol) {
  Graph g = graph_from_text(
      "input x: f32[n, 64]\ninput y: f32[64, n]\nt = transpose(x) {dim0=0, dim1=1}\n"
      "z = add(t, y)\noutput z\n");
  CompiledModel m = compile(g);
  for (int64_t n : {160, 176, 192, 208}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_NE(m.report().source.find("x1_tile < ks0;"), std::string::npos) << m.report().source;
  EXPECT_EQ(m.size_stats().modules, 1);
  for (int64_t n : {17, 100, 4097}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
}

TEST(DynamicShapes, TwoSymbols) {
  Graph g = graph_from_text(
      "input x: f32[a, b]\ninput y: f32[b]\nz = add(x, y)\nt = transpose(z) {dim0=0, dim1=1}\n"
      "s = sum(z) {axes=[0]}\noutput t\noutput s\n");
  CompiledModel m = compile(g);
  for (int64_t a : {1, 3, 17, 64})
    for (int64_t b : {1, 7, 16, 129}) ASSERT_TRUE(matches_at(m, g, {{"a", a}, {"b", b}}, 4));
  EXPECT_EQ(m.size_stats().sizes, 16);
}

TEST(DynamicShapes, MatmulWithEpilogue) {
  Graph g;
  int x = g.add_input("x", DType::F32, {sym::make_symbol("n"), 64});
  int w = g.add_constant(random_tensor(DType::F32, {64, 40}, 3, -1, 1), "w");
  int b = g.add_constant(random_tensor(DType::F32, {40}, 4, -1, 1), "b");
  int y = g.add_node("relu", {g.add_node("add", {g.add_node("matmul", {x, w}), b})});
  g.add_output(y, "y");
  CompiledModel m = compile(g);
  for (int64_t n : kSizes) ASSERT_TRUE(matches_at(m, g, {{"n", n}}, 4));
}

TEST(DynamicShapes, BatchedMatmulOverASymbolicBatch) {
  Graph g = graph_from_text(
      "input x: f32[n, 5, 12]\ninput y: f32[n, 12, 9]\nz = matmul(x, y)\noutput z\n");
  CompiledModel m = compile(g);
  for (int64_t n : {1, 2, 7, 33}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}, 4));
  EXPECT_LE(m.size_stats().modules, 2);
}

TEST(DynamicShapes, AttentionOverSymbolicLengths) {
  Graph g = graph_from_text(
      "input q: f32[b, 4, t, 16]\ninput k: f32[b, 4, t, 16]\ninput v: f32[b, 4, t, 16]\n"
      "y = attention(q, k, v) {causal=true}\noutput y\n");
  CompiledModel m = compile(g);
  for (auto [b, t] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 7}, {3, 64}, {5, 100}})
    ASSERT_TRUE(matches_at(m, g, {{"b", b}, {"t", t}}, 4));
  // The kernel's parameters print as the sizes' expressions: the sizes above 1 share a module
  // (a size equal to a constant of the call, b = 4 heads here, would print as the constant and
  // make a module of its own).
  EXPECT_LE(m.size_stats().modules, 2);
  EXPECT_EQ(m.size_stats().specialized, 0);
}

TEST(DynamicShapes, ConvolutionWithASymbolicBatch) {
  Graph g;
  int x = g.add_input("x", DType::F32, {sym::make_symbol("n"), 3, 12, 12});
  int w = g.add_constant(random_tensor(DType::F32, {8, 3, 3, 3}, 3, -1, 1), "w");
  Attrs attrs;
  attrs.set("padding", std::vector<int64_t>{1, 1});
  int y = g.add_node("relu", {g.add_node("conv2d", {x, w}, attrs)});
  g.add_output(y, "y");
  CompiledModel m = compile(g);
  for (int64_t n : {1, 2, 3, 7}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}, 4));
}

TEST(DynamicShapes, SizesBoundInOptionsStaySpecialized) {
  Graph g = graph_from_text("input x: f32[n, 8]\ny = exp(x)\noutput y\n");
  CompileOptions o;
  o.sizes["n"] = 3;
  CompiledModel m = compile(g, o);
  EXPECT_FALSE(m.size_generic());
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{3, 8}));
}

TEST(DynamicShapes, SpecsMarkSymbolicSizes) {
  Graph g = graph_from_text("input x: f32[n, 8]\ny = exp(x)\noutput y\n");
  CompiledModel m = compile(g);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{-1, 8}));
  EXPECT_EQ(m.outputs()[0].shape, (std::vector<int64_t>{-1, 8}));
}

TEST(DynamicShapes, ModulesAreSharedAcrossSizes) {
  // x * 2 along [n, 64]: the vector loop runs over a static 64, the symbol bounds only the
  // outer loop; every size prints one source once its parallel plan settles.
  Graph g = graph_from_text("input x: f32[n, 64]\ny = mul(x, x)\noutput y\n");
  CompiledModel m = compile(g);
  for (int64_t n = 1; n <= 40; ++n) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_EQ(m.size_stats().sizes, 40);
  EXPECT_LE(m.size_stats().modules, 3);
}

// Decisions that depend on how large a buffer is read the call's sizes: a large output
// streams (non-temporal stores, as the specialized module does), a small one does not, and
// the two sizes get different variants, both right.
TEST(DynamicShapes, LargeOutputsStreamAtTheirSizes) {
  Graph g = graph_from_text("input x: f32[n, 1024]\ny = softmax(x) {axis=-1}\noutput y\n");
  CompiledModel m = compile(g);
  ASSERT_TRUE(matches_at(m, g, {{"n", 17}}));
  EXPECT_EQ(m.report().source.find("store_stream"), std::string::npos);
  ASSERT_TRUE(matches_at(m, g, {{"n", 8191}}));  // 32 MiB out: fails the first module's guard
  EXPECT_NE(m.report().source.find("store_stream"), std::string::npos);
  EXPECT_EQ(m.size_stats().modules, 2);
  // Each later size passes one module's guards: no code generated, streaming as its size asks.
  ASSERT_TRUE(matches_at(m, g, {{"n", 9000}}));
  EXPECT_NE(m.report().source.find("store_stream"), std::string::npos);
  ASSERT_TRUE(matches_at(m, g, {{"n", 100}}));
  EXPECT_EQ(m.report().source.find("store_stream"), std::string::npos);
  EXPECT_EQ(m.size_stats().generated, 2);
  EXPECT_EQ(m.size_stats().modules, 2);
  EXPECT_EQ(m.size_stats().specialized, 0);
}

// Targets with several symbols (`sizes` text: a transformer's heads split off and merged back
// with a dynamic batch and length, a causal-style mask of the length): one model for every
// size, each against the reference interpreter (which binds the sizes as the model does).
TEST(DynamicShapes, ReshapeExpandAndFullToSeveralSymbols) {
  Graph g = graph_from_text(
      "input x: f32[b, t, 24]\n"
      "h = reshape(x) {sizes=\"b, t, 4, 6\"}\n"
      "p = permute(h) {dims=[0, 2, 1, 3]}\n"
      "pt = transpose(p) {dim0=2, dim1=3}\n"
      "s = matmul(p, pt)\n"
      "a = softmax(s) {axis=-1}\n"
      "q = matmul(a, p)\n"
      "qp = permute(q) {dims=[0, 2, 1, 3]}\n"
      "m = reshape(qp) {sizes=\"b, t, -1\"}\n"
      "f = full() {sizes=\"t, t\", value=0.5}\n"
      "fe = expand(f) {sizes=\"b, -1, -1\"}\n"
      "ms = sum(m) {axes=[2], keepdim=true}\n"
      "e = add(fe, ms)\n"
      "output m\noutput e\n");
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  for (int64_t b : {1, 2, 5})
    for (int64_t t : {1, 3, 17}) ASSERT_TRUE(matches_at(m, g, {{"b", b}, {"t", t}}, 4));
  EXPECT_EQ(m.size_stats().specialized, 0);
  EXPECT_LE(m.size_stats().modules, 4);  // b and t each 1 or not
}

TEST(DynamicShapes, SlicesOfASymbolicDimThatCannotClamp) {
  // A language model's shift (x[:, :-1], x[:, 1:]), the last and the first position: bounds
  // of 0 or 1 from either end equal python's clamped bounds at every size >= 1, so they stay
  // expressions of t; the interpreter at each size is the reference (python's bounds).
  Graph g = graph_from_text(
      "input x: f32[b, t, 6]\n"
      "a = slice(x) {dim=1, start=0, end=-1}\n"
      "c = slice(x) {dim=1, start=1}\n"
      "d = add(a, c)\n"
      "l = slice(x) {dim=1, start=-1}\n"
      "f = slice(x) {dim=1, start=0, end=1}\n"
      "e = mul(l, f)\n"
      "output d\noutput e\n");
  EXPECT_EQ(type_str(g.node(g.outputs()[0].node).type), "f32[b, t - 1, 6]");
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  for (int64_t b : {1, 3})
    for (int64_t t : {1, 2, 3, 9, 40}) ASSERT_TRUE(matches_at(m, g, {{"b", b}, {"t", t}}, 5));
  EXPECT_EQ(m.size_stats().specialized, 0);
}

// Bounds that python clamps at some sizes (x[:, 2:] of a length 1, x[:, :-3] of a length 2)
// and steps other than 1: written with min/max of the size, right at every size from 0; the
// interpreter at each size (python's bounds) is the reference.
TEST(DynamicShapes, SlicesWhoseBoundsClampAtSomeSizes) {
  Graph g = graph_from_text(
      "input x: f32[b, t, 6]\n"
      "a = slice(x) {dim=1, start=0, end=-3}\n"
      "c = slice(x) {dim=1, start=2}\n"
      "d = slice(x) {dim=1, start=-4, step=2}\n"
      "e = slice(x) {dim=1, start=1, end=5, step=3}\n"
      "f = slice(x) {dim=1, start=-2, end=-1}\n"
      "s = sum(c) {axes=[1]}\n"
      "output a\noutput c\noutput d\noutput e\noutput f\noutput s\n");
  EXPECT_EQ(type_str(g.node(g.outputs()[1].node).type), "f32[b, max(t - 2, 0), 6]");
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  for (int64_t b : {1, 2})
    for (int64_t t : {0, 1, 2, 3, 4, 5, 7, 16, 41})
      ASSERT_TRUE(matches_at(m, g, {{"b", b}, {"t", t}}, 5));
  EXPECT_EQ(m.size_stats().specialized, 0);
}

// A slice of a dim that is an expression of sizes (a concat's t + 1) clamps the same way (it
// once asked the analyzer to bind the expression itself: an internal error).
TEST(DynamicShapes, SliceOfADimThatIsAnExpressionOfSizes) {
  Graph g = graph_from_text(
      "input x: f32[t, 6]\ninput y: f32[1, 6]\nc = concat(x, y) {dim=0}\n"
      "s = slice(c) {dim=0, start=2}\nr = slice(c) {dim=0, start=-3, step=2}\n"
      "output s\noutput r\n");
  CompiledModel m = compile(g);
  for (int64_t t : {0, 1, 2, 3, 9}) ASSERT_TRUE(matches_at(m, g, {{"t", t}}));
}

TEST(DynamicShapes, SizesTextErrorsNameTheOpAndEntry) {
  auto error = [](const std::string& text) {
    try {
      graph_from_text(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("input x: f32[n, 6]\ny = reshape(x) {sizes=\"n, 2, 3x\"}\noutput y\n")
                .find("reshape: sizes=\"n, 2, 3x\": entry '3x' is neither an integer nor a size "
                      "symbol"),
            std::string::npos);
  EXPECT_NE(error("input x: f32[n, 6]\ny = reshape(x) {sizes=\"n, 4, -1\"}\noutput y\n")
                .find("cannot reshape [n, 6]"),
            std::string::npos);
  EXPECT_NE(error("input x: f32[n, 6]\ny = reshape(x) {shape=[-1], sizes=\"n, 6\"}\noutput y\n")
                .find("exactly one of the attributes shape and sizes"),
            std::string::npos);
  EXPECT_NE(error("input x: f32[n]\ny = full() {sizes=\"n, -1\", value=1.0}\noutput y\n")
                .find("size -1 is invalid"),
            std::string::npos);
}

// One decode step of a language model with a KV cache of n positions (the cache grows by one
// each step, torch.compile's shape of it): projections of the new token, the cache
// concatenated with its keys and values, grouped-query attention over n + 1 keys, the output
// projection and residual. Every step is a new n; the modules must not follow it.
const char* const kDecodeStep =
    "input x: f32[1, 1, 32]\ninput ck: f32[1, 2, n, 8]\ninput cv: f32[1, 2, n, 8]\n"
    "input wq: f32[32, 32]\ninput wk: f32[32, 16]\ninput wv: f32[32, 16]\n"
    "input wo: f32[32, 32]\n"
    "q0 = matmul(x, wq)\nq1 = reshape(q0) {shape=[1, 1, 4, 8]}\n"
    "q = permute(q1) {dims=[0, 2, 1, 3]}\n"
    "k0 = matmul(x, wk)\nk1 = reshape(k0) {shape=[1, 1, 2, 8]}\n"
    "k2 = permute(k1) {dims=[0, 2, 1, 3]}\n"
    "v0 = matmul(x, wv)\nv1 = reshape(v0) {shape=[1, 1, 2, 8]}\n"
    "v2 = permute(v1) {dims=[0, 2, 1, 3]}\n"
    "k = concat(ck, k2) {dim=2}\nv = concat(cv, v2) {dim=2}\n"
    "a = attention(q, k, v) {causal=true}\n"
    "a1 = permute(a) {dims=[0, 2, 1, 3]}\na2 = reshape(a1) {shape=[1, 1, 32]}\n"
    "o = matmul(a2, wo)\ny = add(o, x)\noutput y\noutput k\noutput v\n";

TEST(DynamicShapes, DecodeStepOverAGrowingCache) {
  Graph g = graph_from_text(kDecodeStep);
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  for (int64_t n = 2; n <= 40; ++n) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_EQ(m.size_stats().specialized, 0);
  // One module for every length: generated at primes, it prints no length as a constant
  // that n + 1 happens to equal (the 4 heads, the head dim 8, the width 32: n = 3, 7, 31 each
  // got a module of their own when every length ran the front half).
  EXPECT_EQ(m.size_stats().modules, 1) << m.report().source;
}

// Explicit guards (driver/dynamic_model.h, step 2): a module generated at primes near the
// first size (and checked one above them) serves every later size that passes its guards, with
// no code generated. Each size it serves is checked against the interpreter: sizes below,
// at and far above the ones it was generated at, with and without vector tails.
void expect_guarded_sweep(const std::string& text,
                          const std::vector<std::map<std::string, int64_t>>& sizes,
                          int modules = 1) {
  Graph g = graph_from_text(text);
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  int served = 0;
  for (const auto& at : sizes) {
    const int before = m.size_stats().generated;
    ASSERT_TRUE(matches_at(m, g, at, 5)) << text;
    served += m.size_stats().generated == before;
  }
  EXPECT_EQ(m.size_stats().guarded, modules) << text;
  EXPECT_EQ(m.size_stats().generated, modules) << text;
  EXPECT_EQ(served, static_cast<int>(sizes.size()) - modules) << text;
  EXPECT_EQ(m.size_stats().specialized, 0) << text;
}

TEST(DynamicShapesGuards, OneModuleServesEverySizeThatPassesItsGuards) {
  std::vector<std::map<std::string, int64_t>> one;
  for (int64_t n : {2, 3, 7, 16, 17, 64, 1000, 1023, 4097}) one.push_back({{"n", n}});
  expect_guarded_sweep("input x: f32[n, 33]\ny = gelu(x)\noutput y\n", one);
  expect_guarded_sweep("input x: f32[n]\nh = mul(x, x)\nc = add(h, x)\noutput c\n", one);
  expect_guarded_sweep("input x: f32[7, n]\ny = sum(x) {axes=[1]}\noutput y\n", one);
  // Two modules: 4097 rows and more are reduced in 64 chunks of rows (a guard, ks0 >= 1024).
  expect_guarded_sweep("input x: f32[n, 40]\ny = softmax(x) {axis=0}\noutput y\n", one, 2);
  expect_guarded_sweep(
      "input x: f32[n, 64]\ninput w: f32[64]\ninput b: f32[64]\n"
      "y = layer_norm(x, w, b) {dims=1}\noutput y\n",
      one);
  expect_guarded_sweep("input x: f32[n, 24]\ny = transpose(x)\noutput y\n", one);
  expect_guarded_sweep(
      "input x: f32[n, 48]\ninput w: f32[48, 40]\ninput b: f32[40]\n"
      "m = matmul(x, w)\na = add(m, b)\ny = relu(a)\noutput y\n",
      one);
  std::vector<std::map<std::string, int64_t>> two;
  for (int64_t b : {2, 3, 5})
    for (int64_t t : {2, 7, 16, 41, 300}) two.push_back({{"b", b}, {"t", t}});
  expect_guarded_sweep(
      "input x: f32[b, t, 6]\n"
      "a = slice(x) {dim=1, start=0, end=-3}\nc = slice(x) {dim=1, start=2}\n"
      "d = slice(x) {dim=1, start=-4, step=2}\ns = sum(c) {axes=[1]}\n"
      "output a\noutput d\noutput s\n",
      two);
  expect_guarded_sweep(
      "input x: f32[b, t, 32]\nr = reshape(x) {sizes=\"b, t, 4, 8\"}\n"
      "p = permute(r) {dims=[0, 2, 1, 3]}\ne = exp(p)\noutput e\n",
      two);
}

// A gather from a table whose length is a size symbol: one module for every length, the index
// checked against the length of each call (the error names it), never read out of bounds.
TEST(DynamicShapesGuards, AGatherFromASymbolicTableIsOneModule) {
  Graph g = graph_from_text(
      "input x: f32[n, 16]\ninput i: i64[5]\ny = gather(x, i)\nz = mul(y, y)\noutput z\n");
  CompiledModel m = compile(g);
  for (int64_t n : {2, 3, 7, 16, 17, 1000, 1023, 4097}) {
    std::vector<Tensor> in = inputs_at(g, {{"n", n}}, 3);
    const int64_t idx[] = {0, n - 1, -n, n / 2, -1};
    for (int64_t k = 0; k < 5; ++k) in[1].set_from_double(k, static_cast<double>(idx[k]));
    std::vector<Tensor> got = m.run(in), want = interpret(g, in);
    ASSERT_TRUE(compare_tensors(got[0], want[0], default_tolerance(DType::F32)).ok) << "n=" << n;
    in[1].set_from_double(2, static_cast<double>(n));  // one past the end of this call's table
    std::string error = testing::error_of([&] { m.run(in); });
    EXPECT_NE(error.find(fmt::format("index {} is out of range for a dim of size {}", n, n)),
              std::string::npos)
        << error;
  }
  EXPECT_EQ(m.size_stats().generated, 1);
  EXPECT_EQ(m.size_stats().specialized, 0);
  EXPECT_NE(m.report().source.find("coil::checked_index(static_cast<int64_t>("), std::string::npos);
  EXPECT_NE(m.report().source.find(", ks0, coil_run_error"), std::string::npos)
      << m.report().source;
}

// An embedding's gradient with the token count and the table's rows symbolic (a dynamic batch
// of a training step): one size-generic module, its loops over ks0/ks1, right at every size,
// and an index out of range at one of them is the run check's error with that call's size.
TEST(DynamicShapesGuards, AnIndexAddOverSymbolicTokensAndRowsIsOneModule) {
  Graph g = graph_from_text(
      "input x: f32[v, 24]\ninput i: i64[t]\ninput s: f32[t, 24]\n"
      "y = index_add(x, i, s)\nz = mul(y, y)\noutput z\n");
  CompiledModel m = compile(g);
  for (auto [v, t] :
       {std::pair<int64_t, int64_t>{2, 3}, {7, 1}, {16, 40}, {100, 17}, {1000, 513}, {3, 4097}}) {
    std::vector<Tensor> in = inputs_at(g, {{"v", v}, {"t", t}}, 5);
    for (int64_t k = 0; k < t; ++k)
      in[1].set_from_double(k, static_cast<double>((k * 7919) % (2 * v) - v));  // [-v, v)
    std::vector<Tensor> got = m.run(in), want = interpret(g, in);
    ASSERT_TRUE(compare_tensors(got[0], want[0], default_tolerance(DType::F32)).ok)
        << "v=" << v << " t=" << t;
    in[1].set_from_double(t - 1, static_cast<double>(v));  // one past this call's table
    std::string error = testing::error_of([&] { m.run(in); });
    EXPECT_NE(error.find(fmt::format("index_add (node y), dim 0: index {} is out of range for a "
                                     "dim of size {}",
                                     v, v)),
              std::string::npos)
        << error;
  }
  EXPECT_EQ(m.size_stats().specialized, 0);
  EXPECT_LE(m.size_stats().generated, 2);  // (a guard of t >= 2 or v >= 2 may split one off)
}

// Decisions that follow the size are guards: a column reduction over at least 1024 rows is
// split into 64 chunks of ceil(n / 64) rows (the chunk length printed as an expression of
// ks0), over fewer it is not; each side gets a module, and later sizes run the one whose
// guard they pass.
TEST(DynamicShapesGuards, AColumnReductionSplitsOnOneSideOfItsGuard) {
  Graph g = graph_from_text("input x: f32[n, 40]\ny = sum(x) {axes=[0]}\noutput y\n");
  CompiledModel m = compile(g);
  ASSERT_TRUE(matches_at(m, g, {{"n", 4097}}));
  EXPECT_NE(m.report().source.find("ks0 rows in 64 chunks of ((ks0 + 63) / 64)"), std::string::npos)
      << m.report().source;
  for (int64_t n : {1024, 1025, 5000, 100000}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_EQ(m.size_stats().generated, 1);
  ASSERT_TRUE(matches_at(m, g, {{"n", 1023}}));  // the other side: a module without chunks
  EXPECT_EQ(m.report().source.find("chunks"), std::string::npos);
  for (int64_t n : {2, 17, 700}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_EQ(m.size_stats().generated, 2);
  EXPECT_EQ(m.size_stats().guarded, 2);
}

// COIL_SIZE_GUARDS=off: the source is the guard (each new size runs the front half and reuses
// a module that prints the same source), as before explicit guards. Still right.
TEST(DynamicShapesGuards, OffRunsTheFrontHalfPerSize) {
  ASSERT_EQ(setenv("COIL_SIZE_GUARDS", "off", 1), 0);
  Graph g = graph_from_text("input x: f32[n, 40]\ny = softmax(x) {axis=0}\noutput y\n");
  CompiledModel m = compile(g);
  for (int64_t n : {4097, 5000, 7}) EXPECT_TRUE(matches_at(m, g, {{"n", n}}));
  EXPECT_EQ(m.size_stats().generated, 3);
  EXPECT_EQ(m.size_stats().guarded, 0);
  EXPECT_EQ(m.size_stats().specialized, 0);
  ASSERT_EQ(setenv("COIL_SIZE_GUARDS", "sometimes", 1), 0);
  CompiledModel bad = compile(g);
  std::vector<Tensor> in = inputs_at(g, {{"n", 3}}, 1);
  try {
    bad.run(in);
    ADD_FAILURE() << "COIL_SIZE_GUARDS=sometimes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("COIL_SIZE_GUARDS='sometimes': expected on or off"),
              std::string::npos)
        << e.what();
  }
  unsetenv("COIL_SIZE_GUARDS");
}

// kDecodeStep: every length from 2 on is one module, run with no code generated after the
// first.
TEST(DynamicShapesGuards, ANewLengthGeneratesNothing) {
  Graph g = graph_from_text(kDecodeStep);
  CompiledModel m = compile(g);
  // 4x the default tolerance: inputs in [-2, 2] give scores up to ~50, and y = o + x cancels
  // (|y| ~ 0.04 where |o| ~ 1), so f32 rounding of the attention (about 2e-5 absolute on either
  // CPU path, blocked or decode, against the double reference) shows as 7e-4 of y at n = 226.
  for (int64_t n = 2; n <= 300; n += 7) ASSERT_TRUE(matches_at(m, g, {{"n", n}}, 4));
  EXPECT_EQ(m.size_stats().generated, 1);
  EXPECT_EQ(m.size_stats().modules, 1);
  ASSERT_TRUE(matches_at(m, g, {{"n", 1}}));  // 0/1: a module of its own
  EXPECT_EQ(m.size_stats().generated, 2);
  EXPECT_EQ(m.size_stats().specialized, 0);
}

TEST(DynamicShapes, ErrorsNameTheInputAndDim) {
  Graph g = graph_from_text("input x: f32[n, 8]\ninput y: f32[n, 8]\nz = add(x, y)\noutput z\n");
  CompiledModel m = compile(g);
  auto error = [&](std::vector<Tensor> in) {
    try {
      m.run(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({Tensor::zeros(DType::F32, {3, 8}), Tensor::zeros(DType::F32, {4, 8})}),
            "input y: expected shape [n, 8], got [4, 8] (dim 0 is 'n' = 3 here)");
  EXPECT_EQ(error({Tensor::zeros(DType::F32, {3, 9}), Tensor::zeros(DType::F32, {3, 9})}),
            "input x: expected shape [n, 8], got [3, 9] (dim 1 must be 8)");
  EXPECT_EQ(error({Tensor::zeros(DType::F32, {3, 8})}), "the model takes 2 inputs, got 1");
}

// COIL_DEBUG_DIR (CompileOptions::debug_dir) covers a size-generic model's modules: each
// gets a folder named by the sizes it was generated at (variant.txt), with its passes, its
// module (whose kernels take the size as an argument) and its guards. A size that passes an
// earlier module's guards generates nothing, so it writes no folder.
TEST(DynamicShapesDebugDir, EachModuleWritesItsFolder) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("coil-dyn-debug-{}", ::getpid());
  fs::remove_all(dir);
  Graph g = graph_from_text("input x: f32[n, 8]\na = exp(x)\nb = mul(a, x)\noutput b\n");
  CompileOptions o;
  o.debug_dir = dir;
  CompiledModel m = compile(g, o);
  ASSERT_TRUE(m.size_generic());
  for (int64_t n : {1, 5, 9}) ASSERT_TRUE(matches_at(m, g, {{"n", n}}));
  std::map<std::string, std::pair<std::string, std::string>>
      modules;  // variant.txt -> code, guards
  for (const auto& e : fs::directory_iterator(dir)) {
    auto read = [&](const char* file) {
      std::ifstream f(e.path() / file);
      return std::string((std::istreambuf_iterator<char>(f)), {});
    };
    EXPECT_TRUE(fs::exists(e.path() / "report.json")) << e.path();
    EXPECT_TRUE(fs::exists(e.path() / "03-lower.ir")) << e.path();
    modules[read("variant.txt")] = {read("module.cpp"), read("guards.txt")};
  }
  ASSERT_EQ(modules.size(), 2u);
  ASSERT_EQ(modules.count("n=1 (a size-generic model's module)\n"), 1u);
  ASSERT_EQ(modules.count("n=97 (a size-generic model's module)\n"), 1u);
  EXPECT_EQ(modules["n=1 (a size-generic model's module)\n"].first.find("ks0"), std::string::npos);
  EXPECT_EQ(modules["n=1 (a size-generic model's module)\n"].second, "ks0 == 1\n");
  EXPECT_NE(modules["n=97 (a size-generic model's module)\n"].first.find("ks0"), std::string::npos);
  EXPECT_EQ(modules["n=97 (a size-generic model's module)\n"].second.rfind("ks0 >= 2", 0), 0u);
  EXPECT_EQ(m.size_stats().generated, 2);
  fs::remove_all(dir);
}

// A decode step is a new size every call: the variants that a guarded module re-plans per size
// are kept for the most recent sizes only (DynamicModel::set_kept_variants). A dropped size
// that comes back is planned again (nothing compiled), and threads running sizes while others
// are dropped keep theirs until their call ends.
TEST(DynamicShapesGuards, OnlyTheRecentSizesAreKept) {
  const Graph g = graph_from_text(
      "input x: f32[n, 33]\ninput w: f32[33]\ny = mul(x, w)\ns = sum(y) {axes=[1]}\n"
      "output s\n");
  DynamicModel m(g, CompileOptions{}, {"n"});
  m.set_kept_variants(4);
  auto matches = [&](int64_t n) {
    std::vector<Tensor> in = inputs_at(g, {{"n", n}}, static_cast<uint64_t>(n));
    std::vector<TensorRef> refs;
    for (const Tensor& t : in) refs.push_back(t.ref());
    std::vector<Tensor> got = m.run(refs);
    return compare_tensors(got[0], interpret(g, in)[0], default_tolerance(DType::F32)).ok;
  };
  for (int64_t n = 2; n < 40; ++n) ASSERT_TRUE(matches(n)) << n;
  // The 4 most recent sizes and the module's first variant (it owns the packed constants).
  EXPECT_EQ(m.num_variants(), 5u);
  for (int64_t n = 2; n < 10; ++n) ASSERT_TRUE(matches(n)) << "again " << n;
  EXPECT_EQ(m.num_variants(), 5u);
  EXPECT_EQ(m.stats().guarded, 1);
  EXPECT_EQ(m.stats().generated, 1);  // one front half for all 46 calls
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i)
        if (!matches(2 + (i * 7 + t * 13) % 60)) ++wrong;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(m.num_variants(), 5u);
}

}  // namespace
}  // namespace coil

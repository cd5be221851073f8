// Vectorized kernels (CppVecKernel) at every ISA the machine runs, against the reference:
// every tail length 0..2*lanes+1 of pointwise loops, horizontal and vertical reductions and
// fused rows, in f32 and bf16, plus strided and transposed accesses (gathers).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/isa.h"
#include "support/check_graph.h"
#include "support/slow_tests.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using testing::runnable_isas;

/// One graph with an input per length 0..33 (covers 0..2x16+1 lanes), each through a
/// pointwise chain, a whole-tensor sum, a row softmax over [3, n] and a column sum of [n, 3].
std::string tails_graph(const char* dtype) {
  std::string t;
  for (int n = 0; n <= 33; ++n) {
    t += fmt::format("input a{0}: {1}[{0}]\ninput b{0}: {1}[3, {0}]\ninput c{0}: {1}[{0}, 3]\n", n,
                     dtype);
    t += fmt::format("p{0} = gelu(a{0})\ns{0} = sum(a{0})\nm{0} = softmax(b{0})\n", n);
    t += fmt::format("output p{0}\noutput s{0}\noutput m{0}\n", n);
    if (n > 0) {  // max over an empty dim has no identity
      t += fmt::format(
          "k{0} = max(c{0}) {{axes=[0]}}\nq{0} = sum(c{0}) {{axes=[1]}}\noutput k{0}\noutput "
          "q{0}\n",
          n);
    }
  }
  return t;
}

// The default tier runs bf16 on the widest ISA only (COIL_SLOW_TESTS=1: on every one).
TEST(Simd, EveryTailLengthAtEveryIsa) {
  const std::vector<std::string> isas = runnable_isas();
  for (const std::string& isa : isas) {
    for (const char* dtype : {"f32", "bf16"}) {
      if (std::string(dtype) == "bf16" && isa != isas.front() && !testing::slow_tests_enabled())
        continue;
      SCOPED_TRACE(isa + " " + dtype);
      std::string text = tails_graph(dtype);
      Graph g = graph_from_text(text);
      CompileOptions o;
      o.isa = isa;
      EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 3), o));
    }
  }
}

TEST(Simd, GeneratedCodeIsVectorizedOnlyWithSimd) {
  Graph g = graph_from_text("input x: f32[1003]\ny = exp(x)\noutput y\n");
  CompileOptions o;
  o.isa = "avx512";
  if (!cpu_supports(isa_by_name("avx512"))) GTEST_SKIP() << "no AVX-512 here";
  CompiledModel m = compile(g, o);
  EXPECT_NE(m.report().source.find("coil::Vec<float>::loadu"), std::string::npos);
  // 1003 = 62 whole vectors and a masked tail of 11 lanes: one step, called for both.
  EXPECT_NE(m.report().source.find("step(x0, 16);"), std::string::npos) << m.report().source;
  EXPECT_NE(m.report().source.find("step(992, 11);"), std::string::npos) << m.report().source;
  o.isa = "scalar";
  CompiledModel s = compile(g, o);
  EXPECT_EQ(s.report().source.find("coil::Vec<float>"), std::string::npos);
}

TEST(Simd, StridedTransposedAndBroadcastAccesses) {
  for (const std::string& isa : runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    Graph g = graph_from_text(R"(
input x: f32[67, 45]
input y: f32[45, 67]
input w: f32[45]
t = transpose(y)
z = add(x, t)
s = slice(x) {dim=1, start=1, step=3}
u = mul(s, s)
v = mul(x, w)
c = sum(x) {axes=[0]}
r = sum(t) {axes=[1]}
output z
output u
output v
output c
output r
)");
    EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 9), o));
  }
}

// CppTile2DKernel: x.t() + y with both dims off the tile size (17 = one tile and a 1-row tail,
// 1000 = 62 tiles and an 8-wide tail at 16 lanes), exact multiples, and matrices of 64K
// elements and more, whose tiles are visited in 128x64 (rows x cols) blocks at these sizes
// (1000x300: seven row blocks and a partial one ending in a partial tile, four column blocks
// and a partial one ending in a partial tile); 4096x4096 uses 512x64 blocks (golden
// transpose_add_large);
// SIMD ISAs transpose each tile in registers (coil::transpose_tile), masked in the tails.
// The default tier runs half of the ISA x shape grid, every ISA and every shape in it
// (tests/support/slow_tests.h); COIL_SLOW_TESTS=1 the whole grid.
TEST(Simd, TransposedTilesAtEveryTail) {
  const std::vector<std::string> isas = runnable_isas();
  const std::pair<int, int> shapes[] = {{17, 1000}, {1000, 17}, {64, 48},
                                        {300, 200}, {256, 384}, {1000, 300}};
  for (size_t i = 0; i < isas.size(); ++i) {
    const std::string& isa = isas[i];
    for (size_t j = 0; j < std::size(shapes); ++j) {
      if (!testing::in_default_tier(i + j, 2)) continue;
      const auto [m, n] = shapes[j];
      SCOPED_TRACE(fmt::format("{} {}x{}", isa, m, n));
      CompileOptions o;
      o.isa = isa;
      Graph g = graph_from_text(fmt::format(
          "input x: f32[{1}, {0}]\ninput y: f32[{0}, {1}]\nt = transpose(x)\nz = add(t, y)\n"
          "output z\n",
          m, n));
      CompiledModel c = compile(g, o);
      if (isa != "scalar") {
        EXPECT_NE(c.report().source.find("coil::transpose_tile("), std::string::npos)
            << c.report().source;
        // Few blocks: 128-row blocks, so that 16 threads still get work.
        EXPECT_EQ(c.report().source.find("in blocks of 128x64") != std::string::npos,
                  m * n >= 64 * 1024)
            << c.report().source;
      }
      EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 5), o));
    }
  }
}

// Outputs of 16 MiB and more are written with non-temporal stores (store_stream): 4096x1025
// rows start at every alignment, so each row peels a masked head up to the vector alignment
// (coil::stream_head) before its whole vectors; a softmax's per-row output stores too; a
// smaller output keeps plain stores.
TEST(Simd, LargeOutputsStreamPastTheCaches) {
  for (const std::string& isa : runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    Graph g = graph_from_text(R"(
input x: f32[4096, 1025]
input w: f32[1025]
t = mul(x, w)
y = relu(t)
s = softmax(x) {axis=-1}
output y
output s
)");
    CompiledModel m = compile(g, o);
    const std::string& src = m.report().source;
    if (isa != "scalar") {
      EXPECT_NE(src.find(".store_stream(&out_ptr"), std::string::npos) << src;
      EXPECT_NE(src.find("coil::stream_fence();"), std::string::npos) << src;
      EXPECT_NE(src.find("coil::stream_head(&out_ptr"), std::string::npos) << src;
    }
    EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 3), o));
    Graph small = graph_from_text("input x: f32[1000, 1000]\ny = relu(x)\noutput y\n");
    EXPECT_EQ(compile(small, o).report().source.find("store_stream"), std::string::npos);
  }
}

// A pass that re-reads its row to compute on it (softmax's exp pass) prefetches the row 8 KiB
// ahead (kPrefetchAheadBytes; at least the next one): 2 rows of 1000 floats, 4 of 1000 bf16.
// The last rows prefetch past the tensor, which must stay harmless. Light passes (layer_norm's)
// and rows over 16 KiB do not prefetch.
TEST(Simd, ComputingRowPassesPrefetchTheNextRows) {
  for (const std::string& isa : runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    Graph g = graph_from_text(R"(
input x: f32[37, 1000]
input h: bf16[5, 1000]
s = softmax(x) {axis=-1}
l = log_softmax(h) {axis=-1}
output s
output l
)");
    const std::string src = compile(g, o).report().source;
    if (isa == "scalar") {
      EXPECT_EQ(src.find("prefetch_ahead"), std::string::npos) << src;
    } else {
      EXPECT_NE(src.find("coil::prefetch_ahead(&in_ptr0[r0 + 1000*x0], 2000);"), std::string::npos)
          << src;
      EXPECT_NE(src.find("], 4000);"), std::string::npos) << src;  // the bf16 rows
    }
    EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 7), o));
    Graph light = graph_from_text(R"(
input x: f32[37, 1000]
input w: f32[1000]
input b: f32[1000]
n = layer_norm(x, w, b) {dims=1, eps=1e-5}
output n
)");
    EXPECT_EQ(compile(light, o).report().source.find("prefetch_ahead"), std::string::npos);
    Graph wide = graph_from_text("input x: f32[4, 8192]\ny = softmax(x) {axis=-1}\noutput y\n");
    EXPECT_EQ(compile(wide, o).report().source.find("prefetch_ahead"), std::string::npos);
  }
}

TEST(Simd, LowPrecisionPointwiseAndReductions) {
  for (const std::string& isa : runnable_isas()) {
    for (const char* dtype : {"bf16", "f16"}) {
      SCOPED_TRACE(isa + " " + dtype);
      CompileOptions o;
      o.isa = isa;
      Graph g = graph_from_text(fmt::format(R"(
input x: {0}[64, 100]
input w: {0}[100]
input b: {0}[100]
t0 = mul(x, w)
t1 = add(t0, b)
y = gelu(t1)
n = layer_norm(x, w, b)
s = sum(x) {{axes=[1]}}
output y
output n
output s
)",
                                            dtype));
      EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 4), o, 2.0));
    }
  }
}

// A small bf16/f16 operand that every row reads is widened to f32 once per call (a stack copy
// the loops read): a row vector with a tail (1000 = 62 x 16 + 8), one shorter than a vector,
// a column that each row broadcasts, the 4096-element limit; not for operands read fewer than 8
// times per element, over 4096 elements, or past the 8192-element total. Results against the
// reference interpreter everywhere.
TEST(Simd, SmallLowPrecisionOperandsAreWidenedOnce) {
  for (const std::string& isa : runnable_isas()) {
    for (const char* dtype : {"bf16", "f16"}) {
      SCOPED_TRACE(isa + " " + dtype);
      CompileOptions o;
      o.isa = isa;
      Graph g = graph_from_text(fmt::format(R"(
input x: {0}[37, 1000]
input w: {0}[1000]
input v: {0}[3]
input u: {0}[29, 3]
input c: {0}[37, 1]
t0 = mul(x, w)
t1 = add(t0, c)
y = gelu(t1)
z = mul(u, v)
output y
output z
)",
                                            dtype));
      const std::string src = compile(g, o).report().source;
      if (isa == "scalar") {
        EXPECT_EQ(src.find("coil::widen"), std::string::npos) << src;
      } else {
        for (const char* widened :
             {"float in_ptr1_f32[1000];", "float in_ptr2_f32[37];", "float in_ptr1_f32[3];"})
          EXPECT_NE(src.find(widened), std::string::npos) << widened << "\n" << src;
      }
      EXPECT_TRUE(matches_reference(g, testing::random_inputs(g, 11), o, 2.0));

      Graph limits = graph_from_text(fmt::format(R"(
input x: {0}[64, 4096]
input a: {0}[4096]
input b: {0}[4096]
input c: {0}[4096]
input r: {0}[4, 1000]
input s: {0}[1000]
input big: {0}[16, 4097]
input bw: {0}[4097]
t0 = mul(x, a)
t1 = add(t0, b)
y = mul(t1, c)
z = add(r, s)
q = mul(big, bw)
output y
output z
output q
)",
                                                 dtype));
      const std::string lsrc = compile(limits, o).report().source;
      if (isa != "scalar") {
        // a and b fill the 8192-element budget; c, s (4 reads per element) and bw (4097) stay.
        EXPECT_NE(lsrc.find("float in_ptr1_f32[4096];"), std::string::npos) << lsrc;
        EXPECT_NE(lsrc.find("float in_ptr2_f32[4096];"), std::string::npos) << lsrc;
        EXPECT_EQ(lsrc.find("in_ptr3_f32"), std::string::npos) << lsrc;
        EXPECT_EQ(lsrc.find("[1000];"), std::string::npos) << lsrc;
        EXPECT_EQ(lsrc.find("[4097];"), std::string::npos) << lsrc;
      }
      EXPECT_TRUE(matches_reference(limits, testing::random_inputs(limits, 12), o, 2.0));
    }
  }
}

}  // namespace
}  // namespace coil

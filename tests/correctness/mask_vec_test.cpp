// Mask ops in vector nests (cpp_plan_nest.cpp's mask_vector_op, cpp_vec_ops.h's emit_mask_op):
// bool loads and stores, comparisons, logical ops, isnan, `where` on a vector mask and the
// f32 <-> bool conversions print as Vec<float> masks, so a masked softmax (a GPT block's
// `where(causal, x, -inf)` before softmax, written out) vectorizes along its rows instead of
// running as scalar loops. Every case runs at every ISA the machine has (AVX-512, AVX2,
// scalar) at every tail length 1..33 with NaNs among the values, against the reference
// interpreter; the vector builds must also be the scalar build bit for bit (all but the
// softmax, whose exp and summation order differ between vector and scalar code).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/isa.h"
#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::runnable_isas;

/// Per length n: a masked softmax over rows of n (the mask broadcast over the batch), a
/// masked max and sum, comparisons and logical ops stored as bools, selects of f32 and of
/// bools, conversions both ways.
std::string masks_graph(int n) {
  return fmt::format(
      R"(input x{0}: f32[2, 3, {0}]
input y{0}: f32[2, 3, {0}]
input m{0}: bool[3, {0}]
ninf{0} = full() {{shape=[1], value=-inf, dtype=f32}}
keep{0} = logical_not(m{0})
sc{0} = mul(x{0}, y{0})
masked{0} = where(keep{0}, sc{0}, ninf{0})
soft{0} = softmax(masked{0}) {{axis=2}}
mx{0} = max(masked{0}) {{axes=[2]}}
gt{0} = gt(x{0}, y{0})
le{0} = le(x{0}, y{0})
both{0} = logical_and(gt{0}, m{0})
either{0} = logical_or(le{0}, keep{0})
same{0} = eq(both{0}, either{0})
nan{0} = isnan(sc{0})
pick{0} = where(same{0}, nan{0}, gt{0})
asf{0} = cast(pick{0}) {{dtype=f32}}
nz{0} = cast(x{0}) {{dtype=bool}}
cnt{0} = sum(asf{0}) {{axes=[2]}}
eqf{0} = eq(x{0}, y{0})
ne{0} = ne(x{0}, sc{0})
output soft{0}
output mx{0}
output pick{0}
output cnt{0}
output nz{0}
output eqf{0}
output ne{0}
)",
      n);
}

/// Random values with NaNs, zeros (-0 too) and equal pairs sprinkled in; random masks.
std::vector<Tensor> inputs_for(const Graph& g, uint64_t seed) {
  std::vector<Tensor> in = testing::random_inputs(g, seed);
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype() != DType::F32) continue;
    float* p = in[i].data_as<float>();
    for (int64_t k = 0; k < in[i].numel(); ++k) {
      if (k % 7 == 3) p[k] = std::nanf("");
      if (k % 11 == 5) p[k] = (k % 2) ? 0.0f : -0.0f;
      if (k % 13 == 1) p[k] = 1.0f;  // x == y == 1 at the same places
    }
  }
  return in;
}

TEST(MaskVec, EveryTailLengthAtEveryIsaMatchesTheReferenceAndTheScalarBuild) {
  std::string text;
  for (int n = 1; n <= 33; ++n) text += masks_graph(n);
  Graph g = graph_from_text(text);
  std::vector<Tensor> in = inputs_for(g, 5);
  CompileOptions scalar;
  scalar.isa = "scalar";
  std::vector<Tensor> want = compile(g, scalar).run(in);
  for (const std::string& isa : runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    EXPECT_TRUE(testing::matches_reference(g, in, o));
    CompiledModel m = compile(g, o);
    if (isa != "scalar") {
      // Rows of 20 are vector nests, masked ones included (before, every nest that held a
      // mask op was scalar loops).
      const std::string& src = m.report().source;
      int nests = 0;
      for (size_t at = src.find("// nest "); at != std::string::npos;
           at = src.find("// nest ", at + 1)) {
        const std::string line = src.substr(at, src.find('\n', at) - at);
        if (line.find("20 (") == std::string::npos && line.find("20__") == std::string::npos)
          continue;
        ++nests;
        EXPECT_NE(line.find("(vector"), std::string::npos) << line;
      }
      EXPECT_GE(nests, 4);
      EXPECT_NE(src.find("coil::Vec<float>::blendv("), std::string::npos);
    }
    std::vector<Tensor> got = m.run(in);
    for (size_t i = 0; i < got.size(); ++i) {
      // Softmax's exp and sum order differ between vector and scalar code; the rest is exact.
      if (g.outputs()[i].name.rfind("soft", 0) == 0) continue;
      const size_t bytes = static_cast<size_t>(got[i].numel() * dtype_size(got[i].dtype()));
      ASSERT_EQ(got[i].numel(), want[i].numel());
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), bytes), 0)
          << "output " << g.outputs()[i].name << " differs from the scalar build's bits";
    }
  }
}

TEST(MaskVec, MaskedSoftmaxRowsAreVectorNests) {
  Graph g = graph_from_text(R"(
input x: bf16[12, 256, 256]
input m: bool[256, 256]
ninf = full() {shape=[1], value=-inf, dtype=bf16}
s = mul(x, x)
w = where(m, s, ninf)
p = softmax(w) {axis=2}
output p
)");
  CompileOptions o;
  o.isa = "avx512";
  const std::string src = compile(g, o).report().source;
  EXPECT_EQ(src.find("(scalar)"), std::string::npos) << src;
  EXPECT_NE(src.find("max over r0 (vector"), std::string::npos) << src;
  EXPECT_NE(src.find("coil::Vec<float>::blendv("), std::string::npos) << src;
  if (cpu_supports(isa_by_name("avx512")))
    EXPECT_TRUE(testing::matches_reference(g, testing::random_inputs(g, 9), o));
}

TEST(MaskVec, AMatmulEpilogueWithAMaskIsAVectorLoop) {
  // A relu's backward after a product (`where(x > 0 or isnan(x), a @ b, 0)`): the template's
  // epilogue was printed as scalar loops over each tile row when it held a mask op.
  Graph g = graph_from_text(R"(
input a: f32[67, 64]
input b: f32[64, 300]
input x: f32[67, 300]
m = matmul(a, b)
z = full() {shape=[1], value=0.0, dtype=f32}
c = gt(x, z)
n = isnan(x)
k = logical_or(c, n)
y = where(k, m, z)
output y
)");
  std::vector<Tensor> in = inputs_for(g, 3);
  for (const std::string& isa : runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions o;
    o.isa = isa;
    o.autotune = false;  // the template everywhere
    CompiledModel m = compile(g, o);
    const std::string& src = m.report().source;
    EXPECT_NE(src.find("template matmul"), std::string::npos) << src;
    if (isa != "scalar") EXPECT_NE(src.find("coil::Vec<float>::blendv("), std::string::npos) << src;
    EXPECT_TRUE(testing::matches_reference(g, in, o));
  }
}

}  // namespace
}  // namespace coil

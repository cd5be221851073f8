// gather with dynamic indices (an indirect load in the loop IR) against the reference
// interpreter: axes, index ranks and dtypes, negative indices, bf16 data, fused consumers and
// an embedding lookup; plus the bounds check of indices in compiled code.
#include <gtest/gtest.h>

#include <string>

#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using testing::random_inputs;

/// Random inputs, with every integer input holding indices in [-n, n) (negatives wrap).
std::vector<Tensor> inputs_with_indices(const Graph& g, int64_t n, uint64_t seed = 1) {
  std::vector<Tensor> in = random_inputs(g, seed);
  uint64_t state = seed * 2654435761u + 17;
  for (Tensor& t : in) {
    if (is_floating(t.dtype())) continue;
    for (int64_t i = 0; i < t.numel(); ++i) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      t.set_from_double(i, static_cast<double>(static_cast<int64_t>((state >> 33) % (2 * n)) - n));
    }
  }
  return in;
}

::testing::AssertionResult gather_matches(const std::string& text, int64_t n) {
  Graph g = graph_from_text(text);
  return matches_reference(g, inputs_with_indices(g, n));
}

TEST(Gather, Axis0OneDimIndices) {
  EXPECT_TRUE(gather_matches(R"(
input x: f32[7, 5]
input i: i64[4]
y = gather(x, i)
output y
)",
                             7));
}

TEST(Gather, Axis1TwoDimIndicesI32) {
  EXPECT_TRUE(gather_matches(R"(
input x: f32[3, 6, 5]
input i: i32[2, 3]
y = gather(x, i) {axis=1}
output y
)",
                             6));
}

TEST(Gather, LastAxisNegative) {
  EXPECT_TRUE(gather_matches(R"(
input x: f32[4, 9]
input i: i64[3, 2]
y = gather(x, i) {axis=-1}
output y
)",
                             9));
}

TEST(Gather, Bf16Data) {
  EXPECT_TRUE(gather_matches(R"(
input x: bf16[10, 16]
input i: i32[5]
y = gather(x, i)
output y
)",
                             10));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  EXPECT_TRUE(gather_matches(R"(
input x: f32[4, 3]
input i: i64[]
y = gather(x, i) {axis=1}
output y
)",
                             3));
}

TEST(Gather, FusedWithPointwiseOps) {
  // The data is computed (realized before the gather), the result feeds fused pointwise ops.
  EXPECT_TRUE(gather_matches(R"(
input x: f32[8, 32]
input b: f32[32]
input i: i64[6]
e = exp(x)
y = gather(e, i)
z = add(y, b)
r = relu(z)
output r
)",
                             8));
}

TEST(Gather, EmbeddingLookup) {
  EXPECT_TRUE(gather_matches(R"(
input table: f32[1000, 64]
input ids: i64[4, 17]
y = gather(table, ids)
s = mul(y, y)
output y
output s
)",
                             1000));
}

// torch raises on an out-of-range index and so does the reference interpreter: compiled code
// checks every indirect index too (Inductor's bounds asserts) and the run raises a coil::Error
// naming the gather, its node, the index and the size; it never reads out of bounds.
TEST(Gather, OutOfRangeIndexIsAnErrorNamingTheNodeAndIndex) {
  Graph g = graph_from_text(R"(
input x: f32[3, 2]
input i: i64[4]
y = gather(x, i)
z = neg(y)
output z
)");
  std::vector<Tensor> in = random_inputs(g);
  CompiledModel m = compile(g);
  for (double bad : {3.0, -4.0, 1e6}) {
    const double idx[] = {1, -1, bad, 0};
    for (int64_t k = 0; k < 4; ++k) in[1].set_from_double(k, idx[k]);
    std::string compiled = testing::error_of([&] { m.run(in); });
    std::string reference = testing::error_of([&] { interpret(g, in); });
    EXPECT_NE(compiled.find("gather (node y), dim 0: index " + fmt::format("{}", bad) +
                            " is out of range for a dim of size 3"),
              std::string::npos)
        << compiled;
    EXPECT_NE(reference.find("out of range"), std::string::npos) << reference;
  }
  // The error is per run: in-range indices afterwards run normally.
  const double ok[] = {2, -3, 0, 1};
  for (int64_t k = 0; k < 4; ++k) in[1].set_from_double(k, ok[k]);
  EXPECT_TRUE(matches_reference(g, in));
  EXPECT_NO_THROW(m.run(in));
}

TEST(Gather, CompiledCodeChecksOnBothDevices) {
  Graph g = graph_from_text(R"(
input x: f32[50, 64]
input i: i32[4, 17]
y = gather(x, i)
output y
)");
  CompileOptions cpu;
  std::string source = compile(g, cpu).report().source;
  EXPECT_NE(source.find("coil::checked_index("), std::string::npos) << source;
  EXPECT_NE(source.find("coil_graph_run_error"), std::string::npos) << source;
  // Triton: the index wrapped, recorded in index_check where out of range, clamped; the
  // wrapper raises it with the run check's words (python/tests/test_gather_emulated.py runs
  // such a module).
  CompileOptions cuda;
  cuda.device = "cuda";
  std::string py = generate_gpu_module(g, cuda).source;
  for (const char* part :
       {"tl.where(tmp0 < 0, tmp0 + 50, tmp0)", "tl.store(index_check + ",
        "tl.minimum(tl.maximum(tmp1, 0), 49)", "index_check = runtime.index_check(arg0_1)",
        "runtime.check_indices(index_check, {0: ('gather (node y), dim 0', 50)})"})
    EXPECT_NE(py.find(part), std::string::npos) << part << "\n" << py;
}

}  // namespace
}  // namespace coil

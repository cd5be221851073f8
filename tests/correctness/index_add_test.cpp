// index_add (torch.index_add; what an embedding's gradient becomes) against the reference
// interpreter: axes, index dtypes, duplicates and negative indices, dtypes, an empty index,
// x computed or a fill, rows long enough for the parallel path; the order of the sums (each
// element adds its rows in index order, the same at any thread count); the bounds check; and
// the CUDA wrapper's library call.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "coil/runtime.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using testing::random_inputs;

/// Random inputs; the input named by `index` holds indices in [-n, n) (negatives wrap), with
/// duplicates whenever it is longer than 2n.
std::vector<Tensor> inputs_with_index(const Graph& g, size_t index, int64_t n, uint64_t seed = 1) {
  std::vector<Tensor> in = random_inputs(g, seed);
  uint64_t state = seed * 2654435761u + 17;
  Tensor& t = in[index];
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    t.set_from_double(i, static_cast<double>(static_cast<int64_t>((state >> 33) % (2 * n)) - n));
  }
  return in;
}

/// The graph's second input is the index into a dim of size n.
::testing::AssertionResult index_add_matches(const std::string& text, int64_t n) {
  Graph g = graph_from_text(text);
  return matches_reference(g, inputs_with_index(g, 1, n));
}

TEST(IndexAdd, Axis0FromAnInput) {
  EXPECT_TRUE(index_add_matches(R"(
input x: f32[7, 5]
input i: i64[12]
input s: f32[12, 5]
y = index_add(x, i, s)
output y
)",
                                7));
}

TEST(IndexAdd, MiddleAxisI32Index) {
  EXPECT_TRUE(index_add_matches(R"(
input x: f32[3, 6, 5]
input i: i32[9]
input s: f32[3, 9, 5]
y = index_add(x, i, s) {axis=1}
output y
)",
                                6));
}

TEST(IndexAdd, LastAxisNegativeAxis) {
  EXPECT_TRUE(index_add_matches(R"(
input x: f32[4, 9]
input i: i64[3]
input s: f32[4, 3]
y = index_add(x, i, s) {axis=-1}
output y
)",
                                9));
}

TEST(IndexAdd, IntegerAndF64AndBf16) {
  for (const char* dt : {"i64", "i32", "f64", "bf16"}) {
    EXPECT_TRUE(index_add_matches(fmt::format(R"(
input x: {0}[5, 3]
input i: i64[8]
input s: {0}[8, 3]
y = index_add(x, i, s)
output y
)",
                                              dt),
                                  5))
        << dt;
  }
}

TEST(IndexAdd, EmptyIndexAndOneRow) {
  EXPECT_TRUE(index_add_matches(R"(
input x: f32[4, 3]
input i: i64[0]
input s: f32[0, 3]
y = index_add(x, i, s)
output y
)",
                                4));
  EXPECT_TRUE(index_add_matches(R"(
input x: f32[1, 33]
input i: i64[6]
input s: f32[6, 33]
y = index_add(x, i, s)
output y
)",
                                1));
}

// An embedding's gradient: zeros (not stored: the kernel fills), a computed src, a consumer;
// 1000 rows of 513 take the parallel path (each thread its range of rows).
TEST(IndexAdd, EmbeddingGradientFromZerosWithComputedSrcAndConsumer) {
  const std::string text = R"(
input g: f32[4, 75, 513]
input ids: i64[300]
z = full() {shape=[1000, 513], value=0.0, dtype=f32}
g2 = reshape(g) {shape=[300, 513]}
t = tanh(g2)
y = index_add(z, ids, t)
w = mul(y, y)
output y
output w
)";
  Graph g = graph_from_text(text);
  EXPECT_TRUE(matches_reference(g, inputs_with_index(g, 1, 1000)));
  const std::string source = compile(g).report().source;
  EXPECT_NE(source.find("static_cast<float>(0.0)"), std::string::npos) << source;
  EXPECT_NE(source.find("#pragma omp parallel if"), std::string::npos) << source;
}

// Each element sums its rows in index order: a result equal, bit for bit, to f32 adds in that
// order, at 1, 2 and 3 threads (torch's CPU kernel adds in the same order).
TEST(IndexAdd, SumsInIndexOrderAtAnyThreadCount) {
  Graph g = graph_from_text(R"(
input x: f32[3, 4000]
input i: i64[500]
input s: f32[500, 4000]
y = index_add(x, i, s)
output y
)");
  std::vector<Tensor> in = inputs_with_index(g, 1, 3, 7);
  for (int64_t k = 0; k < in[1].numel(); ++k)  // no negatives: the order is what is tested
    if (in[1].item_as_double(k) < 0) in[1].set_from_double(k, in[1].item_as_double(k) + 3);
  for (int64_t e = 0; e < in[2].numel(); ++e)  // magnitudes that make the order matter
    in[2].set_from_double(e, in[2].item_as_double(e) * (e % 7 == 0 ? 1e6 : 1.0));
  std::vector<float> want(3 * 4000);
  for (int64_t e = 0; e < 3 * 4000; ++e) want[e] = static_cast<float>(in[0].item_as_double(e));
  for (int64_t j = 0; j < 500; ++j) {
    const auto row = static_cast<int64_t>(in[1].item_as_double(j));
    for (int64_t c = 0; c < 4000; ++c)
      want[row * 4000 + c] += static_cast<float>(in[2].item_as_double(j * 4000 + c));
  }
  CompiledModel m = compile(g);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<Tensor> got = m.run(in);
    EXPECT_EQ(std::memcmp(got[0].data(), want.data(), want.size() * sizeof(float)), 0)
        << threads << " threads";
  }
  set_num_threads(0);
}

// torch raises on an index out of range, and so do the reference and compiled code: the run
// raises a coil::Error naming the op, its node, the index and the size (the slice is skipped:
// nothing is written out of bounds); the next run with good indices is normal.
TEST(IndexAdd, OutOfRangeIndexIsAnErrorNamingTheNodeAndIndex) {
  Graph g = graph_from_text(R"(
input x: f32[3, 2]
input i: i64[4]
input s: f32[4, 2]
y = index_add(x, i, s)
output y
)");
  std::vector<Tensor> in = random_inputs(g);
  CompiledModel m = compile(g);
  for (double bad : {3.0, -4.0, 1e6}) {
    const double idx[] = {1, -1, bad, 0};
    for (int64_t k = 0; k < 4; ++k) in[1].set_from_double(k, idx[k]);
    std::string compiled = testing::error_of([&] { m.run(in); });
    std::string reference = testing::error_of([&] { interpret(g, in); });
    EXPECT_NE(compiled.find("index_add (node y), dim 0: index " + fmt::format("{}", bad) +
                            " is out of range for a dim of size 3"),
              std::string::npos)
        << compiled;
    EXPECT_NE(reference.find("index_add: index " + fmt::format("{}", bad) + " is out of range"),
              std::string::npos)
        << reference;
  }
  const double ok[] = {2, -3, 0, 2};
  for (int64_t k = 0; k < 4; ++k) in[1].set_from_double(k, ok[k]);
  EXPECT_TRUE(matches_reference(g, in));
}

TEST(IndexAdd, BadOperandsAreErrorsNamingTheOp) {
  const char* cases[][2] = {
      {"input x: f32[3, 2]\ninput i: f32[4]\ninput s: f32[4, 2]\n", "index must be i32 or i64"},
      {"input x: f32[3, 2]\ninput i: i64[4, 1]\ninput s: f32[4, 2]\n", "index must be 1-D"},
      {"input x: f32[3, 2]\ninput i: i64[4]\ninput s: f32[5, 2]\n", "src dim 0 is 5, expected 4"},
      {"input x: f32[3, 2]\ninput i: i64[4]\ninput s: f64[4, 2]\n", "src is f64, x is f32"},
      {"input x: bool[3, 2]\ninput i: i64[4]\ninput s: bool[4, 2]\n", "x is bool"},
  };
  for (const auto& c : cases) {
    std::string err = testing::error_of(
        [&] { graph_from_text(std::string(c[0]) + "y = index_add(x, i, s)\noutput y\n"); });
    EXPECT_NE(err.find("index_add"), std::string::npos) << err;
    EXPECT_NE(err.find(c[1]), std::string::npos) << err;
  }
  std::string err = testing::error_of([&] {
    graph_from_text(
        "input x: f32[3, 2]\ninput i: i64[4]\ninput s: f32[4, 2]\n"
        "y = index_add(x, i, s) {dim=0}\noutput y\n");
  });
  EXPECT_NE(err.find("dim"), std::string::npos) << err;
}

// CUDA: torch.index_add in the wrapper (atomic adds), the index wrapped where negative and
// checked by runtime.wrap_rows; an x that is a fill is filled in place first.
TEST(IndexAdd, CudaWrapperCallsTorchIndexAdd) {
  CompileOptions cuda;
  cuda.device = "cuda";
  std::string py = generate_gpu_module(graph_from_text(R"(
input x: f32[7, 5]
input i: i64[12]
input s: f32[12, 5]
y = index_add(x, i, s)
output y
)"),
                                       cuda)
                       .source;
  EXPECT_NE(py.find("index0 = runtime.wrap_rows(arg1_1, 7, 'index_add (node y), dim 0')\n"
                    "    torch.index_add(arg0_1.view((1, 7, 5)), 1, index0, "
                    "arg2_1.view((1, 12, 5)), out="),
            std::string::npos)
      << py;
  py = generate_gpu_module(graph_from_text(R"(
input ids: i32[3, 4]
input g: f32[12, 8]
z = full() {shape=[100, 8], value=0.0, dtype=f32}
i = reshape(ids) {shape=[12]}
y = index_add(z, i, g)
output y
)"),
                           cuda)
           .source;
  EXPECT_NE(py.find(".fill_(0.0).index_add_(1, "), std::string::npos) << py;
}

}  // namespace
}  // namespace coil

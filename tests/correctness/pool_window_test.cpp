// Padded pooling windows on the CPU vectorize through the window split (cpp_plan_window.cpp:
// scalar borders, a vector interior whose masks and clamps are folded away) and through scalar
// mask ops in vector nests (vector_scalar_ops: a mask that depends only on an outer loop).
// Every case runs the AVX-512 (16 lanes), scalar and (some) AVX2 (8 lanes) builds of one graph
// of many pools on one input with NaNs in the borders and the interior: the vector builds must be
// bitwise the scalar one (the code before the split), and that must match the reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/isa.h"
#include "support/check_graph.h"
#include "support/slow_tests.h"

namespace coil {
namespace {

using testing::matches_reference;
using A = std::vector<int64_t>;

struct Window {
  int64_t kernel, stride, padding;
  bool ceil_mode;
};

/// Max pooling, avg pooling with and without the padding in the count: one output each per
/// window.
Graph pools_graph(const std::vector<int64_t>& shape, const std::vector<Window>& windows) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape(shape));
  int i = 0;
  for (const Window& w : windows) {
    // Windows whose output would be empty (kernel past the padded input) are skipped.
    const int64_t h = shape[shape.size() - 2], wd = shape.back();
    if (w.kernel > std::min(h, wd) + 2 * w.padding) continue;
    Attrs a{{"kernel", A{w.kernel, w.kernel}},
            {"stride", A{w.stride, w.stride}},
            {"padding", A{w.padding, w.padding}},
            {"ceil_mode", w.ceil_mode}};
    g.add_output(g.add_node("max_pool2d", {x}, a), fmt::format("max{}", i));
    for (bool include : {true, false}) {
      Attrs b = a;
      b.set("count_include_pad", include);
      g.add_output(g.add_node("avg_pool2d", {x}, b), fmt::format("avg{}_{}", i, include));
    }
    ++i;
  }
  return g;
}

/// Random values with NaNs at the first and last columns of some rows and inside.
Tensor input_with_nans(const std::vector<int64_t>& shape, uint64_t seed) {
  Tensor t = random_tensor(DType::F32, shape, seed, -3.0, 3.0);
  float* p = t.data_as<float>();
  const int64_t w = shape.back(), n = t.numel();
  for (int64_t row = 0; row * w < n; row += 5) {
    p[row * w] = std::nanf("");
    p[row * w + w - 1] = std::nanf("");
    p[row * w + (row * 7) % w] = std::nanf("");
  }
  return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

CompileOptions isa_options(const std::string& isa) {
  CompileOptions o;
  o.isa = isa;
  return o;
}

/// `avx2`: also the 8-lane build (the interiors and tails fall differently), where it runs.
void check_windows(const std::vector<int64_t>& shape, const std::vector<Window>& windows,
                   bool avx2 = false) {
  Graph g = pools_graph(shape, windows);
  SCOPED_TRACE(fmt::format("input [{}]", fmt::join(shape, ", ")));
  std::vector<Tensor> in{input_with_nans(shape, 11)};
  EXPECT_TRUE(matches_reference(g, in, isa_options("scalar")));
  std::vector<Tensor> scalar = compile(g, isa_options("scalar")).run(in);
  for (const char* isa : {"avx512", "avx2"}) {
    if ((!avx2 && std::string(isa) == "avx2") || !cpu_supports(isa_by_name(isa))) continue;
    std::vector<Tensor> got = compile(g, isa_options(isa)).run(in);
    ASSERT_EQ(got.size(), scalar.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_TRUE(bitwise_equal(got[k], scalar[k]))
          << isa << ": output " << g.outputs()[k].name << " differs from the scalar build";
  }
}

std::vector<Window> all_windows() {
  std::vector<Window> out;
  for (int64_t k : {2, 3, 5})
    for (int64_t s : {1, 2})
      for (int64_t p = 0; p <= k / 2; ++p) out.push_back({k, s, p, (k + s + p) % 2 == 1});
  return out;
}

/// all_windows(), or in the default tier half of them: those whose index has the parity of
/// `shape` (the shapes below alternate, so each window runs on two of them; every window on every
/// shape with COIL_SLOW_TESTS=1, tests/support/slow_tests.h).
std::vector<Window> windows_for_shape(size_t shape) {
  std::vector<Window> all = all_windows(), out;
  for (size_t i = 0; i < all.size(); ++i)
    if (testing::in_default_tier(i + shape, 2)) out.push_back(all[i]);
  return out;
}

TEST(PoolWindow, WidthsAndHeightsMatchTheScalarBuildBitwise) {
  check_windows({1, 1, 7, 112}, windows_for_shape(0), /*avx2=*/true);
  check_windows({1, 3, 33, 33}, windows_for_shape(1), /*avx2=*/true);
  check_windows({2, 3, 112, 7}, windows_for_shape(0));
  check_windows({1, 24, 2, 33}, windows_for_shape(1));
  check_windows({3, 1, 1, 112}, {{2, 1, 1, false}, {3, 2, 1, true}, {3, 1, 1, false}});
  check_windows({1, 1, 33, 1}, {{2, 1, 1, false}, {3, 2, 1, true}});
  check_windows({1, 2, 2, 2}, {{2, 1, 1, false}, {3, 2, 1, true}, {2, 2, 1, false}});
}

TEST(PoolWindow, StemPoolingMatchesTheScalarBuildBitwise) {
  // shufflenet_v2's and resnet18's stem pooling, and the other padded windows of that size.
  check_windows({1, 24, 112, 112},
                {{3, 2, 1, false}, {3, 1, 1, false}, {5, 2, 2, true}, {2, 2, 1, true}},
                /*avx2=*/true);
}

/// The source of the one kernel of `text`'s graph (AVX-512 code, whatever the machine).
std::string kernel_source(const std::string& text) {
  Graph g = testing::graph_from_text(text);
  CompileOptions o;
  o.isa = "avx512";
  return compile(g, o).report().source;
}

TEST(PoolWindow, PaddedStemPoolIsVectorizedInTheInterior) {
  const std::string src = kernel_source(R"(
input x: f32[1, 24, 112, 112]
r = relu(x)
m = max_pool2d(r) {kernel=3, stride=2, padding=1}
output m
)");
  // Columns 1..55 in vectors (the taps at 2*x3 - 1 .. 2*x3 + 1 stay inside from x3 = 1 on),
  // column 0 scalar; the row mask is one bool per row, selecting whole vectors.
  EXPECT_NE(src.find("x3 in [1, 56): vectors"), std::string::npos) << src;
  EXPECT_NE(src.find("loadu_stride2"), std::string::npos) << src;
  EXPECT_NE(src.find("coil::Vec<float>::select(tmp2, "), std::string::npos) << src;
}

/// One pool (`op`) of relu(x * s + b), s and b per channel ([C, 1, 1] inputs): a BatchNorm +
/// ReLU that the pool alone reads, so the kernel computes it once per (image, channel) into a
/// local plane that the window reads (resnet's stem).
Graph normalized_pool_graph(const std::vector<int64_t>& shape, const Window& w,
                            const std::string& op) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape(shape));
  const std::vector<int64_t> per_channel{shape[1], 1, 1};
  int s = g.add_input("s", DType::F32, make_shape(per_channel));
  int b = g.add_input("b", DType::F32, make_shape(per_channel));
  int r = g.add_node("relu", {g.add_node("add", {g.add_node("mul", {x, s}), b})});
  Attrs a{{"kernel", A{w.kernel, w.kernel}},
          {"stride", A{w.stride, w.stride}},
          {"padding", A{w.padding, w.padding}},
          {"ceil_mode", w.ceil_mode}};
  if (op == "avg_pool2d") a.set("count_include_pad", false);
  g.add_output(g.add_node(op, {r}, a), "y");
  return g;
}

TEST(PoolWindow, WindowsOverALocalPlaneMatchTheScalarBuildBitwise) {
  const std::vector<int64_t> shapes[] = {{2, 3, 40, 40}, {3, 4, 33, 57}};
  for (const std::vector<int64_t>& shape : shapes)
    // Downsampling windows: the kernel fuses them with the BatchNorm (a stride-1 window reads
    // another plane's rows and stays a kernel of its own).
    for (const Window& w : {Window{3, 2, 1, false}, Window{2, 2, 1, true}})
      for (const char* op : {"max_pool2d", "avg_pool2d"}) {
        Graph g = normalized_pool_graph(shape, w, op);
        SCOPED_TRACE(fmt::format("{} kernel {} stride {} padding {} of [{}]", op, w.kernel,
                                 w.stride, w.padding, fmt::join(shape, ", ")));
        std::vector<Tensor> in{input_with_nans(shape, 5),
                               random_tensor(DType::F32, {shape[1], 1, 1}, 6, 0.5, 2.0),
                               random_tensor(DType::F32, {shape[1], 1, 1}, 7, -1.0, 1.0)};
        EXPECT_TRUE(matches_reference(g, in, isa_options("scalar")));
        const Tensor scalar = compile(g, isa_options("scalar")).run(in)[0];
        for (const char* isa : {"avx512", "avx2"}) {
          if (!cpu_supports(isa_by_name(isa))) continue;
          CompiledModel m = compile(g, isa_options(isa));
          // The local plane and the window split this test is about.
          EXPECT_NE(m.report().source.find("_local["), std::string::npos) << isa;
          EXPECT_NE(m.report().source.find("): vectors;"), std::string::npos) << isa;
          EXPECT_TRUE(bitwise_equal(m.run(in)[0], scalar)) << isa << " differs from scalar";
        }
      }
}

TEST(PoolWindow, StemPoolOverALocalPlaneIsVectorizedInTheInterior) {
  // resnet's stem: BatchNorm + ReLU computed once per (image, channel) into a local plane that
  // the 3x3 stride-2 pool reads; the pool's interior reads the plane with stride-2 vectors
  // (it was a scalar nest: 13.6 of 137 ms of resnet18 at batch 8 on 2 threads).
  const std::string src = kernel_source(R"(
input x: f32[2, 4, 112, 112]
input m: f32[4, 1, 1]
input s: f32[4, 1, 1]
d = sub(x, m)
e = mul(d, s)
r = relu(e)
p = max_pool2d(r) {kernel=3, stride=2, padding=1}
output p
)");
  EXPECT_NE(src.find("_local_storage"), std::string::npos) << src;
  EXPECT_NE(src.find("x3 in [1, 56): vectors"), std::string::npos) << src;
  EXPECT_NE(src.find("loadu_stride2(&buf"), std::string::npos) << src;
}

TEST(PoolWindow, RowOnlyPaddingVectorizesWithAScalarMask) {
  // Padding along H only: no test depends on the vector loop, so the whole loop vectorizes.
  const std::string src = kernel_source(R"(
input x: f32[2, 3, 9, 40]
m = max_pool2d(x) {kernel=[3, 1], stride=[1, 1], padding=[1, 0]}
output m
)");
  EXPECT_NE(src.find("the same in every lane of x3: scalar"), std::string::npos) << src;
  EXPECT_EQ(src.find("coil::select<float>"), std::string::npos) << src;
  Graph g = testing::graph_from_text(R"(
input x: f32[2, 3, 9, 40]
m = max_pool2d(x) {kernel=[3, 1], stride=[1, 1], padding=[1, 0]}
a = avg_pool2d(x) {kernel=[3, 1], stride=[1, 1], padding=[1, 0], count_include_pad=false}
output m
output a
)");
  EXPECT_TRUE(matches_reference(g, {input_with_nans({2, 3, 9, 40}, 3)}));
}

}  // namespace
}  // namespace coil

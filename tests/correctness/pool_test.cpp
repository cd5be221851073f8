// max_pool2d, avg_pool2d and global_avg_pool2d compiled and run against the reference
// interpreter: odd shapes, padding, stride, dilation, ceil_mode (with a dropped last window),
// count_include_pad=false, low precision and integer dtypes, NaN, fused producers and
// consumers; and no load of a pooling kernel leaves its buffer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "graph/decompositions.h"
#include "lower/lowering.h"
#include "support/check_graph.h"
#include "sym/analyzer.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using A = std::vector<int64_t>;

struct PoolCase {
  std::vector<int64_t> shape;
  Attrs attrs;
};

std::vector<PoolCase> pool_cases() {
  return {
      {{1, 1, 1, 1}, {{"kernel", A{1, 1}}}},
      {{2, 3, 17, 13}, {{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}}},
      {{2, 3, 8, 7},
       {{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      // ceil_mode whose last window along H would start in the right padding (dropped).
      {{1, 2, 5, 6},
       {{"kernel", A{2, 2}}, {"stride", A{3, 3}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      {{1, 1, 17, 13},
       {{"kernel", A{2, 3}}, {"stride", A{3, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      {{3, 9, 5}, {{"kernel", int64_t{2}}}},
      {{2, 2, 1, 9, 9}, {{"kernel", A{1, 3}}, {"stride", A{1, 1}}, {"padding", A{0, 1}}}},
      {{1, 3, 7, 7}, {{"kernel", A{7, 7}}, {"padding", A{3, 3}}, {"stride", A{1, 1}}}},
      {{1, 4, 3, 17}, {{"kernel", A{3, 1}}, {"stride", A{1, 4}}, {"ceil_mode", true}}},
  };
}

Graph pool_graph(std::string_view op, DType t, const PoolCase& c, Attrs extra = {}) {
  Graph g;
  int x = g.add_input("x", t, make_shape(c.shape));
  Attrs a = c.attrs;
  for (const auto& [k, v] : extra.items()) a.set(k, v);
  g.add_output(g.add_node(op, {x}, a), "y");
  return g;
}

TEST(Pool, MaxPoolShapesAndWindows) {
  for (const PoolCase& c : pool_cases()) {
    Graph g = pool_graph("max_pool2d", DType::F32, c);
    SCOPED_TRACE(to_text(g));
    EXPECT_TRUE(matches_reference(g));
  }
}

TEST(Pool, AvgPoolShapesAndWindows) {
  for (const PoolCase& c : pool_cases()) {
    for (bool include : {true, false}) {
      Graph g = pool_graph("avg_pool2d", DType::F32, c, Attrs{{"count_include_pad", include}});
      SCOPED_TRACE(to_text(g));
      EXPECT_TRUE(matches_reference(g));
    }
  }
}

TEST(Pool, MaxPoolDilation) {
  const PoolCase cases[] = {
      {{1, 2, 17, 13},
       {{"kernel", A{3, 2}},
        {"stride", A{2, 3}},
        {"padding", A{1, 1}},
        {"dilation", A{2, 3}},
        {"ceil_mode", true}}},
      {{2, 1, 9, 9}, {{"kernel", A{3, 3}}, {"stride", A{1, 1}}, {"dilation", A{3, 3}}}},
      // Windows whose taps all fall in the padding give -inf, as torch.
      {{1, 1, 2, 2},
       {{"kernel", A{2, 2}}, {"stride", A{1, 1}}, {"padding", A{1, 1}}, {"dilation", A{3, 3}}}},
  };
  for (const PoolCase& c : cases) {
    Graph g = pool_graph("max_pool2d", DType::F32, c);
    SCOPED_TRACE(to_text(g));
    EXPECT_TRUE(matches_reference(g));
  }
}

TEST(Pool, Dtypes) {
  PoolCase c{{2, 3, 9, 8},
             {{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}}};
  for (DType t : {DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_TRUE(matches_reference(pool_graph("max_pool2d", t, c)));
    EXPECT_TRUE(matches_reference(pool_graph("avg_pool2d", t, c)));
    EXPECT_TRUE(
        matches_reference(pool_graph("avg_pool2d", t, c, Attrs{{"count_include_pad", false}})));
  }
  // Integer max pooling: padding takes the lowest value of the dtype (i64: -2^63).
  for (DType t : {DType::U8, DType::I8, DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_TRUE(matches_reference(pool_graph("max_pool2d", t, c)));
  }
}

TEST(Pool, NanPropagatesAndPaddingNeverWins) {
  Graph g = graph_from_text(R"(
input x: f32[1, 2, 5, 5]
m = max_pool2d(x) {kernel=[3, 3], stride=[1, 1], padding=[1, 1]}
output m
)");
  // All negative, so a padding value of 0 would win; one NaN.
  Tensor x = random_tensor(DType::F32, {1, 2, 5, 5}, 7, -3.0, -1.0);
  x.data_as<float>()[7] = std::nanf("");
  EXPECT_TRUE(matches_reference(g, {x}));
  CompiledModel m = compile(g);
  Tensor y = m.run({x})[0];
  int nans = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    float v = y.data_as<float>()[i];
    if (std::isnan(v))
      ++nans;
    else
      EXPECT_LT(v, 0.0f) << i;
  }
  EXPECT_EQ(nans, 9);  // the 3x3 outputs whose window holds element (1, 2)
}

TEST(Pool, FusedProducersAndConsumers) {
  // A cheap producer (relu) is recomputed per tap, an expensive one (exp + sin) stored first;
  // consumers of the pooled values, two pools of one input, a pool feeding a pool.
  Graph g = graph_from_text(R"(
input x: f32[2, 3, 11, 10]
input b: f32[3, 1, 1]
r = relu(x)
m = max_pool2d(r) {kernel=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=true}
e = exp(x)
s = sin(e)
t = mul(s, e)
a = avg_pool2d(t) {kernel=[2, 2], padding=[1, 1], count_include_pad=false}
a2 = avg_pool2d(x) {kernel=[3, 3], stride=[1, 1]}
m2 = max_pool2d(m) {kernel=[2, 2], ceil_mode=true}
y = add(m, b)
z = sigmoid(a)
output y
output z
output a2
output m2
)");
  EXPECT_TRUE(matches_reference(g));
}

TEST(Pool, GlobalAvgPool) {
  Graph g = graph_from_text(R"(
input x: f32[2, 17, 7, 5]
input h: bf16[3, 1, 1]
input d: f64[1, 2, 3, 9, 9]
gx = global_avg_pool2d(x)
gh = global_avg_pool2d(h)
gd = global_avg_pool2d(d)
output gx
output gh
output gd
)");
  EXPECT_TRUE(matches_reference(g));
}

// Every load of a pooling computation stays inside its buffer for every output position.
TEST(Pool, NoLoadLeavesItsBuffer) {
  std::vector<Graph> graphs;
  for (const PoolCase& c : pool_cases()) {
    graphs.push_back(pool_graph("max_pool2d", DType::F32, c));
    graphs.push_back(pool_graph("avg_pool2d", DType::F32, c, Attrs{{"count_include_pad", false}}));
  }
  for (const Graph& g0 : graphs) {
    IrProgram p = lower_graph(decompose_and_bind(g0, {}));
    int loads = 0;
    for (const ComputedBuffer& c : p.computations) {
      sym::Analyzer a;
      for (size_t i = 0; i < c.ranges.size(); ++i)
        a.bind_loop_var(loop_var(static_cast<int>(i)), c.ranges[i]);
      for (const BodyOp& op : c.body.ops()) {
        if (op.op != LoopOp::load) continue;
        ++loads;
        const Layout& l = p.buffer(op.buffer).layout;
        int64_t last = 0;
        for (size_t d = 0; d < l.sizes.size(); ++d)
          last += (l.sizes[d].const_value() - 1) * l.strides[d].const_value();
        sym::Range r = a.bounds(op.index);
        EXPECT_GE(r.lo, 0) << sym::to_string(op.index) << "\n" << to_text(g0);
        EXPECT_LE(r.hi, last) << sym::to_string(op.index) << "\n" << to_text(g0);
      }
    }
    EXPECT_GT(loads, 0);
  }
}

}  // namespace
}  // namespace coil

// Class sweeps behind the random-graph bugs of issue 26: every kernel kind the CPU backend
// prints, for every dtype the op accepts; every decomposition in f64; casts between every pair
// of float dtypes, round trips included. Each kind is one graph holding one independent branch
// per dtype (branches share no data, so they never fuse and each keeps its kernel kind), so a
// kind costs one compile. A failure names the output, whose prefix is the dtype.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;

constexpr DType kAllDtypes[] = {DType::Bool, DType::U8,  DType::I8,  DType::I16, DType::U16,
                                DType::I32,  DType::U32, DType::I64, DType::U64, DType::F16,
                                DType::BF16, DType::F32, DType::F64};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string instantiate(const std::string& pattern, DType t) {
  std::string name(dtype_name(t));
  return replace_all(replace_all(pattern, "{T}", name), "{p}", name + "_");
}

/// The branches of `pattern` ({T}: the dtype, {p}: a per-dtype name prefix) for every dtype whose
/// branch is a valid graph, except `refused`; `count` gets their number.
std::string branches(const std::string& pattern, const std::string& refused, int* count) {
  std::string all;
  *count = 0;
  for (DType t : kAllDtypes) {
    if (!refused.empty() && refused == dtype_name(t)) continue;
    std::string text = instantiate(pattern, t);
    try {
      graph_from_text(text);
    } catch (const Error&) {
      continue;  // the op does not take this dtype (sub of bool, exp of an integer, ...)
    }
    all += text;
    ++*count;
  }
  return all;
}

struct KernelKind {
  const char* name;
  const char* pattern;
  int min_dtypes;  // the sweep fails if fewer dtypes are valid (a pattern that stopped parsing)
  const char* refused = "";  // a dtype the graph accepts but compile refuses with a clear error
};

// One pattern per kernel kind of codegen/cpp (docs/architecture.md).
const KernelKind kKinds[] = {
    {"pointwise_vector", "input {p}x: {T}[5, 37]\n{p}y = add({p}x, {p}x)\noutput {p}y\n", 9},
    {"pointwise_broadcast",
     "input {p}x: {T}[7, 1, 5]\ninput {p}w: {T}[5]\n{p}y = mul({p}x, {p}w)\noutput {p}y\n", 9},
    {"pointwise_scalar_ops",
     "input {p}x: {T}[3, 19]\n{p}c = gt({p}x, {p}x)\n{p}y = where({p}c, {p}x, {p}x)\n"
     "{p}z = abs({p}y)\noutput {p}z\n",
     8},
    {"transpose_tile",
     "input {p}x: {T}[37, 41]\ninput {p}b: {T}[41, 37]\n{p}t = transpose({p}x)\n"
     "{p}y = add({p}t, {p}b)\noutput {p}y\n",
     9},
    {"transpose_tile_2d_only", "input {p}x: {T}[2, 2]\n{p}t = transpose({p}x)\noutput {p}t\n", 9},
    {"non_affine_view_of_a_reduction",
     "input {p}x: {T}[2, 4]\n{p}s = sum({p}x) {axes=[0], keepdim=true}\n{p}d = add({p}x, {p}s)\n"
     "{p}r = reshape({p}d) {shape=[4, 2]}\n{p}t = transpose({p}r)\noutput {p}t\n",
     9},
    {"row_reduction", "input {p}x: {T}[9, 129]\n{p}y = sum({p}x) {axes=[1]}\noutput {p}y\n", 9},
    {"column_reduction", "input {p}x: {T}[129, 9]\n{p}y = max({p}x) {axes=[0]}\noutput {p}y\n", 9},
    {"split_reduction", "input {p}x: {T}[2, 40000]\n{p}y = sum({p}x) {axes=[1]}\noutput {p}y\n", 9},
    {"reduction_of_everything", "input {p}x: {T}[3, 5]\n{p}y = sum({p}x) {axes=[]}\noutput {p}y\n",
     9},
    {"argmax", "input {p}x: {T}[6, 33]\n{p}y = argmax({p}x) {axis=1}\noutput {p}y\n", 8},
    {"outer_loop_fused_rows",
     "input {p}x: {T}[6, 50]\n{p}m = max({p}x) {axes=[1], keepdim=true}\n"
     "{p}d = sub({p}x, {p}m)\n{p}s = sum({p}d) {axes=[1], keepdim=true}\n"
     "{p}y = add({p}d, {p}s)\noutput {p}y\n",
     8},
    {"output_read_in_its_kernel",
     "input {p}x: {T}[4, 33]\n{p}a = mul({p}x, {p}x)\n{p}s = sum({p}a) {axes=[1], "
     "keepdim=true}\n{p}y = add({p}a, {p}s)\noutput {p}a\noutput {p}y\n",
     9},
    {"softmax", "input {p}x: {T}[6, 50]\n{p}y = softmax({p}x) {axis=-1}\noutput {p}y\n", 4},
    {"layer_norm_local_rows",
     "input {p}x: {T}[5, 40]\ninput {p}w: {T}[40]\n{p}y = layer_norm({p}x, {p}w)\noutput {p}y\n",
     4},
    {"matmul_epilogue",
     "input {p}a: {T}[13, 17]\ninput {p}b: {T}[17, 19]\ninput {p}c: {T}[19]\n"
     "{p}m = matmul({p}a, {p}b)\n{p}y = add({p}m, {p}c)\noutput {p}y\n",
     4},
    {"matmul_unused_result",
     "input {p}a: {T}[4, 3]\ninput {p}b: {T}[3, 5]\n{p}t = matmul({p}a, {p}b)\n"
     "{p}y = neg({p}a)\noutput {p}y\n",
     4},
    {"conv2d",
     "input {p}x: {T}[1, 3, 9, 9]\ninput {p}w: {T}[4, 3, 3, 3]\n"
     "{p}y = conv2d({p}x, {p}w) {padding=[1, 1]}\noutput {p}y\n",
     3, "f64"},
    // A result read by a cast to f32: the reader must see the value its dtype holds (a bf16
    // conv2d computed in f32 was read unrounded), at f32's tolerance, far below a bf16 rounding.
    {"conv2d_read_by_a_cast",
     "input {p}x: {T}[2, 4, 3, 14]\ninput {p}w: {T}[12, 1, 1, 2]\n"
     "{p}y = conv2d({p}x, {p}w) {groups=4, stride=2}\n{p}z = cast({p}y) {dtype=f32}\n"
     "output {p}z\n",
     3, "f64"},
    {"matmul_read_by_a_cast",
     "input {p}a: {T}[5, 17]\ninput {p}b: {T}[17, 6]\n{p}m = matmul({p}a, {p}b)\n"
     "{p}z = cast({p}m) {dtype=f32}\noutput {p}z\n",
     4},
    {"reduction_read_by_a_cast",
     "input {p}x: {T}[7, 33]\n{p}s = sum({p}x) {axes=[1]}\n{p}z = cast({p}s) {dtype=f32}\n"
     "output {p}z\n",
     8},
    {"max_pool",
     "input {p}x: {T}[1, 2, 7, 7]\n{p}y = max_pool2d({p}x) {kernel=[3, 3], "
     "stride=[2, 2], padding=[1, 1]}\noutput {p}y\n",
     6},
    {"avg_pool",
     "input {p}x: {T}[1, 2, 7, 7]\n{p}y = avg_pool2d({p}x) {kernel=[3, 3], "
     "stride=[2, 2], padding=[1, 1]}\noutput {p}y\n",
     4},
    {"concat_slice",
     "input {p}x: {T}[3, 5]\ninput {p}z: {T}[3, 2]\n{p}c = concat({p}x, {p}z) {dim=1}\n"
     "{p}y = slice({p}c) {dim=1, start=1, end=7, step=2}\noutput {p}y\n",
     9},
    {"gather",
     "input {p}x: {T}[6, 4]\ninput {p}i: i64[5]\n{p}y = gather({p}x, {p}i)\noutput {p}y\n", 9},
};

class KernelKindSweep : public ::testing::TestWithParam<KernelKind> {};

TEST_P(KernelKindSweep, EveryDtypeMatchesTheReference) {
  const KernelKind& k = GetParam();
  int count = 0;
  std::string text = branches(k.pattern, k.refused, &count);
  ASSERT_GE(count, k.min_dtypes) << k.name << ": fewer dtypes than expected are valid";
  Graph g = graph_from_text(text);
  // Gather indices must be in range: random integers are in [-3, 3], within a dim of 6.
  EXPECT_TRUE(matches_reference(g)) << k.name;
  RecordProperty("dtypes", count);
  if (*k.refused) {
    DType t = *parse_dtype(k.refused);
    Graph r = graph_from_text(instantiate(k.pattern, t));
    try {
      compile(r);
      ADD_FAILURE() << k.name << " compiled for " << k.refused;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not supported"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, KernelKindSweep, ::testing::ValuesIn(kKinds),
                         [](const auto& info) { return std::string(info.param.name); });

// f64 graphs must stay f64 end to end: every decomposition's constants (eps, counts, factors)
// in f64 too, so the result matches the f64 reference to f64's tolerance.
TEST(DecompositionSweep, EveryDecompositionKeepsF64Exact) {
  Graph g = graph_from_text(R"(
input x: f64[4, 8]
input w: f64[8]
input m: f64[8, 8]
input img: f64[1, 2, 4, 4]
c = full() {shape=[], value=0.001, dtype=f64}
s = mul(x, c)
y0 = softmax(s) {axis=-1}
y1 = log_softmax(s) {axis=-1}
y2 = layer_norm(s, w, w) {eps=0.1}
y3 = rms_norm(s, w) {eps=0.1}
y4 = layer_norm(s)
y5 = rms_norm(s)
y6 = mean(s) {axes=[1]}
y7 = var(s) {axes=[1], correction=0.5}
y8 = linear(s, m, w)
y9 = addmm(w, s, m) {alpha=0.1, beta=0.3}
y10 = global_avg_pool2d(img)
output y0
output y1
output y2
output y3
output y4
output y5
output y6
output y7
output y8
output y9
output y10
)");
  for (const GraphOutput& o : g.outputs())
    EXPECT_EQ(g.node(o.node).type.dtype, DType::F64) << o.name;
  EXPECT_TRUE(matches_reference(g));
}

// Every cast between two float dtypes, and every round trip a -> b -> a and a -> b -> c, must
// round exactly as the reference does (bit for bit: tolerance 0), with values that overflow
// f16, subnormals, halfway cases and signed zeros among the inputs.
TEST(CastSweep, EveryPairOfFloatDtypesRoundsExactly) {
  const DType floats[] = {DType::F16, DType::BF16, DType::F32, DType::F64};
  std::string text;
  int n = 0;
  for (DType a : floats) {
    std::string an(dtype_name(a));
    text += fmt::format("input x_{0}: {0}[64]\n", an);
    for (DType b : floats) {
      std::string bn(dtype_name(b));
      text += fmt::format("{0}_{1} = cast(x_{0}) {{dtype={1}}}\noutput {0}_{1}\n", an, bn);
      ++n;
      for (DType c : floats) {
        std::string cn(dtype_name(c));
        text += fmt::format("{0}_{1}_{2} = cast({0}_{1}) {{dtype={2}}}\noutput {0}_{1}_{2}\n", an,
                            bn, cn);
        ++n;
      }
    }
  }
  Graph g = graph_from_text(text);
  const double special[] = {0.0,        -0.0,        1.0 / 3, -1.0 / 3, 65504.0,    65520.0,
                            1e5,        -1e5,        6e-8,    -6e-8,    1e-40,      3e38,
                            1.00390625, 1.001953125, -2.5e-3, 123.456,  1 + 0x1p-8, 1 + 0x1p-9};
  std::vector<Tensor> in = testing::random_inputs(g, 7, -300.0, 300.0);
  for (Tensor& t : in)
    for (size_t k = 0; k < std::size(special); ++k)
      t.set_from_double(static_cast<int64_t>(k), special[k]);
  CompiledModel m = compile(g);
  std::vector<Tensor> got = m.run(in), want = interpret(g, in);
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult c = compare_tensors(got[i], want[i], Tolerance{0, 0});
    EXPECT_TRUE(c.ok) << g.outputs()[i].name << ": " << c.message;
  }
  EXPECT_EQ(n, 80);
}

// torch's type promotion keeps a tensor's dtype against a 0-dim value of the same category, so a
// bf16 tensor compared with an f32 0-dim 0.1 compares with bf16(0.1) = 0.10009765625.
TEST(CastSweep, ZeroDimOperandIsRoundedToTheTensorsDtype) {
  for (const char* t : {"bf16", "f16"}) {
    Graph g = graph_from_text(fmt::format(R"(
input x: {0}[16]
c = full() {{shape=[], value=0.1, dtype=f32}}
y = gt(x, c)
z = eq(x, c)
output y
output z
)",
                                          t));
    std::vector<Tensor> in = testing::random_inputs(g);
    for (int64_t k = 0; k < 16; ++k) in[0].set_from_double(k, 0.1 + (k - 8) * 1e-4);
    EXPECT_TRUE(matches_reference(g, in)) << t;
    // x = round(0.1) itself is equal to the rounded scalar and not greater.
    in[0].set_from_double(0, 0.1);
    std::vector<Tensor> got = compile(g).run(in);
    EXPECT_EQ(got[0].item_as_double(0), 0) << t;
    EXPECT_EQ(got[1].item_as_double(0), 1) << t;
  }
}

}  // namespace
}  // namespace coil

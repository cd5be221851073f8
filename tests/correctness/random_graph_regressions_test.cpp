// The shrunk graphs of issue 26 (random valid graphs that got a wrong answer, a compile error or an
// internal error), each checked against the reference interpreter; plus the semantics that
// differed from torch, and a check that g++ and clang compile exact math to the same bits.
// The sweeps over each bug's class are in dtype_sweep_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "graph/text_format.h"
#include "runtime/toolchain.h"
#include "support/check_graph.h"
#include "support/error_of.h"
#include "support/npy.h"
#include "support/slow_tests.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using testing::graph_from_text;
using testing::matches_reference;

struct Regression {
  const char* name;
  const char* text;
  const char* cause;
};

const Regression kRegressions[] = {
    {"unused_matmul", R"(
input a: f32[4, 3]
input b: f32[3, 5]
t = matmul(a, b)
u = linear(a, a)
y = neg(a)
output y
)",
     "a node no output reads kept its kernel but got no buffer (map::at): dead nodes are now "
     "dropped before lowering"},
    {"f16_transpose", R"(
input x: f16[2, 2]
input z: bf16[3, 37]
t = transpose(x)
u = transpose(z)
output t
output u
)",
     "the 2-D tile kernel called the f32 transpose_tile on 16-bit data: a converting overload"},
    {"var_of_f16_mean_output", R"(
input x: f16[2, 2]
m = mean(x) {keepdim=true}
v = var(m) {axes=[1]}
output v
output m
)",
     "a forwarded store skipped the f16 rounding that the load of the same buffer applied"},
    {"f64_norm_eps", R"(
input x: f64[4, 8]
c = full() {shape=[], value=0.001, dtype=f64}
m = mul(x, c)
y = layer_norm(m) {eps=0.1}
z = rms_norm(m) {eps=0.1}
output y
output z
)",
     "decompositions built their constants in f32"},
    {"cast_round_trip", R"(
input x: f32[64]
c = cast(x) {dtype=bf16}
d = cast(c) {dtype=f32}
h = cast(x) {dtype=f16}
e = cast(h) {dtype=f32}
output d
output e
)",
     "a conversion to bf16/f16 was a no-op f32 -> f32 to_dtype: now round_to_bf16/round_to_f16"},
    {"non_affine_tile", R"(
input x: f32[2, 4]
s = sum(x) {axes=[0], keepdim=true}
d = sub(x, s)
r = reshape(d) {shape=[4, 2]}
t = transpose(r)
output t
)",
     "the tile kernel took stride -1 (not constant) of x0 + 2*(x1 % 2) as a stride"},
    {"where_sign_gcc_masked_loads", R"(
input a: f32[2, 1, 3, 2]
input x: f32[2, 1, 3, 2]
s = sign(x)
c = gt(s, x)
y = where(c, a, s)
output y
)",
     "g++ 12 -O3 gives every masked load of an SLP group the first vector's mask; "
     "-fno-tree-sink"},
    {"empty_matmuls", R"(
input a: f32[0, 33, 4]
input b: f32[4, 28]
input c: f32[3, 0]
input d: f32[0, 5]
input e: bf16[2, 0, 3, 4]
input f: bf16[4, 6]
t = matmul(a, b)
u = matmul(c, d)
v = matmul(e, f)
output t
output u
output v
)",
     "found by coil_fuzz on the GPU host: a [0, 33, 4] @ [4, 28] product ran the template as one "
     "batch of 33 rows into an empty buffer (heap corruption); empty products are reductions"},
    {"squeeze_static_ones_around_a_symbol", R"(
input x: f32[1, 1, 2, 1, 3]
y = squeeze(x)
output y
)",
     "found by coil_fuzz: the reference's squeeze() kept a static 1 where the type had a symbol; "
     "Graph::add_node now writes out the dims squeeze() drops"},
    {"constant_matmul_with_its_own_transpose", R"(
const c: f32[1, 2, 3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
const d: bf16[2, 3] = [0.5, -1.5, 2.0, 1.25, -0.75, 3.0]
t = transpose(c) {dim0=-2, dim1=-1}
y = matmul(c, t)
u = transpose(d)
z = matmul(d, u)
output y
output z
)",
     "found by coil_fuzz on the GPU host: B, a constant, is packed at load time and the kernel's "
     "argument for it was the packed copy, so A (the same constant) read packed panels; the "
     "packed copy is now a parameter of its own"},
    {"one_constant_packed_two_ways", R"(
input x: f32[5, 3]
const w: f32[3, 3] = [1.0, 2.0, 3.0, -4.0, 5.0, -6.0, 7.0, 8.0, -9.0]
wt = transpose(w)
y = matmul(x, w)
z = matmul(x, wt)
output y
output z
)",
     "two matmuls packing the same constant with other strides shared the first one's packed "
     "copy (keyed by buffer alone); copies are now keyed by their layout"},
    {"conv2d_of_an_empty_input", R"(
input x: f32[4, 3, 6, 0]
input w: f32[2, 3, 4, 2]
input b: f32[2]
input e: f16[2, 0, 5, 5]
input v: f16[3, 0, 2, 2]
y = conv2d(x, w, b) {padding=[2, 2], stride=[1, 3]}
z = conv2d(e, v) {padding=1}
output y
output z
)",
     "found by coil_fuzz on the GPU host: a conv2d whose input has a zero extent reached oneDNN "
     "(\"sizes must be positive\"); its windows sum nothing, so it is the bias or zeros"},
    {"low_precision_conv2d_result_is_rounded", R"(
input x: bf16[2, 4, 3, 14]
input w: bf16[12, 1, 1, 2]
input xh: f16[1, 5, 6, 6]
input wh: f16[10, 1, 2, 2]
c = conv2d(x, w) {groups=4, stride=2, dilation=[2, 2]}
y = cast(c) {dtype=f32}
n = layer_norm(c)
ch = conv2d(xh, wh) {groups=5}
z = cast(ch) {dtype=f32}
output y
output n
output z
)",
     "found by coil_fuzz (the local check): a bf16/f16 conv2d computes in f32 and its readers "
     "got the f32 value unrounded (cast_box converted to the compute dtype and skipped the "
     "rounding); the conversion now rounds as a store would"},
    {"relu_and_clamp_keep_negative_zero", R"(
input x: f32[64]
c = ceil(x)
r = relu(c)
m = clamp(c) {min=0.0}
n = clamp(c) {max=0.0}
y = reciprocal(r)
z = reciprocal(m)
w = reciprocal(n)
output y
output z
output w
)",
     "found by coil_fuzz on the GPU host: clamp(-0.0, min=0.0) gave +0.0 in compiled code and "
     "-0.0 in the reference (rsqrt then gave inf and -inf); torch's relu and clamp keep -0.0, "
     "and so do both sides now (maximum/minimum return b between equal values, as torch's)"},
};

class RandomGraphRegression : public ::testing::TestWithParam<Regression> {};

TEST_P(RandomGraphRegression, MatchesTheReference) {
  Graph g = graph_from_text(GetParam().text);
  // Values around the interesting points: sign(x) > x needs x < -1.
  std::vector<Tensor> in = testing::random_inputs(g, 3, -3.0, 3.0);
  EXPECT_TRUE(matches_reference(g, in)) << GetParam().cause;
  // As the fuzzer compiles: the matmul template everywhere (autotuning may pick a library).
  CompileOptions templates;
  templates.autotune = false;
  EXPECT_TRUE(matches_reference(g, in, templates)) << GetParam().cause;
  CompileOptions unfused = templates;
  unfused.fusion = false;
  EXPECT_TRUE(matches_reference(g, in, unfused)) << GetParam().cause;
}

INSTANTIATE_TEST_SUITE_P(Issue26, RandomGraphRegression, ::testing::ValuesIn(kRegressions),
                         [](const auto& info) { return std::string(info.param.name); });

// A fused kernel stored a buffer that had taken another's slot "in place" before a later
// computation of the same nest read the other at that index (tests/correctness/repros/
// inplace_store_before_read.coil, found through coil.torch's Jacobi rows); the memory plan and
// the schedule verifier now require every read of the old buffer to come before the store.
TEST(RandomGraphRegressions, InPlaceUpdateStoresAfterEveryRead) {
  const fs::path dir = fs::path(COIL_SOURCE_DIR) / "tests/correctness/repros";
  Graph g = load_graph_file(dir / "inplace_store_before_read.coil");
  std::vector<Tensor> in;
  for (int id : g.inputs())
    in.push_back(read_npy(dir / "inplace_store_before_read.inputs" / (g.node(id).name + ".npy")));
  set_num_threads(1);  // as the repro failed (f64: the default tolerance is 1e-9 relative)
  EXPECT_TRUE(matches_reference(g, in));
  set_num_threads(2);
  EXPECT_TRUE(matches_reference(g, in));
}

// Bug 5: squeeze() of a symbolic dim keeps it whatever the bound size, in the graph's type and
// in the compiled model alike; a type that binding would change is an error naming the node.
TEST(RandomGraphRegressions, SqueezeOfASymbolicDimKeepsItWhenBoundToOne) {
  Graph g = graph_from_text("input x: f32[s0, 1]\ny = squeeze(x)\noutput y\n");
  EXPECT_EQ(type_str(g.node(g.outputs()[0].node).type), "f32[s0]");
  for (int64_t s0 : {1, 2, 7}) {
    CompileOptions o;
    o.sizes = {{"s0", s0}};
    std::vector<Tensor> in = {random_tensor(DType::F32, {s0, 1}, 1)};
    EXPECT_TRUE(matches_reference(g, in, o)) << s0;
    EXPECT_EQ(compile(g, o).run(in)[0].shape(), std::vector<int64_t>{s0});
  }
}

TEST(RandomGraphRegressions, ErrorsAfterBindingNameTheNodeAndLocation) {
  Graph g = parse_graph("input x: f32[s0, 3]\ny = max(x) {axes=[0]}\noutput y\n", "m.coil");
  CompileOptions o;
  o.sizes = {{"s0", 0}};
  try {
    compile(g, o);
    ADD_FAILURE() << "compiled a max over an empty dim";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "m.coil:2:5: max: reduction over dim 0 of extent 0 has no identity (with s0=0)");
  }
}

// sum {axes=[]} reduces every dim, as torch.sum(x, dim=[]) and ONNX's ReduceSum.
TEST(RandomGraphRegressions, EmptyAxesReduceEveryDim) {
  Graph g = graph_from_text(
      "input x: f32[3, 5]\ny = sum(x) {axes=[]}\nz = max(x) {axes=[], keepdim=true}\n"
      "output y\noutput z\n");
  EXPECT_EQ(type_str(g.node(g.outputs()[0].node).type), "f32[]");
  EXPECT_EQ(type_str(g.node(g.outputs()[1].node).type), "f32[1, 1]");
  EXPECT_TRUE(matches_reference(g));
}

// The reference interpreter and compiled code agree on what is an error: an integer fmod by
// zero and an integer power with a negative exponent raise (as torch does) in both.
TEST(RandomGraphRegressions, IntegerFmodByZeroAndNegativePowersAreErrors) {
  struct Case {
    const char* op;
    double b;
    const char* message;
  };
  const Case cases[] = {
      {"fmod", 0, "fmod (node y): integer division by zero (7 by 0)"},
      {"pow", -2, "pow (node y): integers to negative integer powers are not allowed (7 ^ -2)"},
  };
  for (const Case& c : cases) {
    for (const char* t : {"i32", "i64", "i8"}) {
      Graph g = graph_from_text(fmt::format(
          "input a: {0}[6]\ninput b: {0}[6]\ny = {1}(a, b)\nz = add(y, a)\noutput z\n", t, c.op));
      std::vector<Tensor> in = testing::random_inputs(g, 2);
      for (int64_t k = 0; k < 6; ++k) {
        in[0].set_from_double(k, 7);
        in[1].set_from_double(k, k == 4 ? c.b : 2);
      }
      CompiledModel m = compile(g);
      std::string compiled = testing::error_of([&] { m.run(in); });
      std::string reference = testing::error_of([&] { interpret(g, in); });
      EXPECT_EQ(compiled, c.message) << t;
      EXPECT_FALSE(reference.empty()) << t;
      in[1].set_from_double(4, 3);
      EXPECT_TRUE(matches_reference(g, in)) << t;  // the next run is fine again
    }
  }
  // x % -1 is 0 for every x, also INT_MIN (whose C++ % traps on x86).
  Graph g = graph_from_text("input a: i32[3]\ninput b: i32[3]\ny = fmod(a, b)\noutput y\n");
  std::vector<Tensor> in = testing::random_inputs(g, 2);
  for (int64_t k = 0; k < 3; ++k) {
    in[0].set_from_double(k, k == 0 ? -2147483648.0 : 5);
    in[1].set_from_double(k, -1);
  }
  EXPECT_TRUE(matches_reference(g, in));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel() * dtype_size(a.dtype()))) ==
             0;
}

// (float)(int)x of -0.5 is +0.0 in C++ and torch; g++ with -fno-trapping-math folds the pair
// into trunc(x), which gives -0.0. compare_tensors calls -0 and 0 equal, so compare bits.
TEST(RandomGraphRegressions, FloatIntFloatCastGivesPositiveZero) {
  for (const char* t : {"f32", "f64"}) {
    for (const char* i : {"i8", "i32", "i64", "u8"}) {
      Graph g = graph_from_text(fmt::format(
          "input x: {0}[37]\nk = cast(x) {{dtype={1}}}\ny = cast(k) {{dtype={0}}}\noutput y\n", t,
          i));
      std::vector<Tensor> in = testing::random_inputs(g, 1, -0.99, 0.99);
      std::vector<Tensor> got = compile(g).run(in), want = interpret(g, in);
      EXPECT_TRUE(same_bits(got[0], want[0])) << t << " via " << i;
    }
  }
}

// g++ and clang compile the same graphs to the same bits where the math is exact (no
// transcendental, sums in coil's fixed order, no FMA contraction): run through the CLI, once per
// compiler (the compiler is chosen per process, by $CXX). The default tier compiles every
// third regression and the graph written here; COIL_SLOW_TESTS=1 all of them
// (tests/support/slow_tests.h).
TEST(RandomGraphRegressions, GccAndClangGiveTheSameBits) {
  std::vector<std::string> compilers;
  for (const char* cxx : {"g++", "clang++-14"}) {
    try {
      Toolchain::for_compiler(cxx);
      compilers.push_back(cxx);
    } catch (const Error&) {
    }
  }
  if (compilers.size() < 2) GTEST_SKIP() << "needs g++ and clang++-14";
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cache" / fmt::format("cxx-{}", ::getpid());
  fs::create_directories(dir);
  int k = 0;
  for (const Regression& r : kRegressions)
    std::ofstream(dir / fmt::format("g{}.coil", k++)) << r.text;
  std::ofstream(dir / fmt::format("g{}.coil", k++))
      << "input x: f32[9, 33]\ninput w: f32[33]\nt = mul(x, w)\nm = max(t) {axes=[1], "
         "keepdim=true}\nd = sub(t, m)\ns = sum(d) {axes=[1], keepdim=true}\nc = gt(d, s)\n"
         "y = where(c, d, s)\nk = cast(y) {dtype=i32}\nz = cast(k) {dtype=f32}\noutput y\noutput "
         "z\n";
  for (int j = 0; j < k; ++j) {
    if (j != k - 1 && !coil::testing::in_default_tier(static_cast<size_t>(j), 3)) continue;
    fs::path file = dir / fmt::format("g{}.coil", j);
    std::vector<std::vector<Tensor>> results;
    for (const std::string& cxx : compilers) {
      fs::path out = dir / fmt::format("out{}-{}", j, cxx);
      ProcessResult r = run_process(
          {"/usr/bin/env", "CXX=" + cxx, "COIL_CACHE_DIR=" + (dir / ("cache-" + cxx)).string(),
           COIL_CLI, "run", file.string(), "--output-dir", out.string(), "--seed", "5"});
      ASSERT_EQ(r.status, 0) << cxx << ": " << r.output;
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      std::vector<Tensor> outs;
      for (const fs::path& f : files) outs.push_back(read_npy(f));
      results.push_back(std::move(outs));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t o = 0; o < results[0].size(); ++o)
      EXPECT_TRUE(same_bits(results[0][o], results[1][o])) << file << " output " << o;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace coil

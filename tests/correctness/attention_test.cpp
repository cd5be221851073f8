// attention end to end (the CPU flash kernel, kernels/coil_attention.h) against the reference
// interpreter: query and key lengths {1, 7, 64, 127, 1000} x head dims {16, 64, 80, 128},
// causal and not (bottom-right aligned), bool and additive masks of broadcast shapes, rows with
// every key masked (NaN), grouped-query heads, Dv != D, odd batch and head counts, bf16/f16 and
// f64 (written out), the AVX2 and scalar ISAs; decoding shapes (the decode path) on every ISA;
// peak memory at T = 8192 in a child process.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "support/check_graph.h"
#include "support/child_test.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using testing::random_inputs;

/// One attention node per line of `nodes`: "name: B H Hkv Tq Tk D Dv attrs".
struct AttentionCase {
  int64_t b, h, hkv, tq, tk, d, dv;
  std::string attrs;  // " {causal=true}" or ""
};

std::string attention_graph(const std::vector<AttentionCase>& cases, const char* dtype = "f32") {
  std::string text;
  for (size_t i = 0; i < cases.size(); ++i) {
    const AttentionCase& c = cases[i];
    text += fmt::format(
        "input q{0}: {1}[{2}, {3}, {5}, {7}]\ninput k{0}: {1}[{2}, {4}, {6}, {7}]\n"
        "input v{0}: {1}[{2}, {4}, {6}, {8}]\ny{0} = attention(q{0}, k{0}, v{0}){9}\n"
        "output y{0}\n",
        i, dtype, c.b, c.h, c.hkv, c.tq, c.tk, c.d, c.dv, c.attrs);
  }
  return text;
}

std::string kernel_names(const CompiledModel& m) {
  std::string names;
  for (const auto& k : m.report().kernels) names += k.name + " ";
  return names;
}

// Every (Tq, Tk) pair of {1, 7, 64, 127, 1000} for one head dim, in one graph (one compile):
// causal on every other pair, grouped-query heads (2 kv heads for 4) on every third.
class AttentionSizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionSizes, MatchReference) {
  const int64_t d = GetParam();
  const int64_t lengths[] = {1, 7, 64, 127, 1000};
  std::vector<AttentionCase> cases;
  int n = 0;
  for (int64_t tq : lengths) {
    for (int64_t tk : lengths) {
      const bool gqa = n % 3 == 0;
      cases.push_back({1, gqa ? 4 : 2, 2, tq, tk, d, d, n % 2 ? " {causal=true}" : ""});
      ++n;
    }
  }
  Graph g = graph_from_text(attention_graph(cases));
  CompiledModel m = compile(g);
  EXPECT_NE(kernel_names(m).find("cpp_extern_attention"), std::string::npos) << kernel_names(m);
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 7)));
}

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionSizes, ::testing::Values(16, 64, 80, 128));

TEST(Attention, OddShapesGroupedQueryAndValueDims) {
  std::vector<AttentionCase> cases = {
      {3, 5, 5, 9, 13, 24, 40, ""},                 // odd B, H; Dv != D
      {2, 8, 2, 33, 70, 64, 32, " {causal=true}"},  // GQA 4:1, Dv < D
      {1, 6, 1, 5, 200, 20, 100, ""},               // multi-query (one kv head)
      {2, 3, 3, 100, 17, 8, 3, " {causal=true}"},   // Tq > Tk: early rows see nothing
      {1, 2, 2, 65, 65, 1, 1, " {scale=0.3}"},      // D = Dv = 1, explicit scale
      {1, 1, 1, 3, 0, 4, 5, ""},                    // no keys: zeros
      {2, 4, 2, 129, 129, 72, 72, " {causal=true, scale=2.0}"},
  };
  Graph g = graph_from_text(attention_graph(cases));
  // Inputs in [-1, 1]: with scale 2 and D = 72, [-2, 2] gives scores near 300, whose f32
  // rounding (1e-7 relative) exp turns into 3e-5 errors, over the tolerance in any f32 code.
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 3, -1.0, 1.0)));
}

TEST(Attention, MasksOfBroadcastShapes) {
  // Each mask shape broadcasts to [B, H, Tq, Tk] = [2, 3, 37, 90]; bool (true: attend) and
  // additive, with and without causal: 16 nodes over one q, k, v (one compile).
  const char* masks[] = {
      "bool[37, 90]", "bool[2, 1, 37, 90]", "bool[1, 3, 1, 90]", "bool[2, 3, 37, 90]",
      "f32[37, 90]",  "f32[2, 1, 1, 90]",   "f32[3, 37, 1]",     "bf16[90]"};
  std::string text =
      "input q: f32[2, 3, 37, 32]\ninput k: f32[2, 3, 90, 32]\ninput v: f32[2, 3, 90, 24]\n";
  int n = 0;
  for (const char* mask : masks) {
    text += fmt::format("input m{}: {}\n", n, mask);
    for (const char* attrs : {"", " {causal=true}"}) {
      text += fmt::format("y{0}_{1} = attention(q, k, v, m{0}){2}\noutput y{0}_{1}\n", n,
                          *attrs ? "causal" : "full", attrs);
    }
    ++n;
  }
  EXPECT_TRUE(matches_reference(graph_from_text(text), random_inputs(graph_from_text(text), 11)));
}

TEST(Attention, RowsWithEveryKeyMaskedAreNaN) {
  // Row 0 of the bool mask is all false and row 1 of the additive one all -inf: softmax of all
  // -inf is NaN in the reference, and so in the kernel; the other rows are finite.
  Graph g = graph_from_text(
      "input q: f32[1, 2, 4, 16]\ninput k: f32[1, 2, 100, 16]\ninput v: f32[1, 2, 100, 16]\n"
      "input mb: bool[4, 100]\ninput ma: f32[4, 100]\n"
      "yb = attention(q, k, v, mb)\nya = attention(q, k, v, ma)\noutput yb\noutput ya\n");
  std::vector<Tensor> in = random_inputs(g, 5);
  bool* mb = static_cast<bool*>(in[3].data());
  float* ma = static_cast<float*>(in[4].data());
  for (int j = 0; j < 100; ++j) {
    mb[j] = false;
    ma[100 + j] = -INFINITY;
  }
  EXPECT_TRUE(matches_reference(g, in));
  std::vector<Tensor> out = compile(g).run(in);
  const float* yb = static_cast<const float*>(out[0].data());
  const float* ya = static_cast<const float*>(out[1].data());
  EXPECT_TRUE(std::isnan(yb[0]));
  EXPECT_TRUE(std::isfinite(yb[16]));
  EXPECT_TRUE(std::isnan(ya[16]));
  EXPECT_TRUE(std::isfinite(ya[0]));
}

TEST(Attention, LowPrecisionComputesInF32) {
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    Graph g = graph_from_text(attention_graph(
        {{2, 4, 2, 70, 130, 64, 48, " {causal=true}"}, {1, 3, 3, 1, 300, 80, 80, ""}}, dtype));
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 9)));
  }
}

// The kernel header on the other vector ISAs this host runs: AVX2 (8 lanes, 2-row tiles) and
// scalar (1 lane), over tails in every dim (Tq, Tk, D, Dv not multiples of the lanes), and a
// random bool mask (its vector blend) over such a tail, contiguous and strided along the keys.
TEST(Attention, EveryIsa) {
  Graph g = graph_from_text(
      attention_graph(
          {{2, 4, 2, 37, 90, 20, 13, " {causal=true}"}, {1, 3, 3, 70, 33, 64, 80, ""}}) +
      "input mb: bool[37, 90]\ninput mt: bool[90, 37]\nmtt = transpose(mt) {dim0=0, dim1=1}\n"
      "ym = attention(q0, k0, v0, mb)\nys = attention(q0, k0, v0, mtt)\noutput ym\noutput ys\n");
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    SCOPED_TRACE(isa);
    CompileOptions options;
    options.isa = isa;
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 6), options));
  }
}

// Each output row is computed by one thread in a fixed order of key blocks: 1 and 2 threads
// give the same bits.
TEST(Attention, ThreadCountInvariant) {
  Graph g = graph_from_text(attention_graph({{2, 4, 2, 200, 300, 64, 40, " {causal=true}"}}));
  std::vector<Tensor> in = random_inputs(g, 12);
  CompiledModel m = compile(g);
  set_num_threads(1);
  std::vector<Tensor> one = m.run(in);
  set_num_threads(2);
  std::vector<Tensor> two = m.run(in);
  ASSERT_EQ(one[0].numel(), two[0].numel());
  EXPECT_EQ(std::memcmp(one[0].data(), two[0].data(), static_cast<size_t>(one[0].numel()) * 4), 0);
}

// Decoding shapes: few tasks over many keys split the keys into chunks (coil_attention.h,
// kSplitMinTasks) whose rows are combined after (the decode path's (batch, kv head) tasks and,
// at Tq = 70, the blocked path's (batch, head, query block) tasks); against the
// reference with causal, GQA, scale, masks (a row masked whole stays NaN), bf16, and the same
// bits at 1 and 2 threads.
TEST(Attention, DecodingSplitsTheKeys) {
  Graph g = graph_from_text(attention_graph({{1, 2, 2, 1, 3000, 64, 64, ""},
                                             {1, 4, 2, 3, 2000, 80, 48, " {causal=true}"},
                                             {2, 1, 1, 1, 1100, 16, 16, " {scale=0.5}"},
                                             {1, 1, 1, 70, 1500, 32, 32, " {causal=true}"}}));
  std::vector<Tensor> in = random_inputs(g, 21, -1.0, 1.0);
  EXPECT_TRUE(matches_reference(g, in));
  CompiledModel m = compile(g);
  set_num_threads(1);
  std::vector<Tensor> one = m.run(in);
  set_num_threads(2);
  std::vector<Tensor> two = m.run(in);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), static_cast<size_t>(one[i].numel()) * 4), 0)
        << "output " << i;
  Graph masked = graph_from_text(
      "input q: f32[1, 2, 2, 32]\ninput k: f32[1, 2, 2500, 32]\ninput v: f32[1, 2, 2500, 24]\n"
      "input mb: bool[2, 2500]\ninput ma: f32[1, 2, 1, 2500]\n"
      "yb = attention(q, k, v, mb)\nya = attention(q, k, v, ma) {causal=true}\n"
      "output yb\noutput ya\n");
  std::vector<Tensor> mi = random_inputs(masked, 22, -1.0, 1.0);
  for (int j = 0; j < 2500; ++j) static_cast<bool*>(mi[3].data())[j] = false;  // row 0: none
  EXPECT_TRUE(matches_reference(masked, mi));
  std::vector<Tensor> out = compile(masked).run(mi);
  EXPECT_TRUE(std::isnan(static_cast<const float*>(out[0].data())[0]));
  EXPECT_TRUE(std::isfinite(static_cast<const float*>(out[0].data())[24]));
  Graph low = graph_from_text(attention_graph({{1, 2, 1, 1, 4000, 64, 64, ""}}, "bf16"));
  EXPECT_TRUE(matches_reference(low, random_inputs(low, 23)));
}

// Decoding shapes take the kernel's decode path (few query rows per kv head:
// kernels/coil_attention_decode.h, K and V read in place, one task per kv head's group) on
// every ISA: AVX-512's and AVX2's in-register sums of the dot products, the scalar ISA's one
// lane; GQA 8:1 and 4:1, Tq 1-3, causal, Dv != D and tails in D, Dv and Tk, split keys and
// not, a bool mask per head with a row masked whole (NaN) and an additive padding mask, bf16.
TEST(Attention, DecodingEveryIsa) {
  Graph g = graph_from_text(
      attention_graph({{1, 16, 2, 1, 1500, 80, 48, ""},
                       {2, 4, 1, 3, 700, 20, 13, " {causal=true}"},
                       {1, 2, 2, 2, 33, 128, 128, ""},
                       {1, 8, 2, 1, 3001, 64, 64, ""}}) +
      "input mb: bool[1, 8, 1, 3001]\ninput ma: f32[1, 1, 1, 3001]\n"
      "ym = attention(q3, k3, v3, mb)\nya = attention(q3, k3, v3, ma)\noutput ym\noutput ya\n");
  std::vector<Tensor> in = random_inputs(g, 24, -1.0, 1.0);
  bool* mb = static_cast<bool*>(in[12].data());
  for (int j = 0; j < 3001; ++j) mb[5 * 3001 + j] = false;  // head 5 sees no key
  for (const std::string& isa : testing::runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions options;
    options.isa = isa;
    EXPECT_TRUE(matches_reference(g, in, options));
    const std::vector<Tensor> out = compile(g, options).run(in);
    const float* ym = static_cast<const float*>(out[4].data());
    for (int h = 0; h < 8; ++h) EXPECT_EQ(std::isnan(ym[h * 64]), h == 5) << h;
  }
  Graph low =
      graph_from_text(attention_graph({{1, 8, 2, 2, 2100, 64, 64, " {causal=true}"}}, "bf16"));
  for (const std::string& isa : testing::runnable_isas()) {
    SCOPED_TRACE(isa);
    CompileOptions options;
    options.isa = isa;
    EXPECT_TRUE(matches_reference(low, random_inputs(low, 25), options));
  }
}

TEST(Attention, F64IsWrittenOut) {
  Graph g = graph_from_text(attention_graph({{1, 4, 2, 9, 33, 8, 8, " {causal=true}"}}, "f64"));
  CompiledModel m = compile(g);
  // Its kernels are named after the composite (cpp_fused_attention_...), none is the call.
  EXPECT_EQ(kernel_names(m).find("cpp_extern_attention"), std::string::npos) << kernel_names(m);
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 2)));
}

TEST(Attention, ViewsAreReadInPlaceAndComputedOperandsStoredFirst) {
  // q is a [B, T, H, D] -> [B, H, T, D] transpose of an input (read in place through strides)
  // and k a computed value (stored first); the output feeds a pointwise kernel.
  Graph g = graph_from_text(
      "input x: f32[2, 50, 4, 16]\ninput k: f32[2, 4, 50, 16]\ninput v: f32[2, 4, 50, 16]\n"
      "q = transpose(x) {dim0=1, dim1=2}\nk2 = mul(k, k)\n"
      "a = attention(q, k2, v) {causal=true}\ny = relu(a)\noutput y\n");
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 4)));
  // q, k, v sliced out of one packed input (offsets 0, 1/3 and 2/3 of it): one kernel, no copy.
  Graph packed = graph_from_text(
      "input qkv: f32[3, 2, 4, 30, 16]\n"
      "q5 = slice(qkv) {dim=0, start=0, end=1}\nk5 = slice(qkv) {dim=0, start=1, end=2}\n"
      "v5 = slice(qkv) {dim=0, start=2, end=3}\nq = squeeze(q5) {dims=[0]}\n"
      "k = squeeze(k5) {dims=[0]}\nv = squeeze(v5) {dims=[0]}\ny = attention(q, k, v)\n"
      "output y\n");
  EXPECT_EQ(compile(packed).report().kernels.size(), 1u) << kernel_names(compile(packed));
  EXPECT_TRUE(matches_reference(packed, random_inputs(packed, 5)));
}

// The written-out pattern (recognize_attention): rank 4 with a constant scale (coil demo's
// form), rank 3 bmm divided by a constant plus an additive mask (torch 1.13's
// nn.MultiheadAttention), a permuted k^T and a mask added on the left, k^T permuted from
// [T, N, D] (torch's ONNX export); each becomes the flash
// kernel and matches the reference. Scores that are also an output stay written out.
TEST(Attention, WrittenOutPatternBecomesTheKernel) {
  const char* graphs[] = {
      "input q: f32[2, 4, 33, 16]\ninput k: f32[2, 4, 47, 16]\ninput v: f32[2, 4, 47, 24]\n"
      "kt = transpose(k) {dim0=2, dim1=3}\ns = matmul(q, kt)\nc = full() {shape=[], value=0.25}\n"
      "t = mul(s, c)\np = softmax(t) {axis=-1}\ny = matmul(p, v)\noutput y\n",
      "input q: f32[6, 20, 8]\ninput k: f32[6, 30, 8]\ninput v: f32[6, 30, 8]\n"
      "input m: f32[20, 30]\nkt = transpose(k) {dim0=1, dim1=2}\ns = bmm(q, kt)\n"
      "c = full() {shape=[1], value=2.8}\nt = div(s, c)\na = add(t, m)\n"
      "p = softmax(a) {axis=2}\ny = bmm(p, v)\noutput y\n",
      "input q: f32[1, 3, 9, 8]\ninput k: f32[1, 3, 9, 8]\ninput v: f32[1, 3, 9, 5]\n"
      "input m: f32[3, 1, 9]\nkt = permute(k) {dims=[0, 1, 3, 2]}\ns = matmul(q, kt)\n"
      "a = add(m, s)\np = softmax(a)\ny = matmul(p, v)\noutput y\n",
      // torch 1.13's ONNX export: q scaled first, k^T a [1, 2, 0] permute of k as [T, N, D].
      "input q: f32[4, 21, 16]\ninput kx: f32[21, 4, 16]\ninput v: f32[4, 21, 16]\n"
      "c = full() {shape=[], value=4.0}\nqs = div(q, c)\nkt = permute(kx) {dims=[1, 2, 0]}\n"
      "s = matmul(qs, kt)\np = softmax(s) {axis=2}\ny = matmul(p, v)\noutput y\n",
  };
  for (const char* text : graphs) {
    SCOPED_TRACE(text);
    Graph g = graph_from_text(text);
    CompiledModel m = compile(g);
    EXPECT_NE(kernel_names(m).find("cpp_extern_attention"), std::string::npos) << kernel_names(m);
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 8)));
  }
  Graph kept = graph_from_text(
      "input q: f32[1, 2, 9, 8]\ninput k: f32[1, 2, 9, 8]\ninput v: f32[1, 2, 9, 8]\n"
      "kt = transpose(k) {dim0=2, dim1=3}\ns = matmul(q, kt)\np = softmax(s)\n"
      "y = matmul(p, v)\noutput y\noutput s\n");
  EXPECT_EQ(kernel_names(compile(kept)).find("attention"), std::string::npos);
}

// 8 heads at T = 8192 (D = 64) in a child process: its peak RSS stays under 300 MB (the score
// matrix alone would be 2 GiB), and rows of the result match a direct computation. The child
// is this test binary run again (posix_spawn) with ATTENTION_TEST_MEMORY_CHILD naming the file
// for its figures: a fresh process, as a fork of one whose OpenMP threads exist would hang.
TEST(Attention, LongSequenceRunsInLinearMemory) {
  const int64_t T = 8192, H = 8, D = 64;
  Graph g = graph_from_text(attention_graph({{1, H, H, T, T, D, D, " {causal=true}"}}));
  if (const char* result_path = std::getenv("ATTENTION_TEST_MEMORY_CHILD")) {
    std::vector<Tensor> in = random_inputs(g, 1, -1.0, 1.0);
    std::vector<Tensor> out = compile(g).run(in);
    // Rows 0, T/2 and T-1 of head 5, against double loops.
    const float* q = static_cast<const float*>(in[0].data());
    const float* k = static_cast<const float*>(in[1].data());
    const float* v = static_cast<const float*>(in[2].data());
    const float* y = static_cast<const float*>(out[0].data());
    double worst = 0;
    const int64_t h = 5;
    for (int64_t i : {int64_t{0}, T / 2, T - 1}) {
      std::vector<double> s(static_cast<size_t>(i + 1));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(q[(h * T + i) * D + d]) * k[(h * T + j) * D + d];
        s[static_cast<size_t>(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double want = 0;
        for (int64_t j = 0; j <= i; ++j)
          want += s[static_cast<size_t>(j)] / sum * v[(h * T + j) * D + d];
        worst = std::max(worst, std::abs(want - y[(h * T + i) * D + d]));
      }
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::FILE* f = std::fopen(result_path, "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "%f %g\n", static_cast<double>(ru.ru_maxrss) / 1024.0, worst);  // MiB
    std::fclose(f);
    return;
  }
  compile(g);  // compiled here: the child finds it in the cache and only loads and runs it
  const std::string result = testing::run_test_in_child("Attention.LongSequenceRunsInLinearMemory",
                                                        "ATTENTION_TEST_MEMORY_CHILD");
  double rss_mib = 0, worst = 1;
  ASSERT_EQ(std::sscanf(result.c_str(), "%lf %lf", &rss_mib, &worst), 2) << result;
  std::printf("attention T=%lld H=%lld D=%lld: child peak RSS %.1f MiB, worst error %.2e\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D),
              rss_mib, worst);
  EXPECT_LT(rss_mib, 300.0);
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace coil

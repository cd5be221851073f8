// attention's backward ops end to end: attention_lse and attention_grad (wrt q, k, v) compiled
// for the CPU (the flash backward of kernels/coil_attention.h) against the reference
// interpreter, over query/key lengths {1, 7, 64, 127, 300}, head dims {16, 64, 80}, causal
// (bottom-right, Tq > Tk included), bool and additive masks of broadcast shapes, rows with every
// key masked (lse -inf: they contribute nothing), grouped-query heads, Dv != D, bf16 and f64
// (written out by the decomposition on every device); and a training step's
// backward at T = 8192 in linear memory (a child process). The kernel's own tests, against
// double loops and at every ISA: attention_backward_kernel_test.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "support/check_graph.h"
#include "support/child_test.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::matches_reference;
using testing::random_inputs;

struct GradCase {
  int64_t b, h, hkv, tq, tk, d, dv;
  std::string attrs;  // inside the braces: "causal=true" or ""
  std::string mask;   // a mask input's type ("bool[7, 9]") or "" for none
};

/// Per case: y = attention(q, k, v[, m]), its logsumexp and the three gradients given a
/// random grad_out dy; every one an output.
std::string grad_graph(const std::vector<GradCase>& cases, const char* dtype = "f32") {
  std::string text;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GradCase& c = cases[i];
    const std::string m = c.mask.empty() ? "" : fmt::format(", m{}", i);
    auto attrs = [&](const std::string& first) {
      std::string all = first;
      if (!c.attrs.empty()) all += (all.empty() ? "" : ", ") + c.attrs;
      return all.empty() ? std::string() : " {" + all + "}";
    };
    text += fmt::format(
        "input q{0}: {1}[{2}, {3}, {5}, {7}]\ninput k{0}: {1}[{2}, {4}, {6}, {7}]\n"
        "input v{0}: {1}[{2}, {4}, {6}, {8}]\ninput dy{0}: {1}[{2}, {3}, {5}, {8}]\n",
        i, dtype, c.b, c.h, c.hkv, c.tq, c.tk, c.d, c.dv);
    if (!c.mask.empty()) text += fmt::format("input m{}: {}\n", i, c.mask);
    text += fmt::format("y{0} = attention(q{0}, k{0}, v{0}{1}){2}\n", i, m, attrs(""));
    text += fmt::format("l{0} = attention_lse(q{0}, k{0}{1}){2}\n", i, m, attrs(""));
    for (const char* wrt : {"q", "k", "v"})
      text += fmt::format("d{1}{0} = attention_grad(q{0}, k{0}, v{0}, y{0}, dy{0}, l{0}{2}){3}\n",
                          i, wrt, m, attrs(fmt::format("wrt=\"{}\"", wrt)));
    text += fmt::format("output l{0}\noutput dq{0}\noutput dk{0}\noutput dv{0}\n", i);
  }
  return text;
}

std::string kernel_names(const CompiledModel& m) {
  std::string names;
  for (const auto& k : m.report().kernels) names += k.name + " ";
  return names;
}

// Every (Tq, Tk) pair of {1, 7, 64, 127, 300} for one head dim, in one graph (one compile):
// causal on every other pair, grouped-query heads (2 kv heads for 4) on every third.
class AttentionGradSizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionGradSizes, MatchReference) {
  const int64_t d = GetParam();
  const int64_t lengths[] = {1, 7, 64, 127, 300};
  std::vector<GradCase> cases;
  int n = 0;
  for (int64_t tq : lengths) {
    for (int64_t tk : lengths) {
      const bool gqa = n % 3 == 0;
      cases.push_back({1, gqa ? 4 : 2, 2, tq, tk, d, d, n % 2 ? "causal=true" : "", ""});
      ++n;
    }
  }
  Graph g = graph_from_text(grad_graph(cases));
  CompiledModel m = compile(g);
  const std::string names = kernel_names(m);
  // The forward writes the logsumexp in its own pass (cpp_extern_attention_attention_lse).
  for (const char* kernel : {"cpp_extern_attention_attention_lse", "cpp_extern_attention_grad"})
    EXPECT_NE(names.find(kernel), std::string::npos) << names;
  EXPECT_EQ(names.find("matmul"), std::string::npos) << "written out: " << names;
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 11, -1.0, 1.0)));
}

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionGradSizes, ::testing::Values(16, 64, 80));

TEST(AttentionGrad, OddShapesMasksAndEmptyRows) {
  std::vector<GradCase> cases = {
      {3, 5, 5, 9, 13, 24, 40, "", ""},               // odd B, H; Dv != D
      {2, 8, 2, 33, 70, 64, 32, "causal=true", ""},   // GQA 4:1, Dv < D
      {1, 6, 1, 5, 200, 20, 100, "", ""},             // multi-query
      {2, 3, 3, 100, 17, 8, 3, "causal=true", ""},    // Tq > Tk: early rows see no key
      {1, 2, 2, 65, 65, 1, 1, "scale=0.3", ""},       // D = Dv = 1, explicit scale
      {1, 1, 1, 3, 0, 4, 5, "", ""},                  // no keys: lse -inf, dq zeros
      {2, 3, 3, 37, 90, 32, 24, "", "bool[37, 90]"},  // bool mask (random: some rows
      {2, 3, 3, 37, 90, 32, 24, "causal=true", "f32[2, 1, 1, 90]"},  // lose every key)
      {2, 4, 2, 20, 20, 16, 16, "causal=true", "bool[2, 4, 20, 20]"},
      {1, 3, 3, 11, 50, 16, 8, "", "bf16[50]"},
  };
  Graph g = graph_from_text(grad_graph(cases));
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 3, -1.0, 1.0)));
}

TEST(AttentionGrad, EveryKeyMaskedContributesNothing) {
  // Row 2 of the mask is false everywhere: y's row is NaN and its lse -inf; dq's row is 0 and
  // dk, dv are the other rows' alone (no NaN spreads from the masked row's delta).
  Graph g = graph_from_text(
      "input q: f32[1, 2, 4, 8]\ninput k: f32[1, 2, 6, 8]\ninput v: f32[1, 2, 6, 8]\n"
      "input dy: f32[1, 2, 4, 8]\nm = full() {shape=[4, 1], value=1, dtype=bool}\n"
      "z = full() {shape=[4, 1], value=0, dtype=bool}\ni = iota() {size=4}\n"
      "ir = reshape(i) {shape=[4, 1]}\ntwo = full() {shape=[], value=2, dtype=i64}\n"
      "row2 = eq(ir, two)\nmr = where(row2, z, m)\nmask = expand(mr) {shape=[4, 6]}\n"
      "y = attention(q, k, v, mask)\nl = attention_lse(q, k, mask)\n"
      "dq = attention_grad(q, k, v, y, dy, l, mask) {wrt=\"q\"}\n"
      "dk = attention_grad(q, k, v, y, dy, l, mask) {wrt=\"k\"}\n"
      "dv = attention_grad(q, k, v, y, dy, l, mask) {wrt=\"v\"}\n"
      "output l\noutput dq\noutput dk\noutput dv\n");
  std::vector<Tensor> in = random_inputs(g, 5);
  std::vector<Tensor> out = compile(g).run(in);
  const float* lse = static_cast<const float*>(out[0].data());
  const float* dq = static_cast<const float*>(out[1].data());
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(lse[h * 4 + 2], -INFINITY);
    for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(dq[(h * 4 + 2) * 8 + d], 0.0f);
  }
  for (size_t o = 1; o < out.size(); ++o) {
    const float* x = static_cast<const float*>(out[o].data());
    for (int64_t e = 0; e < out[o].numel(); ++e) ASSERT_TRUE(std::isfinite(x[e])) << o << " " << e;
  }
  EXPECT_TRUE(matches_reference(g, in));
}

// A training forward: attention and attention_lse over the same q, k, mask, scale and causal
// flag share one call (the forward stores each row's logsumexp from its own running max and
// sum: one pass over the scores, not two), with y and lse both outputs, at every ISA; an
// attention_lse of another causal flag or scale stays a kernel of its own. A decoding shape
// (one query row, 3000 keys) splits the keys and combines the chunks' logsumexps.
TEST(AttentionGrad, ForwardAndItsLogsumexpShareOnePass) {
  Graph g = graph_from_text(
      "input q: f32[2, 4, 37, 32]\ninput k: f32[2, 2, 90, 32]\ninput v: f32[2, 2, 90, 24]\n"
      "input m: bool[37, 90]\n"
      "y = attention(q, k, v, m) {causal=true}\nl = attention_lse(q, k, m) {causal=true}\n"
      "l2 = attention_lse(q, k, m)\nl3 = attention_lse(q, k, m) {causal=true, scale=0.5}\n"
      "input qd: f32[1, 2, 1, 64]\ninput kd: f32[1, 2, 3000, 64]\ninput vd: f32[1, 2, 3000, 64]\n"
      "ld = attention_lse(qd, kd)\nyd = attention(qd, kd, vd)\n"
      "output y\noutput l\noutput l2\noutput l3\noutput yd\noutput ld\n");
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    SCOPED_TRACE(isa);
    CompileOptions options;
    options.isa = isa;
    CompiledModel m = compile(g, options);
    // y with l, l2, l3, yd with ld (whose node comes first): four calls, not six.
    int attention_calls = 0;
    for (const auto& k : m.report().kernels)
      attention_calls += k.name.find("cpp_extern_attention") != std::string::npos;
    EXPECT_EQ(attention_calls, 4) << kernel_names(m);
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 12, -1.0, 1.0), options));
  }
}

// The modules of every ISA (avx512 and avx2 link the kernels from libcoil_vmath, scalar
// compiles them).
TEST(AttentionGrad, EveryIsa) {
  Graph g = graph_from_text(grad_graph({{2, 4, 2, 37, 90, 20, 13, "causal=true", "bool[37, 90]"},
                                        {1, 3, 3, 70, 33, 64, 80, "", "f32[3, 70, 1]"}}));
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    SCOPED_TRACE(isa);
    CompileOptions options;
    options.isa = isa;
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 6, -1.0, 1.0), options));
  }
}

TEST(AttentionGrad, LowPrecisionComputesInF32) {
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    Graph g = graph_from_text(grad_graph({{2, 4, 2, 50, 70, 64, 64, "causal=true", ""}}, dtype));
    EXPECT_TRUE(matches_reference(g, random_inputs(g, 9, -1.0, 1.0)));
  }
}

TEST(AttentionGrad, F64IsWrittenOut) {
  Graph g = graph_from_text(grad_graph(
      {{1, 4, 2, 9, 33, 8, 8, "causal=true", ""}, {2, 2, 2, 5, 7, 4, 6, "", "bool[5, 7]"}}, "f64"));
  CompiledModel m = compile(g);
  EXPECT_EQ(kernel_names(m).find("cpp_extern_attention"), std::string::npos) << kernel_names(m);
  EXPECT_TRUE(matches_reference(g, random_inputs(g, 4)));
}

TEST(AttentionGrad, ErrorsNameTheOpAndTheValue) {
  const std::string head =
      "input q: f32[1, 2, 4, 8]\ninput k: f32[1, 2, 6, 8]\ninput v: f32[1, 2, 6, 8]\n"
      "input y: f32[1, 2, 4, 8]\ninput l: f32[1, 2, 4]\n";
  auto message = [&](const std::string& body) {
    try {
      graph_from_text(head + body);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("g = attention_grad(q, k, v, y, y, l) {wrt=\"x\"}\noutput g\n").find("wrt"),
            std::string::npos);
  EXPECT_NE(message("g = attention_grad(q, k, v, y, y, l)\noutput g\n").find("wrt"),
            std::string::npos);
  EXPECT_NE(message("g = attention_grad(q, k, v, y, l, l) {wrt=\"q\"}\noutput g\n")
                .find("attention_grad: grad_out must be f32[1, 2, 4, 8]"),
            std::string::npos);
  EXPECT_NE(message("g = attention_grad(q, k, v, y, y, y) {wrt=\"q\"}\noutput g\n")
                .find("attention_grad: lse must be f32[1, 2, 4]"),
            std::string::npos);
  EXPECT_NE(message("input k3: f32[1, 3, 6, 8]\ng = attention_lse(q, k3)\noutput g\n")
                .find("attention_lse: k has 3 heads, which does not divide q's 2"),
            std::string::npos);
  EXPECT_NE(message("g = attention_lse(q, k) {causal=true, window=3}\noutput g\n").find("window"),
            std::string::npos);
}

// One training step's attention backward at T = 8192 (8 heads, D = 64, causal) in a child
// process: lse, dq, dk and dv together peak under 300 MB RSS (one [T, T] score matrix of one
// head would be 256 MiB), and rows of each match double loops given the kernel's lse and y.
TEST(AttentionGrad, LongSequenceRunsInLinearMemory) {
  const int64_t T = 8192, H = 8, D = 64;
  Graph g = graph_from_text(grad_graph({{1, H, H, T, T, D, D, "causal=true", ""}}) + "output y0\n");
  if (const char* result_path = std::getenv("ATTENTION_GRAD_TEST_MEMORY_CHILD")) {
    std::vector<Tensor> in = random_inputs(g, 1, -1.0, 1.0);
    std::vector<Tensor> out = compile(g).run(in);
    auto f = [](const Tensor& t) { return static_cast<const float*>(t.data()); };
    const float *q = f(in[0]), *k = f(in[1]), *v = f(in[2]), *dy = f(in[3]);
    const float *lse = f(out[0]), *dq = f(out[1]), *dk = f(out[2]), *dv = f(out[3]), *y = f(out[4]);
    const double scale = 1.0 / std::sqrt(double(D));
    const int64_t h = 3;
    auto dot = [&](const float* a, const float* b) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += double(a[d]) * b[d];
      return s;
    };
    auto row = [&](const float* x, int64_t i) { return x + (h * T + i) * D; };
    auto p = [&](int64_t i, int64_t j) {  // P given the kernel's lse
      return std::exp(dot(row(q, i), row(k, j)) * scale - lse[h * T + i]);
    };
    auto delta = [&](int64_t i) { return dot(row(dy, i), row(y, i)); };
    double worst = 0;
    for (int64_t i : {int64_t{0}, T / 2, T - 1}) {
      // lse from scratch.
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, dot(row(q, i), row(k, j)) * scale);
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(dot(row(q, i), row(k, j)) * scale - mx);
      worst = std::max(worst, std::abs(mx + std::log(sum) - lse[h * T + i]));
      // dq row i (keys j <= i); dk and dv row i (every query r >= i sees key i).
      double gq[D] = {}, gk[D] = {}, gv[D] = {};
      for (int64_t j = 0; j <= i; ++j) {
        const double ds = p(i, j) * (dot(row(dy, i), row(v, j)) - delta(i)) * scale;
        for (int64_t d = 0; d < D; ++d) gq[d] += ds * row(k, j)[d];
      }
      for (int64_t r = i; r < T; ++r) {
        const double pr = p(r, i), ds = pr * (dot(row(dy, r), row(v, i)) - delta(r)) * scale;
        for (int64_t d = 0; d < D; ++d) {
          gk[d] += ds * row(q, r)[d];
          gv[d] += pr * row(dy, r)[d];
        }
      }
      for (int64_t d = 0; d < D; ++d) {
        worst = std::max(worst, std::abs(gq[d] - row(dq, i)[d]));
        worst = std::max(worst, std::abs(gk[d] - row(dk, i)[d]));
        worst = std::max(worst, std::abs(gv[d] - row(dv, i)[d]));
      }
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::FILE* file = std::fopen(result_path, "w");
    ASSERT_NE(file, nullptr);
    std::fprintf(file, "%f %g\n", static_cast<double>(ru.ru_maxrss) / 1024.0, worst);  // MiB
    std::fclose(file);
    return;
  }
  compile(g);  // compiled here: the child finds it in the cache and only loads and runs it
  const std::string result = testing::run_test_in_child(
      "AttentionGrad.LongSequenceRunsInLinearMemory", "ATTENTION_GRAD_TEST_MEMORY_CHILD");
  double rss_mib = 0, worst = 1;
  ASSERT_EQ(std::sscanf(result.c_str(), "%lf %lf", &rss_mib, &worst), 2) << result;
  std::printf("attention backward T=%lld H=%lld D=%lld: child peak RSS %.1f MiB, worst %.2e\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D),
              rss_mib, worst);
  EXPECT_LT(rss_mib, 300.0);
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace coil

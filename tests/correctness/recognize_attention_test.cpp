// recognize_attention on the forms a GPT block reaches coil in (tests/correctness/
// attention_test.cpp has the f32 + / * forms): bool masks through where (masked_fill's
// where(m, -inf, s), where(m, s, -inf), logical_not folded), f32, bf16 and f16, and torch's bmm
// decomposition of the 4-D products (expand, reshape to 3-D, bmm, reshape back). Each graph is
// rewritten to one attention node per case, compiles to the flash kernel and matches the
// reference interpreter on the original graph (bf16 and f16 also closer to the graph in f32);
// T in {1, 7, 64}, D in {16, 64}, causal and random masks, rows with every key masked (NaN in
// both). Forms that must stay written out: a finite fill, a broadcasting expand, a batch split
// back differently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "graph/recognize_attention.h"
#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;
using testing::random_inputs;

constexpr int64_t kB = 2, kH = 3;

enum class Form {
  kTorchBmm,     // torch 1.13's GPT block: bmm views, * c, where(logical_not(m), -inf, s)
  kKeep4d,       // 4-D matmul, / c, where(m, s, -inf), mask [B, 1, T, T]
  kMaskedOut3d,  // rank-3 bmm, where(m, -inf, s): the rewrite negates m
  kBmmKeep,      // bmm views, no scale, where(m, s, -inf), mask [B, H, T, T]
};

struct Case {
  Form form;
  int64_t t, d;
  bool causal;      // else a random mask
  bool masked_row;  // query row 0 has every key masked
};

/// The mask's shape and whether true means "attend" in the written-out graph.
std::vector<int64_t> mask_shape(const Case& c) {
  switch (c.form) {
    case Form::kKeep4d:
      return {kB, 1, c.t, c.t};
    case Form::kBmmKeep:
      return {kB, kH, c.t, c.t};
    default:
      return {c.t, c.t};
  }
}
bool mask_keeps(const Case& c) {
  return c.form != Form::kMaskedOut3d;
}

/// torch's bmm decomposition of a 4-D operand: expand (identity) and reshape to 3-D.
std::string merged(const std::string& x, int64_t r, int64_t c) {
  return fmt::format(
      "{0}_e = expand({0}) {{shape=[{1}, {2}, {3}, {4}]}}\n"
      "{0}_3 = reshape({0}_e) {{shape=[{5}, {3}, {4}]}}\n",
      x, kB, kH, r, c, kB * kH);
}

std::string case_graph(const Case& c, int i, const std::string& dt) {
  const int64_t t = c.t, d = c.d;
  const double scale = 1.0 / std::sqrt(double(d));
  const bool three = c.form == Form::kMaskedOut3d;
  const std::string qkv = three ? fmt::format("{}[{}, {}, {}]", dt, kB * kH, t, d)
                                : fmt::format("{}[{}, {}, {}, {}]", dt, kB, kH, t, d);
  std::string mshape;
  for (int64_t s : mask_shape(c)) mshape += (mshape.empty() ? "" : ", ") + std::to_string(s);
  std::string g = fmt::format(
      "input q{0}: {1}\ninput k{0}: {1}\ninput v{0}: {1}\n"
      "input m{0}: bool[{2}]\n",
      i, qkv, mshape);
  // Names carry the case index; `#` is replaced by it below.
  std::string b = fmt::format("ninf# = full() {{dtype={}, shape=[], value=-inf}}\n", dt);
  switch (c.form) {
    case Form::kTorchBmm:
    case Form::kBmmKeep:
      b += "kt# = transpose(k#) {dim0=-2, dim1=-1}\n" + merged("q#", t, d) + merged("kt#", d, t) +
           "s3# = matmul(q#_3, kt#_3)\n" +
           fmt::format("s# = reshape(s3#) {{shape=[{}, {}, {}, {}]}}\n", kB, kH, t, t);
      if (c.form == Form::kTorchBmm) {
        b += fmt::format("c# = full() {{dtype={}, shape=[], value={}}}\nsc# = mul(s#, c#)\n", dt,
                         scale);
        b += "nm# = logical_not(m#)\nw# = where(nm#, ninf#, sc#)\n";
      } else {
        b += "w# = where(m#, s#, ninf#)\n";
      }
      b += "p# = softmax(w#) {axis=-1}\n" + merged("p#", t, t) + merged("v#", t, d) +
           "y3# = matmul(p#_3, v#_3)\n" +
           fmt::format("y# = reshape(y3#) {{shape=[{}, {}, {}, {}]}}\n", kB, kH, t, d);
      break;
    case Form::kKeep4d:
      b += fmt::format(
          "kt# = transpose(k#) {{dim0=2, dim1=3}}\ns# = matmul(q#, kt#)\n"
          "c# = full() {{dtype={}, shape=[], value={:.1f}}}\nsc# = div(s#, c#)\n"
          "w# = where(m#, sc#, ninf#)\np# = softmax(w#) {{axis=-1}}\ny# = matmul(p#, v#)\n",
          dt, 1.0 / scale);
      break;
    case Form::kMaskedOut3d:
      b += "kt# = transpose(k#) {dim0=1, dim1=2}\ns# = bmm(q#, kt#)\n"
           "w# = where(m#, ninf#, s#)\np# = softmax(w#) {axis=2}\ny# = bmm(p#, v#)\n";
      break;
  }
  b += "output y#\n";
  for (size_t at = b.find('#'); at != std::string::npos; at = b.find('#', at))
    b.replace(at, 1, std::to_string(i));
  return g + b;
}

/// Sets a causal mask (or keeps the random one) in the polarity of the case, and masks every
/// key of query row 0 when asked.
void fill_mask(Tensor& m, const Case& c) {
  const bool keep = mask_keeps(c);
  bool* p = static_cast<bool*>(m.data());
  for (int64_t at = 0; at < m.numel(); ++at) {
    const int64_t i = (at / c.t) % c.t, j = at % c.t;
    bool attend = c.causal ? j <= i : p[at] == keep;
    if (c.masked_row && i == 0) attend = false;
    p[at] = attend == keep;
  }
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_name() == op;
  return n;
}

/// `t` as f32 (bool masks and f32 as they are).
Tensor widened(const Tensor& t) {
  if (t.dtype() != DType::BF16 && t.dtype() != DType::F16) return t;
  Tensor w = Tensor::empty(DType::F32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) w.set_from_double(i, t.item_as_double(i));
  return w;
}

/// The largest |a - b| over the elements that are not NaN in b.
double max_error(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (!std::isnan(b.item_as_double(i)))
      worst = std::max(worst, std::fabs(a.item_as_double(i) - b.item_as_double(i)));
  return worst;
}

/// Rewrites (one attention per case), compiles (the flash kernel) and compares with the
/// reference on the original graph, in `dt` at head dim `d`. bf16, f16: the written-out
/// reference rounds the scores and the probabilities to bf16 (f16), the kernel keeps them in f32,
/// so the two differ by those roundings (twice the dtype's default tolerance), and the kernel must
/// be at least as close as the reference to the same graph computed in f32.
void check_cases(const std::vector<Case>& cases, const std::string& dt, uint64_t seed) {
  std::string text;
  for (size_t i = 0; i < cases.size(); ++i) text += case_graph(cases[i], int(i), dt);
  SCOPED_TRACE(text);
  Graph g = graph_from_text(text);
  int rewrites = 0;
  Graph r = recognize_attention(g, &rewrites);
  EXPECT_EQ(rewrites, int(cases.size()));
  EXPECT_EQ(count_op(r, "attention"), int(cases.size()));
  std::vector<Tensor> in = random_inputs(g, seed, -1.0, 1.0);
  for (size_t i = 0; i < cases.size(); ++i) fill_mask(in[4 * i + 3], cases[i]);
  CompiledModel m = compile(g);
  std::string kernels;
  for (const auto& k : m.report().kernels) kernels += k.name + " ";
  EXPECT_NE(kernels.find("cpp_extern_attention"), std::string::npos) << kernels;
  std::vector<Tensor> got = m.run(in);
  std::vector<Tensor> want = interpret(g, in);
  const bool narrow = dt != "f32";
  Tolerance tol = default_tolerance(g.node(g.outputs()[0].node).type.dtype);
  std::vector<Tensor> exact;
  if (narrow) {
    tol.rtol *= 2;
    tol.atol *= 2;
    std::string text32;
    for (size_t i = 0; i < cases.size(); ++i) text32 += case_graph(cases[i], int(i), "f32");
    std::vector<Tensor> in32;
    for (const Tensor& t : in) in32.push_back(widened(t));
    exact = interpret(graph_from_text(text32), in32);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    CompareResult c = compare_tensors(got[i], want[i], tol);
    EXPECT_TRUE(c.ok) << "case " << i << ": " << c.message;
    if (cases[i].masked_row) {  // NaN in the written-out graph and in the kernel
      EXPECT_TRUE(std::isnan(got[i].item_as_double(0))) << "case " << i;
      EXPECT_TRUE(std::isnan(want[i].item_as_double(0))) << "case " << i;
    }
    if (narrow) {
      const double fused = max_error(got[i], exact[i]), written = max_error(want[i], exact[i]);
      EXPECT_LE(fused, written) << "case " << i;
      std::printf("case %zu: %s error against f32: kernel %g, written-out reference %g\n", i,
                  dt.c_str(), fused, written);
    }
  }
}

class RecognizeWhere : public ::testing::TestWithParam<std::tuple<const char*, int64_t>> {};

TEST_P(RecognizeWhere, BoolMasksBf16AndBmmViewsBecomeTheKernel) {
  const auto [dt, d] = GetParam();
  std::vector<Case> cases;
  for (int64_t t : {1, 7, 64}) {
    for (Form f : {Form::kTorchBmm, Form::kKeep4d, Form::kMaskedOut3d, Form::kBmmKeep}) {
      // causal and random masks on alternate forms; a masked row where T > 1 on two forms
      const bool causal = (int(f) + t) % 2 == 1;
      const bool masked_row = t > 1 && (f == Form::kTorchBmm || f == Form::kMaskedOut3d);
      cases.push_back({f, t, d, causal, masked_row});
    }
  }
  check_cases(cases, dt, static_cast<uint64_t>(d));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndHeadDims, RecognizeWhere,
                         ::testing::Combine(::testing::Values("f32", "bf16", "f16"),
                                            ::testing::Values(int64_t{16}, int64_t{64})));

/// A decoder's grouped-query attention as torch writes it: k and v repeat_interleave'd from
/// `hkv` heads to `h` (unsqueeze at `udim`, expand, reshape), then attention.
std::string repeated_kv_graph(int64_t h, int64_t hkv, int64_t tq, int64_t tk, int64_t udim,
                              const char* extra = "") {
  const int64_t rep = h / hkv, d = 16;
  auto repeat = [&](const char* x) {
    const std::string e = udim == 2 ? fmt::format("[2, {}, {}, {}, {}]", hkv, rep, tk, d)
                                    : fmt::format("[2, {}, {}, {}, {}]", rep, hkv, tk, d);
    return fmt::format(
        "{0}u = unsqueeze({0}) {{dim={1}}}\n{0}e = expand({0}u) {{shape={2}}}\n"
        "{0}r = reshape({0}e) {{shape=[2, {3}, {4}, {5}]}}\n",
        x, udim, e, h, tk, d);
  };
  return fmt::format(
             "input q: f32[2, {0}, {1}, 16]\ninput k: f32[2, {2}, {3}, 16]\n"
             "input v: f32[2, {2}, {3}, 16]\n",
             h, tq, hkv, tk) +
         repeat("k") + repeat("v") + "y = attention(q, kr, vr)" + extra +
         "\nl = attention_lse(q, kr)\noutput y\noutput l\noutput kr\n";
}

// Forms that are not attention as the op computes it stay written out (and still compute the
// graph): a finite fill (finfo.min: a fully masked row would be a mean, not NaN), an expand
// that broadcasts kv heads (1 -> H), a result reshape that splits the merged batch as [H, B];
// kv heads tiled rather than repeated (unsqueeze at 1: head h reads kv head h % Hkv), and k
// repeated where v is not, stay repeated.
TEST(RecognizeWhere, NearMissesStayWrittenOut) {
  const std::string graphs[] = {
      repeated_kv_graph(6, 2, 3, 5, 1),
      "input q: f32[1, 4, 3, 8]\ninput k: f32[1, 2, 5, 8]\ninput v: f32[1, 4, 5, 8]\n"
      "ku = unsqueeze(k) {dim=2}\nke = expand(ku) {shape=[1, 2, 2, 5, 8]}\n"
      "kr = reshape(ke) {shape=[1, 4, 5, 8]}\ny = attention(q, kr, v)\noutput y\n",
      "input q: bf16[1, 2, 5, 8]\ninput k: bf16[1, 2, 5, 8]\ninput v: bf16[1, 2, 5, 8]\n"
      "input m: bool[5, 5]\nkt = transpose(k) {dim0=2, dim1=3}\ns = matmul(q, kt)\n"
      "f = full() {dtype=bf16, shape=[], value=-3.3895313892515355e+38}\n"
      "w = where(m, s, f)\np = softmax(w) {axis=-1}\ny = matmul(p, v)\noutput y\n",
      "input q: f32[1, 2, 5, 8]\ninput k: f32[1, 1, 5, 8]\ninput v: f32[1, 2, 5, 8]\n"
      "kt = transpose(k) {dim0=2, dim1=3}\nqe = expand(q) {shape=[1, 2, 5, 8]}\n"
      "q3 = reshape(qe) {shape=[2, 5, 8]}\nke = expand(kt) {shape=[1, 2, 8, 5]}\n"
      "k3 = reshape(ke) {shape=[2, 8, 5]}\ns3 = matmul(q3, k3)\n"
      "s = reshape(s3) {shape=[1, 2, 5, 5]}\np = softmax(s) {axis=-1}\n"
      "pe = expand(p) {shape=[1, 2, 5, 5]}\np3 = reshape(pe) {shape=[2, 5, 5]}\n"
      "ve = expand(v) {shape=[1, 2, 5, 8]}\nv3 = reshape(ve) {shape=[2, 5, 8]}\n"
      "y3 = matmul(p3, v3)\ny = reshape(y3) {shape=[1, 2, 5, 8]}\noutput y\n",
      "input q: f32[2, 3, 5, 8]\ninput k: f32[2, 3, 5, 8]\ninput v: f32[2, 3, 5, 8]\n"
      "kt = transpose(k) {dim0=2, dim1=3}\nq3 = reshape(q) {shape=[6, 5, 8]}\n"
      "k3 = reshape(kt) {shape=[6, 8, 5]}\ns3 = matmul(q3, k3)\n"
      "s = reshape(s3) {shape=[2, 3, 5, 5]}\np = softmax(s) {axis=-1}\n"
      "p3 = reshape(p) {shape=[6, 5, 5]}\nv3 = reshape(v) {shape=[6, 5, 8]}\n"
      "y3 = matmul(p3, v3)\ny = reshape(y3) {shape=[3, 2, 5, 8]}\noutput y\n",
  };
  for (const std::string& text : graphs) {
    SCOPED_TRACE(text);
    Graph g = graph_from_text(text);
    int rewrites = -1;
    recognize_attention(g, &rewrites);
    EXPECT_EQ(rewrites, 0);
    EXPECT_TRUE(testing::matches_reference(g, random_inputs(g, 3)));
  }
}

// The repeated copies are not made: attention and attention_lse read the kv heads, as the op's
// grouped-query heads (head h reads kv head h / (H / Hkv)) read what repeat_interleave made;
// the repeat stays for its other reader (an output here). Same values as the graph as written.
TEST(RecognizeGroupedHeads, RepeatedKvHeadsAreReadAsGroupedQueryHeads) {
  int index = 0;  // causal on every other case (each case is a compile: 12 in all)
  for (auto [h, hkv] : {std::pair<int64_t, int64_t>{6, 2}, {4, 1}, {3, 3}}) {
    for (auto [tq, tk] : {std::pair<int64_t, int64_t>{1, 9}, {7, 7}, {1, 64}, {5, 1}}) {
      const char* extra = index++ % 2 ? " {causal=true}" : "";
      std::string text = repeated_kv_graph(h, hkv, tq, tk, 2, extra);
      SCOPED_TRACE(text);
      Graph g = graph_from_text(text);
      int rewrites = 0;
      Graph r = recognize_attention(g, &rewrites);
      EXPECT_EQ(rewrites, 2);
      const Node& y = r.node(r.find("y"));
      EXPECT_EQ(r.node(y.inputs[1]).name, "k");
      EXPECT_EQ(r.node(y.inputs[2]).name, "v");
      EXPECT_EQ(r.node(r.node(r.find("l")).inputs[1]).name, "k");
      EXPECT_TRUE(testing::matches_reference(g, random_inputs(g, uint64_t(h * tk + tq))));
    }
  }
}

}  // namespace
}  // namespace coil

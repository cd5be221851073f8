// The CPU attention kernels of kernels/coil_attention.h called directly: forward, logsumexp and
// the blocked flash backward (Grad::q, k, v) against double-precision loops written here from
// q, k, v and dout alone (scores, mask, causal, softmax, y, lse; delta, dP, dS, dQ, dK, dV).
// Shapes: (Tq, Tk) pairs of {1, 7, 64, 127, 200} x D {1, 16, 64, 80}, causal (Tq > Tk: rows
// that see no key), Dv != D, grouped-query heads 2:1 and 4:1, odd B and H, bool and float masks
// of broadcast shapes with rows masked whole (lse -inf, no gradient), Tk = 0, Tq = 0 and other
// empty sizes, bf16 and f16, heads sliced from a packed [B, T, 3, H, D] buffer, NaN
// propagation, the same bits at 1 and 2 threads, and T = 4096 (no [T, T] buffer). The forward's
// own logsumexp (forward(..., lse)) is checked in every case, split keys included. Decoding
// shapes (few query rows per kv head: the forward's decode path, coil_attention_decode.h):
// Tq 1-4 over Tk up to 5000, GQA 1:1, 4:1 and 8:1, masks varying per head, k and v heads of one
// packed KV cache, rows that see no key, Tk = 0, bf16/f16, NaN, the same bits at 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/coil_attention.h"

namespace coil::attention {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The mask's shape, broadcast to [B, H, Tq, Tk].
enum class MaskShape {
  none,
  keys,        // [Tk]
  rows,        // [Tq, Tk]
  batch_rows,  // [B, 1, Tq, Tk]
  head_rows,   // [1, H, Tq, Tk]: the heads of a kv head's group see different keys
};

struct Case {
  int64_t B, H, Hkv, Tq, Tk, D, Dv;
  bool causal = false;
  MaskShape mask = MaskShape::none;
  std::vector<int64_t> dead_rows = {};  // mask rows with every key masked (not for [Tk]; of
                                        // batch or head 0 only for [B, 1, ...] or [1, H, ...])
  float scale = 0;                      // 0: 1 / sqrt(D)
  bool packed = false;    // q, k, v: heads of one [B, T, 3, H, D] buffer (Tq = Tk, H = Hkv, D = Dv)
  bool kv_cache = false;  // k, v: heads of one [B, Tk, 2, Hkv, D] buffer (D = Dv); q [B, Tq, H, D]
  unsigned seed = 1;
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) +
         " Hkv=" + std::to_string(c.Hkv) + " Tq=" + std::to_string(c.Tq) +
         " Tk=" + std::to_string(c.Tk) + " D=" + std::to_string(c.D) +
         " Dv=" + std::to_string(c.Dv) + (c.causal ? " causal" : "") + " mask " +
         std::to_string(static_cast<int>(c.mask)) + (c.packed ? " packed" : "") +
         (c.kv_cache ? " kv_cache" : "");
}

/// The inputs of one call in dtype T with a mask of M, q/k/v read through Params' strides.
template <typename T, typename M>
struct Problem {
  Params p{};
  std::vector<T> qkv;  // q, k, v back to back, or one packed buffer
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  std::vector<T> dout;
  std::unique_ptr<M[]> mask;  // M = bool: std::vector<bool> has no data()

  const M* mask_ptr() const { return p.mask == MaskKind::none ? nullptr : mask.get(); }
};

template <typename T, typename M>
Problem<T, M> make_problem(const Case& c) {
  Problem<T, M> pr;
  Params& p = pr.p;
  p.batch = c.B;
  p.heads = c.H;
  p.kv_heads = c.Hkv;
  p.q_len = c.Tq;
  p.kv_len = c.Tk;
  p.head_dim = c.D;
  p.value_dim = c.Dv;
  p.scale =
      c.scale != 0 ? c.scale : 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(c.D, 1)));
  p.causal = c.causal;
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  auto random = [&] { return T(static_cast<float>(uni(rng))); };
  if (c.packed) {
    const int64_t row = 3 * c.H * c.D;  // one (b, t) of [B, T, 3, H, D]
    pr.qkv.resize(static_cast<size_t>(c.B * c.Tq * row));
    for (T& x : pr.qkv) x = random();
    pr.q = pr.qkv.data();
    pr.k = pr.q + c.H * c.D;
    pr.v = pr.k + c.H * c.D;
    for (int64_t* s : {p.q_strides, p.k_strides, p.v_strides}) {
      s[0] = c.Tq * row;
      s[1] = c.D;
      s[2] = row;
    }
  } else if (c.kv_cache) {
    // q [B, Tq, H, D] and one cache [B, Tk, 2, Hkv, D] holding k then v per position.
    const int64_t nq = c.B * c.Tq * c.H * c.D, row = 2 * c.Hkv * c.D;
    pr.qkv.resize(static_cast<size_t>(nq + c.B * c.Tk * row));
    for (T& x : pr.qkv) x = random();
    pr.q = pr.qkv.data();
    pr.k = pr.q + nq;
    pr.v = pr.k + c.Hkv * c.D;
    const int64_t q_strides[3] = {c.Tq * c.H * c.D, c.D, c.H * c.D};
    const int64_t kv_strides[3] = {c.Tk * row, c.D, row};
    std::copy(q_strides, q_strides + 3, p.q_strides);
    std::copy(kv_strides, kv_strides + 3, p.k_strides);
    std::copy(kv_strides, kv_strides + 3, p.v_strides);
  } else {
    const int64_t nq = c.B * c.H * c.Tq * c.D, nk = c.B * c.Hkv * c.Tk * c.D;
    pr.qkv.resize(static_cast<size_t>(nq + nk + c.B * c.Hkv * c.Tk * c.Dv));
    for (T& x : pr.qkv) x = random();
    pr.q = pr.qkv.data();
    pr.k = pr.q + nq;
    pr.v = pr.k + nk;
    const int64_t q_strides[3] = {c.H * c.Tq * c.D, c.Tq * c.D, c.D};
    const int64_t k_strides[3] = {c.Hkv * c.Tk * c.D, c.Tk * c.D, c.D};
    const int64_t v_strides[3] = {c.Hkv * c.Tk * c.Dv, c.Tk * c.Dv, c.Dv};
    std::copy(q_strides, q_strides + 3, p.q_strides);
    std::copy(k_strides, k_strides + 3, p.k_strides);
    std::copy(v_strides, v_strides + 3, p.v_strides);
  }
  pr.dout.resize(static_cast<size_t>(c.B * c.H * c.Tq * c.Dv));
  for (T& x : pr.dout) x = random();
  if (c.mask == MaskShape::none) {
    p.mask = MaskKind::none;
    return pr;
  }
  p.mask = std::is_same_v<M, bool> ? MaskKind::boolean : MaskKind::additive;
  int64_t rows = 1, planes = 1;  // planes: batches of [B, 1, Tq, Tk], heads of [1, H, Tq, Tk]
  if (c.mask == MaskShape::keys) {
    const int64_t strides[4] = {0, 0, 0, 1};
    std::copy(strides, strides + 4, p.mask_strides);
  } else {
    rows = c.Tq;
    planes = c.mask == MaskShape::batch_rows ? c.B : c.mask == MaskShape::head_rows ? c.H : 1;
    const int64_t plane = planes > 1 ? c.Tq * c.Tk : 0;
    const int64_t strides[4] = {c.mask == MaskShape::batch_rows ? plane : 0,
                                c.mask == MaskShape::head_rows ? plane : 0, c.Tk, 1};
    std::copy(strides, strides + 4, p.mask_strides);
  }
  const int64_t n = planes * rows * c.Tk;
  pr.mask.reset(new M[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t i = e / c.Tk % rows;
    const bool dead = std::find(c.dead_rows.begin(), c.dead_rows.end(), i) != c.dead_rows.end() &&
                      (c.mask == MaskShape::keys || e / (rows * c.Tk) == 0);  // plane 0 only
    const double u = unit(rng);
    if constexpr (std::is_same_v<M, bool>) {
      pr.mask[static_cast<size_t>(e)] = !dead && u < 0.8;
    } else {
      pr.mask[static_cast<size_t>(e)] = dead || u < 0.1 ? -std::numeric_limits<float>::infinity()
                                                        : static_cast<float>(u * 1.5 - 1);
    }
  }
  return pr;
}

/// What the kernels should write, in double from q, k, v, dout and the mask alone. A
/// gradient's terms can cancel to (near) 0 (with Tk = 1, P = 1 and dS = dout . v - dout . y = 0),
/// so each gradient's magnitude is also taken as the largest sum of its terms' absolute values
/// (dS's with |dP| + |delta|): f32's rounding is relative to that.
struct Expected {
  std::vector<double> y, lse, dq, dk, dv;
  double dq_terms = 0, dk_terms = 0, dv_terms = 0;
};

template <typename T>
double at(const T* base, const int64_t* strides, int64_t b, int64_t h, int64_t i, int64_t d) {
  return static_cast<float>(base[b * strides[0] + h * strides[1] + i * strides[2] + d]);
}

/// The scores of row i of head h of batch b: scaled, masked, causal-limited (-inf: not seen).
template <typename T, typename M>
std::vector<double> scores(const Problem<T, M>& pr, int64_t b, int64_t h, int64_t i) {
  const Params& p = pr.p;
  const int64_t hk = h / (p.heads / p.kv_heads);
  std::vector<double> s(static_cast<size_t>(p.kv_len));
  for (int64_t j = 0; j < p.kv_len; ++j) {
    if (p.causal && j > i + p.kv_len - p.q_len) {
      s[static_cast<size_t>(j)] = -kInf;
      continue;
    }
    double dot = 0;
    for (int64_t d = 0; d < p.head_dim; ++d)
      dot += at(pr.q, p.q_strides, b, h, i, d) * at(pr.k, p.k_strides, b, hk, j, d);
    double x = dot * p.scale;
    if (p.mask != MaskKind::none) {
      const M m = pr.mask[static_cast<size_t>(b * p.mask_strides[0] + h * p.mask_strides[1] +
                                              i * p.mask_strides[2] + j * p.mask_strides[3])];
      if constexpr (std::is_same_v<M, bool>) {
        if (!m) x = -kInf;
      } else {
        x += m;
      }
    }
    s[static_cast<size_t>(j)] = x;
  }
  return s;
}

/// The softmax of row i in place (s -> P) and its log-sum-exp; -inf (and P untouched) for a
/// row that sees no key.
double softmax_in_place(std::vector<double>& s) {
  double mx = -kInf;
  for (double x : s) mx = std::max(mx, x);
  if (mx == -kInf) return -kInf;
  double sum = 0;
  for (double x : s) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  for (double& x : s) x = std::exp(x - lse);
  return lse;
}

template <typename T, typename M>
Expected reference(const Problem<T, M>& pr) {
  const Params& p = pr.p;
  const int64_t B = p.batch, H = p.heads, Hkv = p.kv_heads, Tq = p.q_len, Tk = p.kv_len;
  const int64_t D = p.head_dim, Dv = p.value_dim;
  Expected e;
  e.y.assign(static_cast<size_t>(B * H * Tq * Dv), 0.0);
  e.lse.assign(static_cast<size_t>(B * H * Tq), 0.0);
  e.dq.assign(static_cast<size_t>(B * H * Tq * D), 0.0);
  e.dk.assign(static_cast<size_t>(B * Hkv * Tk * D), 0.0);
  e.dv.assign(static_cast<size_t>(B * Hkv * Tk * Dv), 0.0);
  std::vector<double> aq(e.dq.size()), ak(e.dk.size()), av(e.dv.size());  // sums of |terms|
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = (b * H + h) * Tq + i;
        std::vector<double> P = scores(pr, b, h, i);
        const double lse = softmax_in_place(P);
        e.lse[static_cast<size_t>(row)] = lse;
        if (lse == -kInf) {  // no key: y is NaN (zeros when Tk = 0), no gradient
          if (Tk > 0) std::fill_n(e.y.begin() + row * Dv, Dv, std::nan(""));
          continue;
        }
        double delta = 0;
        for (int64_t d = 0; d < Dv; ++d) {
          double y = 0;
          for (int64_t j = 0; j < Tk; ++j)
            y += P[static_cast<size_t>(j)] * at(pr.v, p.v_strides, b, hk, j, d);
          e.y[static_cast<size_t>(row * Dv + d)] = y;
          delta +=
              static_cast<double>(static_cast<float>(pr.dout[static_cast<size_t>(row * Dv + d)])) *
              y;
        }
        for (int64_t j = 0; j < Tk; ++j) {
          const double pj = P[static_cast<size_t>(j)];
          double dp = 0;
          for (int64_t d = 0; d < Dv; ++d)
            dp += static_cast<float>(pr.dout[static_cast<size_t>(row * Dv + d)]) *
                  at(pr.v, p.v_strides, b, hk, j, d);
          const double ds = pj * (dp - delta), ds_abs = pj * (std::abs(dp) + std::abs(delta));
          const int64_t key = (b * Hkv + hk) * Tk + j;
          for (int64_t d = 0; d < D; ++d) {
            const double kd = at(pr.k, p.k_strides, b, hk, j, d);
            const double qd = at(pr.q, p.q_strides, b, h, i, d);
            e.dq[static_cast<size_t>(row * D + d)] += p.scale * ds * kd;
            e.dk[static_cast<size_t>(key * D + d)] += p.scale * ds * qd;
            aq[static_cast<size_t>(row * D + d)] += p.scale * ds_abs * std::abs(kd);
            ak[static_cast<size_t>(key * D + d)] += p.scale * ds_abs * std::abs(qd);
          }
          for (int64_t d = 0; d < Dv; ++d) {
            const double g = static_cast<float>(pr.dout[static_cast<size_t>(row * Dv + d)]);
            e.dv[static_cast<size_t>(key * Dv + d)] += pj * g;
            av[static_cast<size_t>(key * Dv + d)] += pj * std::abs(g);
          }
        }
      }
    }
  }
  for (double x : aq) e.dq_terms = std::max(e.dq_terms, x);
  for (double x : ak) e.dk_terms = std::max(e.dk_terms, x);
  for (double x : av) e.dv_terms = std::max(e.dv_terms, x);
  return e;
}

/// The kernels' outputs: y (forward), lse, and the three gradients; y_with_lse and
/// lse_of_forward from one more forward call that writes the logsumexp too; dk_kv and dv_kv
/// from backward_kv (both gradients in one pass).
template <typename T>
struct Results {
  std::vector<T> y, dq, dk, dv, y_with_lse, dk_kv, dv_kv;
  std::vector<float> lse, lse_of_forward;
};

template <typename T, typename M>
Results<T> run_kernels(const Problem<T, M>& pr) {
  const Params& p = pr.p;
  const T sentinel(std::numeric_limits<float>::quiet_NaN());  // an element left unwritten shows
  Results<T> r;
  r.y.assign(static_cast<size_t>(p.batch * p.heads * p.q_len * p.value_dim), sentinel);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads * p.q_len), std::nanf(""));
  r.dq.assign(static_cast<size_t>(p.batch * p.heads * p.q_len * p.head_dim), sentinel);
  r.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.kv_len * p.head_dim), sentinel);
  r.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.kv_len * p.value_dim), sentinel);
  const M* m = pr.mask_ptr();
  forward(p, pr.q, pr.k, pr.v, m, r.y.data());
  logsumexp(p, pr.q, pr.k, m, r.lse.data());
  r.y_with_lse = r.y;
  r.lse_of_forward = r.lse;
  std::fill(r.y_with_lse.begin(), r.y_with_lse.end(), sentinel);
  std::fill(r.lse_of_forward.begin(), r.lse_of_forward.end(), std::nanf(""));
  forward(p, pr.q, pr.k, pr.v, m, r.y_with_lse.data(), r.lse_of_forward.data());
  backward(p, Grad::q, pr.q, pr.k, pr.v, r.y.data(), pr.dout.data(), r.lse.data(), m, r.dq.data());
  backward(p, Grad::k, pr.q, pr.k, pr.v, r.y.data(), pr.dout.data(), r.lse.data(), m, r.dk.data());
  // o is not read for Grad::v.
  backward(p, Grad::v, pr.q, pr.k, pr.v, static_cast<const T*>(nullptr), pr.dout.data(),
           r.lse.data(), m, r.dv.data());
  r.dk_kv.assign(r.dk.size(), sentinel);
  r.dv_kv.assign(r.dv.size(), sentinel);
  backward_kv(p, pr.q, pr.k, pr.v, r.y.data(), pr.dout.data(), r.lse.data(), m, r.dk_kv.data(),
              r.dv_kv.data());
  return r;
}

/// |got - want| <= rtol * (the largest |want| of the tensor, at least `floor`); NaN where want
/// is NaN, -inf where want is -inf. Returns the largest error relative to that magnitude.
template <typename T>
double expect_close(const char* name, const std::vector<T>& got, const std::vector<double>& want,
                    double rtol, double floor = 0) {
  EXPECT_EQ(got.size(), want.size()) << name;
  double mag = floor;
  for (double w : want)
    if (std::isfinite(w)) mag = std::max(mag, std::abs(w));
  double worst = 0;
  int failures = 0;
  for (size_t e = 0; e < std::min(got.size(), want.size()); ++e) {
    const double g = static_cast<float>(got[e]), w = want[e];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else if (std::isinf(w)) {
      ok = g == w;
    } else {
      const double err = std::abs(g - w);  // NaN fails
      ok = err <= rtol * mag;
      if (mag > 0 && err == err) worst = std::max(worst, err / mag);
    }
    if (!ok && ++failures <= 5)
      ADD_FAILURE() << name << "[" << e << "]: got " << g << ", want " << w << " (magnitude " << mag
                    << ")";
  }
  EXPECT_EQ(failures, 0) << name << ": elements out of tolerance";
  return worst;
}

/// Whether the forward cuts the call's keys into chunks (coil_attention.h, key_chunk).
bool forward_splits(const Params& p) {
  return detail::key_chunk(detail::forward_tasks(p, detail::decodes(p)), p.kv_len) < p.kv_len;
}

/// Runs the kernels on one case and checks every output against the double loops.
template <typename T, typename M>
void check_case(const Case& c, double rtol) {
  SCOPED_TRACE(describe(c));
  const Problem<T, M> pr = make_problem<T, M>(c);
  const Results<T> r = run_kernels(pr);
  const Expected e = reference(pr);
  expect_close("y", r.y, e.y, rtol);
  expect_close("lse", r.lse, e.lse, rtol, 1.0);
  // The forward's own logsumexp: its y is the same bits, and so is lse unless the keys were
  // split (then chunks combine in another order) or the decode path ran (its scores are sums
  // in another order): within the tolerance then.
  expect_close("lse of forward", r.lse_of_forward, e.lse, rtol, 1.0);
  EXPECT_EQ(0, std::memcmp(r.y.data(), r.y_with_lse.data(), r.y.size() * sizeof(T)))
      << "y differs when the forward writes lse too";
  if (!forward_splits(pr.p) && !detail::decodes(pr.p)) {
    EXPECT_EQ(0, std::memcmp(r.lse.data(), r.lse_of_forward.data(), r.lse.size() * sizeof(float)))
        << "the forward's lse differs from logsumexp's bits";
  }
  expect_close("dq", r.dq, e.dq, rtol, e.dq_terms);
  expect_close("dk", r.dk, e.dk, rtol, e.dk_terms);
  expect_close("dv", r.dv, e.dv, rtol, e.dv_terms);
  // backward_kv computes P and dS once for both: the same bits as the separate calls.
  EXPECT_EQ(0, std::memcmp(r.dk.data(), r.dk_kv.data(), r.dk.size() * sizeof(T)))
      << "backward_kv's dk differs from backward(Grad::k)";
  EXPECT_EQ(0, std::memcmp(r.dv.data(), r.dv_kv.data(), r.dv.size() * sizeof(T)))
      << "backward_kv's dv differs from backward(Grad::v)";
}

constexpr double kF32Tol = 1e-4;  // errors seen: under 3e-6 of the magnitude
// bf16/f16: inputs and the forward's o are rounded to T (delta is computed from that o), and
// each output is rounded once: half an ulp is up to 2^-8 (bf16) or 2^-11 (f16) of a value.
// Errors seen: 3.4e-3 (bf16) and 4.2e-4 (f16) of the magnitude in y, a third of that in the
// gradients.
constexpr double kBf16Tol = 1e-2;
constexpr double kF16Tol = 2e-3;

// Every (Tq, Tk) pair of {1, 7, 64, 127, 200} for one head dim: causal on every other pair
// (Tq > Tk among them: rows that see no key), grouped-query 2:1 on every third, Dv != D on every
// fourth.
class AttentionBackwardSizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionBackwardSizes, MatchDoubleLoops) {
  const int64_t d = GetParam();
  const int64_t lengths[] = {1, 7, 64, 127, 200};
  int n = 0;
  for (int64_t tq : lengths) {
    for (int64_t tk : lengths) {
      Case c{1, n % 3 == 0 ? 4 : 2, 2, tq, tk, d, n % 4 == 1 ? d + 7 : d};
      c.causal = n % 2 == 1;
      c.seed = static_cast<unsigned>(100 + n);
      check_case<float, float>(c, kF32Tol);
      ++n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionBackwardSizes, ::testing::Values(1, 16, 64, 80));

TEST(AttentionBackwardKernel, OddShapesGroupedQueryAndValueDims) {
  std::vector<Case> cases = {
      {3, 5, 5, 9, 13, 24, 40},         // odd B, H; Dv > D
      {2, 8, 2, 33, 70, 64, 32, true},  // GQA 4:1, Dv < D
      {1, 6, 1, 5, 200, 20, 100},       // multi-query
      {2, 3, 3, 100, 17, 8, 3, true},   // Tq > Tk: the first 83 rows see no key
      {1, 2, 2, 65, 65, 1, 1},          // D = Dv = 1
      {3, 4, 2, 129, 130, 72, 72, true},
  };
  cases[4].scale = 0.3f;
  cases[5].scale = 2.0f;  // inputs in [-1, 1]: scores up to 144, f32 exp still within 1e-4
  for (const Case& c : cases) check_case<float, float>(c, kF32Tol);
}

// Bool and float masks of [Tk], [Tq, Tk] and [B, 1, Tq, Tk], causal and not, with rows masked
// whole: their lse is -inf, their y NaN and their dq zero, and they give k and v nothing.
TEST(AttentionBackwardKernel, MasksOfBroadcastShapes) {
  for (MaskShape shape : {MaskShape::keys, MaskShape::rows, MaskShape::batch_rows}) {
    for (bool causal : {false, true}) {
      Case c{2, 4, 2, 37, 90, 32, 24, causal, shape};
      if (shape != MaskShape::keys) c.dead_rows = {0, 5, 36};
      c.seed = 7 + static_cast<unsigned>(shape) * 2 + causal;
      check_case<float, bool>(c, kF32Tol);
      check_case<float, float>(c, kF32Tol);
    }
  }
  // Every key masked: every lse -inf, every gradient zero.
  Case all{1, 2, 1, 20, 70, 16, 16, false, MaskShape::keys, {0}};
  for (bool causal : {false, true}) {
    all.causal = causal;
    SCOPED_TRACE(causal);
    const Problem<float, bool> pr = make_problem<float, bool>(all);
    const Results<float> r = run_kernels(pr);
    for (float l : r.lse) EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
    for (const std::vector<float>* g : {&r.dq, &r.dk, &r.dv})
      for (float x : *g) EXPECT_EQ(x, 0.0f);
    check_case<float, bool>(all, kF32Tol);
  }
  // A row masked whole: lse -inf, y NaN (as softmax of all -inf), dq zero.
  Case c{1, 2, 2, 40, 50, 16, 8, false, MaskShape::rows, {3}};
  Problem<float, float> pr = make_problem<float, float>(c);
  const Results<float> r = run_kernels(pr);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(r.lse[static_cast<size_t>(h * 40 + 3)], -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(r.y[static_cast<size_t>((h * 40 + 3) * 8)]));
    for (int64_t d = 0; d < 16; ++d)
      EXPECT_EQ(r.dq[static_cast<size_t>((h * 40 + 3) * 16 + d)], 0.0f);
  }
}

// Decoding shapes, where the forward splits the keys into chunks (few query blocks, long
// keys) and combines them: y and the forward's logsumexp against the double loops, with a
// causal row block, a bool mask with a row masked whole and 4:1 grouped-query heads.
TEST(AttentionBackwardKernel, ForwardWritesLogsumexpWhenItSplitsTheKeys) {
  std::vector<Case> cases = {
      {1, 2, 2, 1, 3000, 64, 64},
      {1, 4, 1, 3, 2100, 32, 48, true},
      {1, 2, 2, 5, 1500, 16, 16, false, MaskShape::rows, {2}},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(forward_splits(make_problem<float, float>(c).p))
        << describe(c) << " does not split";
    if (c.mask == MaskShape::none)
      check_case<float, float>(c, kF32Tol);
    else
      check_case<float, bool>(c, kF32Tol);
  }
}

/// y of the blocked path (detail::run_forward without the decode path) for a call that forward
/// sends down the decode path: the two paths within f32 rounding of each other.
template <typename T, typename M>
void expect_paths_agree(const Problem<T, M>& pr, const Results<T>& r, double rtol) {
  const Params& p = pr.p;
  std::vector<T> blocked(r.y.size());
  detail::run_forward(p, pr.q, pr.k, pr.v, pr.mask_ptr(), blocked.data(), nullptr,
                      /*decode=*/false);
  std::vector<double> want(blocked.size());
  for (size_t e = 0; e < want.size(); ++e) want[e] = static_cast<float>(blocked[e]);
  expect_close("y of the decode path against the blocked path's", r.y, want, rtol);
}

// Decoding shapes: the forward's decode path (coil_attention_decode.h: one task per (batch,
// kv head) for every query row of its group, K and V read in place) against the double loops
// and against the blocked path. Tq 1-4 x GQA 1:1, 4:1 and 8:1 x Tk {1, 7, 100, 1000, 5000},
// head dims 16, 64, 80 and 128 in turn, Dv != D, causal (bottom-right: with Tq > 1 the
// group's rows see different keys), split keys (few tasks, many keys) and not (B = 3).
TEST(AttentionBackwardKernel, DecodePathMatchesDoubleLoops) {
  const int64_t dims[] = {16, 64, 80, 128};
  int n = 0;
  for (int64_t tq : {1, 2, 3, 4}) {
    for (int64_t group : {1, 4, 8}) {
      for (int64_t tk : {1, 7, 100, 1000, 5000}) {
        const int64_t d = dims[n % 4], hkv = n % 5 == 2 ? 1 : 2;
        Case c{n % 7 == 3 ? 3 : 1, group * hkv, hkv, tq, tk, d, n % 3 == 1 ? d / 2 + 3 : d};
        c.causal = n % 2 == 1;
        c.seed = static_cast<unsigned>(300 + n);
        ++n;
        const Problem<float, float> pr = make_problem<float, float>(c);
        // The sizes alone pick the path: every group of at most kDecodeMaxRows rows decodes.
        EXPECT_EQ(detail::decodes(pr.p), group * tq <= detail::kDecodeMaxRows) << describe(c);
        check_case<float, float>(c, kF32Tol);
        if (detail::decodes(pr.p)) {
          SCOPED_TRACE(describe(c));
          expect_paths_agree(pr, run_kernels(pr), 1e-5);
        }
      }
    }
  }
  // Either side of the threshold: 32 rows of a group decode, 33 take the blocked path.
  for (const Case& c :
       {Case{1, 8, 1, 4, 300, 64, 64, true}, Case{1, 11, 1, 3, 300, 64, 64, true}}) {
    EXPECT_EQ(detail::decodes(make_problem<float, float>(c).p), c.H * c.Tq <= 32) << describe(c);
    check_case<float, float>(c, kF32Tol);
  }
}

// Masks at decoding shapes, bool and float, causal and not: [Tk] (padding), [Tq, Tk],
// [B, 1, Tq, Tk] and [1, H, Tq, Tk] (each head of a group its own keys), with a row that sees
// no key (NaN y, -inf lse) beside rows of the same group that see keys, split keys and not.
TEST(AttentionBackwardKernel, DecodePathMasks) {
  for (MaskShape shape :
       {MaskShape::keys, MaskShape::rows, MaskShape::batch_rows, MaskShape::head_rows}) {
    for (bool causal : {false, true}) {
      for (int64_t tk : {90, 2500}) {
        Case c{2, 8, 2, 2, tk, 64, 40, causal, shape};
        if (shape != MaskShape::keys) c.dead_rows = {1};
        c.seed = 40 + static_cast<unsigned>(shape) * 4 + causal * 2 + (tk > 100);
        ASSERT_TRUE(detail::decodes(make_problem<float, bool>(c).p));
        check_case<float, bool>(c, kF32Tol);
        check_case<float, float>(c, kF32Tol);
      }
    }
  }
  // Row 1 of head 0 masked whole ([1, H, Tq, Tk]): only that row of its group is NaN.
  Case c{1, 4, 1, 2, 3000, 32, 32, false, MaskShape::head_rows, {1}};
  const Problem<float, bool> pr = make_problem<float, bool>(c);
  const Results<float> r = run_kernels(pr);
  for (int64_t row = 0; row < 8; ++row) {
    EXPECT_EQ(std::isnan(r.y[static_cast<size_t>(row * 32)]), row == 1) << row;
    EXPECT_EQ(r.lse_of_forward[static_cast<size_t>(row)] == -std::numeric_limits<float>::infinity(),
              row == 1)
        << row;
  }
}

// bf16 and f16 K and V widened as they are loaded, the heads of one packed KV cache
// [B, Tk, 2, Hkv, D] (rows 2 Hkv D apart, k and v interleaved) with q [B, Tq, H, D], Tk = 0,
// and NaN: a NaN in one query row reaches that row only, a NaN key every row of its group.
TEST(AttentionBackwardKernel, DecodePathDtypesStridesAndEdges) {
  for (int64_t tk : {7, 1000, 4100}) {
    Case c{1, 8, 2, 1, tk, 128, 128, false};
    c.seed = 60 + static_cast<unsigned>(tk);
    check_case<bfloat16, float>(c, kBf16Tol);
    check_case<half, float>(c, kF16Tol);
    Case masked{2, 6, 3, 3, tk, 80, 80, true, MaskShape::rows, {0}};
    check_case<bfloat16, bool>(masked, kBf16Tol);
    Case cache{2, 12, 3, 2, tk, 64, 64, tk > 100};
    cache.kv_cache = true;
    check_case<float, float>(cache, kF32Tol);
    check_case<bfloat16, float>(cache, kBf16Tol);
    cache.mask = MaskShape::head_rows;
    cache.dead_rows = {0};
    check_case<half, bool>(cache, kF16Tol);
  }
  check_case<float, float>({2, 8, 2, 1, 0, 64, 64}, kF32Tol);       // Tk = 0: zeros
  check_case<float, float>({1, 4, 1, 3, 0, 16, 8, true}, kF32Tol);  // Tk = 0, causal
  check_case<float, float>({1, 4, 4, 1, 33, 0, 16}, kF32Tol);       // D = 0: uniform P
  const Case c{1, 4, 1, 2, 2000, 16, 16, false};
  Problem<float, float> pr = make_problem<float, float>(c);
  pr.qkv[static_cast<size_t>((2 * 2 + 1) * 16 + 5)] = std::nanf("");  // q row 1 of head 2
  Results<float> r = run_kernels(pr);
  for (int64_t row = 0; row < 8; ++row)
    EXPECT_EQ(std::isnan(r.y[static_cast<size_t>(row * 16)]), row == 5) << row;
  pr.qkv[static_cast<size_t>((2 * 2 + 1) * 16 + 5)] = 0.5f;
  pr.qkv[static_cast<size_t>(4 * 2 * 16 + 1500 * 16 + 3)] = std::nanf("");  // key 1500
  r = run_kernels(pr);
  for (float y : r.y) EXPECT_TRUE(std::isnan(y));
}

TEST(AttentionBackwardKernel, EmptySizes) {
  // Tk = 0: lse -inf, y and dq zeros, dk and dv empty.
  {
    const Case c{2, 3, 3, 5, 0, 8, 4, false};
    check_case<float, float>(c, kF32Tol);
    Case causal = c;
    causal.causal = true;
    check_case<float, float>(causal, kF32Tol);
    const Results<float> r = run_kernels(make_problem<float, float>(c));
    for (float l : r.lse) EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
    for (float x : r.dq) EXPECT_EQ(x, 0.0f);
  }
  // Tq = 0: dk and dv zeros.
  {
    const Case c{2, 4, 2, 0, 9, 8, 4, true};
    check_case<float, float>(c, kF32Tol);
    const Results<float> r = run_kernels(make_problem<float, float>(c));
    ASSERT_EQ(r.dk.size(), 2u * 2 * 9 * 8);
    for (float x : r.dk) EXPECT_EQ(x, 0.0f);
    for (float x : r.dv) EXPECT_EQ(x, 0.0f);
  }
  check_case<float, float>({0, 2, 2, 5, 6, 8, 8}, kF32Tol);   // B = 0
  check_case<float, float>({2, 0, 1, 5, 6, 8, 8}, kF32Tol);   // H = 0 (dk, dv zeros)
  check_case<float, float>({1, 2, 2, 9, 11, 0, 8}, kF32Tol);  // D = 0: uniform P
  check_case<float, float>({1, 2, 1, 9, 11, 8, 0}, kF32Tol);  // Dv = 0: dq, dk zeros
  check_case<float, bool>({1, 2, 2, 9, 11, 0, 0, true, MaskShape::rows}, kF32Tol);
}

TEST(AttentionBackwardKernel, LowPrecisionComputesInF32) {
  Case c{2, 4, 2, 70, 130, 64, 48, true};
  check_case<bfloat16, float>(c, kBf16Tol);
  check_case<half, float>(c, kF16Tol);
  Case masked{1, 3, 3, 50, 200, 80, 80, false, MaskShape::rows, {4}};
  check_case<bfloat16, bool>(masked, kBf16Tol);
  check_case<half, bool>(masked, kF16Tol);
}

// q, k and v are heads of one [B, T, 3, H, D] buffer (torch's packed in-projection): (batch,
// head) strides that are not the contiguous ones, rows 3 * H * D apart.
TEST(AttentionBackwardKernel, StridedHeadsOfAPackedBuffer) {
  Case c{3, 5, 5, 77, 77, 24, 24, true};
  c.packed = true;
  check_case<float, float>(c, kF32Tol);
  c.causal = false;
  c.mask = MaskShape::batch_rows;
  c.dead_rows = {10};
  check_case<float, bool>(c, kF32Tol);
  check_case<bfloat16, bool>(c, kBf16Tol);
}

// NaN in an input reaches the outputs it feeds (no filtering); only a row that sees no key is
// left out on purpose.
TEST(AttentionBackwardKernel, NanPropagates) {
  const Case c{1, 1, 1, 16, 80, 8, 8, false};
  Problem<float, float> pr = make_problem<float, float>(c);
  pr.qkv[3 * 8 + 2] = std::nanf("");  // row 3 of q (q is first in qkv)
  const Results<float> r = run_kernels(pr);
  EXPECT_TRUE(std::isnan(r.lse[3]));
  EXPECT_TRUE(std::isfinite(r.lse[4]));
  EXPECT_TRUE(std::isnan(r.dq[3 * 8]));
  EXPECT_TRUE(std::isfinite(r.dq[4 * 8]));
  EXPECT_TRUE(std::isnan(r.dk[0]));  // every key's dS takes row 3
  EXPECT_TRUE(std::isnan(r.dv[0]));
}

// A row that sees no key (lse = -inf) is left out on purpose: NaN in its q or dout, or inf in a
// key it cannot see, gives it a zero dq and gives dk and dv nothing (its y, and so delta, is
// NaN anyway). A row that sees keys still takes 0 * inf = NaN from a masked key's inf.
TEST(AttentionBackwardKernel, RowsThatSeeNoKeyAreLeftOut) {
  const int64_t Tq = 20, Tk = 30, D = 8;
  const Case c{1, 2, 1, Tq, Tk, D, D, false, MaskShape::rows, {3}};
  Problem<float, bool> pr = make_problem<float, bool>(c);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < D; ++d) {
      pr.qkv[static_cast<size_t>((h * Tq + 3) * D + d)] = std::nanf("");  // q is first in qkv
      pr.dout[static_cast<size_t>((h * Tq + 3) * D + d)] = std::nanf("");
    }
  }
  {
    const Results<float> r = run_kernels(pr);
    const Expected e = reference(pr);
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(r.lse[static_cast<size_t>(h * Tq + 3)], -std::numeric_limits<float>::infinity());
      for (int64_t d = 0; d < D; ++d)
        EXPECT_EQ(r.dq[static_cast<size_t>((h * Tq + 3) * D + d)], 0.0f);
    }
    expect_close("dq", r.dq, e.dq, kF32Tol, e.dq_terms);
    expect_close("dk", r.dk, e.dk, kF32Tol, e.dk_terms);
    expect_close("dv", r.dv, e.dv, kF32Tol, e.dv_terms);
  }
  // Key 5 masked for every row and infinite.
  for (int64_t i = 0; i < Tq; ++i) pr.mask[static_cast<size_t>(i * Tk + 5)] = false;
  pr.qkv[static_cast<size_t>(2 * Tq * D + 5 * D)] = std::numeric_limits<float>::infinity();
  const Results<float> r = run_kernels(pr);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(r.dq[static_cast<size_t>((h * Tq + 3) * D + d)], 0.0f);
    EXPECT_TRUE(std::isnan(r.dq[static_cast<size_t>((h * Tq + 4) * D)]));
    EXPECT_TRUE(std::isfinite(r.dq[static_cast<size_t>((h * Tq + 4) * D + 1)]));
  }
}

// Each output row is computed by one thread in a fixed order: 1 and 2 threads give the same
// bits, on the blocked path and on the decode path, whose cut of the keys depends on the sizes
// only (split keys: 8:1 GQA in one batch; not split: B x Hkv = 32 tasks).
TEST(AttentionBackwardKernel, ThreadCountInvariant) {
  for (const Case& c : {Case{2, 4, 2, 200, 150, 64, 40, true, MaskShape::rows, {3}},
                        Case{1, 16, 2, 1, 5000, 64, 64, false, MaskShape::head_rows, {0}},
                        Case{16, 4, 2, 2, 700, 80, 48, true, MaskShape::batch_rows}}) {
    SCOPED_TRACE(describe(c));
    const Problem<float, float> pr = make_problem<float, float>(c);
    EXPECT_EQ(detail::decodes(pr.p), c.Tq < 64);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Results<float> one = run_kernels(pr);
    omp_set_num_threads(2);
    const Results<float> two = run_kernels(pr);
    omp_set_num_threads(threads);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(one.y, two.y));
    EXPECT_TRUE(same(one.lse, two.lse));
    EXPECT_TRUE(same(one.lse_of_forward, two.lse_of_forward));
    EXPECT_TRUE(same(one.dq, two.dq));
    EXPECT_TRUE(same(one.dk, two.dk));
    EXPECT_TRUE(same(one.dv, two.dv));
  }
}

// T = 4096 (a [T, T] f32 score matrix would be 64 MiB per head): the kernels run in blocks;
// rows 0, T/2, T-1 of dq and keys 0, T/2, T-1 of dk and dv of head 1 against double loops
// (which need every row's lse and output of that head: one pass over its causal scores).
TEST(AttentionBackwardKernel, LongSequenceRunsInLinearMemory) {
  const int64_t T = 4096, H = 2, D = 64;
  Case c{1, H, H, T, T, D, D, true};
  c.seed = 3;
  const Problem<float, float> pr = make_problem<float, float>(c);
  const Results<float> r = run_kernels(pr);
  const Params& p = pr.p;
  const int64_t h = 1;
  const int64_t picks[] = {0, T / 2, T - 1};
  std::vector<double> lse(T);
  std::vector<std::vector<double>> dq(3, std::vector<double>(D)), dk = dq, dv = dq;
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> P = scores(pr, 0, h, i);
    lse[static_cast<size_t>(i)] = softmax_in_place(P);
    const float* dout = pr.dout.data() + (h * T + i) * D;
    double dl = 0;
    for (int64_t d = 0; d < D; ++d) {
      double y = 0;
      for (int64_t j = 0; j <= i; ++j)
        y += P[static_cast<size_t>(j)] * at(pr.v, p.v_strides, 0, h, j, d);
      dl += dout[d] * y;
    }
    for (int pick = 0; pick < 3; ++pick) {
      auto ds = [&](int64_t j, double* pj) {
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += dout[d] * at(pr.v, p.v_strides, 0, h, j, d);
        *pj = P[static_cast<size_t>(j)];
        return *pj * (dp - dl);
      };
      double pj;
      if (i == picks[pick])
        for (int64_t j = 0; j <= i; ++j) {
          const double s = ds(j, &pj);
          for (int64_t d = 0; d < D; ++d)
            dq[pick][d] += p.scale * s * at(pr.k, p.k_strides, 0, h, j, d);
        }
      const int64_t j = picks[pick];
      if (j <= i) {
        const double s = ds(j, &pj);
        for (int64_t d = 0; d < D; ++d) {
          dk[pick][d] += p.scale * s * at(pr.q, p.q_strides, 0, h, i, d);
          dv[pick][d] += pj * dout[d];
        }
      }
    }
  }
  auto rows_of = [&](const std::vector<float>& g) {
    std::vector<float> out;
    for (int64_t i : picks)
      out.insert(out.end(), g.begin() + (h * T + i) * D, g.begin() + (h * T + i + 1) * D);
    return out;
  };
  auto flat = [](const std::vector<std::vector<double>>& g) {
    std::vector<double> out;
    for (const auto& row : g) out.insert(out.end(), row.begin(), row.end());
    return out;
  };
  std::vector<double> want_lse;
  std::vector<float> got_lse;
  for (int64_t i : picks) {
    want_lse.push_back(lse[static_cast<size_t>(i)]);
    got_lse.push_back(r.lse[static_cast<size_t>(h * T + i)]);
  }
  expect_close("lse", got_lse, want_lse, kF32Tol, 1.0);
  expect_close("dq", rows_of(r.dq), flat(dq), kF32Tol);
  expect_close("dk", rows_of(r.dk), flat(dk), kF32Tol);
  expect_close("dv", rows_of(r.dv), flat(dv), kF32Tol);
}

}  // namespace
}  // namespace coil::attention

// Reference kernel of attention: the written-out pattern, in double, one row of scores at a
// time. scores = (q @ k^T) * scale; a bool mask turns the scores it marks false into -inf, a
// floating mask is added to them; causal turns key j > i + Tk - Tq into -inf (bottom-right
// aligned); softmax over the keys exactly as ref_softmax computes it; then @ v. A row whose
// scores are all -inf is what softmax of all -inf is here: exp(-inf - -inf) = NaN, so the row
// of the result is NaN (as torch's written-out pattern gives). With no keys (Tk = 0) the
// product sums nothing: zeros.
#include <cmath>
#include <limits>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {

namespace {

/// The sizes and operands of attention and its backward ops in double, and each row's scores.
struct AttentionProblem {
  int64_t B, H, Tq, D, Hkv, Tk, group;
  double scale;
  bool causal, has_mask = false, bool_mask = false;
  std::vector<double> q, k, mask;
  std::vector<int64_t> mask_strides;

  /// q and k are in[0] and in[1]; the mask is in[mask_at] when there is one.
  AttentionProblem(const Node& node, const std::vector<Tensor>& in, size_t mask_at) {
    const std::vector<int64_t>&qs = in[0].shape(), &ks = in[1].shape();
    B = qs[0], H = qs[1], Tq = qs[2], D = qs[3], Hkv = ks[1], Tk = ks[2];
    group = Hkv > 0 ? H / Hkv : 1;
    const std::string op(node.op->name);
    scale = node.attrs.get_float_or(op, "scale", 1.0 / std::sqrt(double(D)));
    causal = node.attrs.get_bool_or(op, "causal", false);
    q = ref::read_doubles(in[0]);
    k = ref::read_doubles(in[1]);
    if (in.size() > mask_at) {
      has_mask = true;
      bool_mask = in[mask_at].dtype() == DType::Bool;
      mask = ref::read_doubles(in[mask_at]);
      mask_strides = ref::broadcast_strides(in[mask_at].shape(), {B, H, Tq, Tk});
    }
  }
  const double* q_row(int64_t b, int64_t h, int64_t i) const {
    return &q[static_cast<size_t>(((b * H + h) * Tq + i) * D)];
  }
  const double* k_row(int64_t b, int64_t h, int64_t j) const {
    return &k[static_cast<size_t>(((b * Hkv + h / group) * Tk + j) * D)];
  }
  /// s[j] = the scaled, masked, causal-limited score of query i against key j.
  void scores(int64_t b, int64_t h, int64_t i, std::vector<double>& s) const {
    const double inf = std::numeric_limits<double>::infinity();
    s.resize(static_cast<size_t>(Tk));
    const double* qi = q_row(b, h, i);
    for (int64_t j = 0; j < Tk; ++j) {
      const double* kj = k_row(b, h, j);
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
      double x = dot * scale;
      if (has_mask) {
        double m = mask[static_cast<size_t>(b * mask_strides[0] + h * mask_strides[1] +
                                            i * mask_strides[2] + j * mask_strides[3])];
        x = bool_mask ? (m != 0 ? x : -inf) : x + m;
      }
      if (causal && j > i + Tk - Tq) x = -inf;
      s[static_cast<size_t>(j)] = x;
    }
  }
};

/// The NaN-propagating max of a row, as ref_softmax takes it.
double row_max(const std::vector<double>& s) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double x : s) mx = std::isnan(mx) || std::isnan(x) ? mx + x : std::max(mx, x);
  return mx;
}

}  // namespace

Tensor ref_attention(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const AttentionProblem a(node, in, 3);
  const int64_t Dv = in[2].shape()[3];
  const std::vector<double> v = ref::read_doubles(in[2]);
  Tensor out = Tensor::empty(node.type.dtype, {a.B, a.H, a.Tq, Dv});
  std::vector<double> s, y(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.H; ++h) {
      for (int64_t i = 0; i < a.Tq; ++i) {
        a.scores(b, h, i, s);
        // softmax as ref_softmax: NaN-propagating max, exp(x - max) / sum.
        const double mx = row_max(s);
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        std::fill(y.begin(), y.end(), 0.0);
        for (int64_t j = 0; j < a.Tk; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
          const double* vj = &v[static_cast<size_t>(((b * a.Hkv + h / a.group) * a.Tk + j) * Dv)];
          for (int64_t d = 0; d < Dv; ++d) y[static_cast<size_t>(d)] += p * vj[d];
        }
        for (int64_t d = 0; d < Dv; ++d)
          ref::set_double(out, ((b * a.H + h) * a.Tq + i) * Dv + d, y[static_cast<size_t>(d)]);
      }
    }
  }
  return out;
}

// lse = log(sum_j exp(s_j)) per row, through the row's max; -inf for a row that sees no key.
Tensor ref_attention_lse(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const AttentionProblem a(node, in, 2);
  Tensor out = Tensor::empty(node.type.dtype, {a.B, a.H, a.Tq});
  std::vector<double> s;
  for (int64_t r = 0; r < a.B * a.H * a.Tq; ++r) {
    a.scores(r / (a.H * a.Tq), r / a.Tq % a.H, r % a.Tq, s);
    const double mx = row_max(s);
    double lse = mx;
    if (mx != -std::numeric_limits<double>::infinity()) {
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      lse = mx + std::log(sum);
    }
    ref::set_double(out, r, lse);
  }
  return out;
}

// The gradient of attention with respect to q, k or v, from the given out (o), grad_out (dO)
// and lse: P = exp(s - lse) (0 on a row whose lse is -inf), delta = rowsum(dO * o),
// dS = P * (dO v^T - delta); dq = scale * dS k, dk = scale * dS^T q, dv = P^T dO (k and v
// summed over the query heads of their group).
Tensor ref_attention_grad(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const AttentionProblem a(node, in, 6);
  const int64_t Dv = in[2].shape()[3];
  const std::string wrt = node.attrs.get_string("attention_grad", "wrt");
  const std::vector<double> v = ref::read_doubles(in[2]), o = ref::read_doubles(in[3]),
                            dout = ref::read_doubles(in[4]), lse = ref::read_doubles(in[5]);
  const std::vector<int64_t>& shape = in[wrt == "q" ? 0 : wrt == "k" ? 1 : 2].shape();
  std::vector<double> grad(static_cast<size_t>(shape_numel(shape)), 0.0);
  std::vector<double> s;
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t hk = h / a.group;
      for (int64_t i = 0; i < a.Tq; ++i) {
        const int64_t row = (b * a.H + h) * a.Tq + i;
        const double l = lse[static_cast<size_t>(row)];
        if (l == -std::numeric_limits<double>::infinity()) continue;  // P = 0
        a.scores(b, h, i, s);
        const double* doi = &dout[static_cast<size_t>(row * Dv)];
        double delta = 0;
        for (int64_t d = 0; d < Dv; ++d) delta += doi[d] * o[static_cast<size_t>(row * Dv + d)];
        for (int64_t j = 0; j < a.Tk; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - l);
          const double* vj = &v[static_cast<size_t>(((b * a.Hkv + hk) * a.Tk + j) * Dv)];
          const int64_t kv_row = (b * a.Hkv + hk) * a.Tk + j;
          if (wrt == "v") {
            for (int64_t d = 0; d < Dv; ++d)
              grad[static_cast<size_t>(kv_row * Dv + d)] += p * doi[d];
            continue;
          }
          double dp = 0;
          for (int64_t d = 0; d < Dv; ++d) dp += doi[d] * vj[d];
          const double ds = p * (dp - delta) * a.scale;
          if (wrt == "q") {
            const double* kj = a.k_row(b, h, j);
            for (int64_t d = 0; d < a.D; ++d)
              grad[static_cast<size_t>(row * a.D + d)] += ds * kj[d];
          } else {
            const double* qi = a.q_row(b, h, i);
            for (int64_t d = 0; d < a.D; ++d)
              grad[static_cast<size_t>(kv_row * a.D + d)] += ds * qi[d];
          }
        }
      }
    }
  }
  Tensor out = Tensor::empty(node.type.dtype, shape);
  for (size_t e = 0; e < grad.size(); ++e) ref::set_double(out, static_cast<int64_t>(e), grad[e]);
  return out;
}

}  // namespace coil

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

Tensor ref_attention(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  using Sizes = std::vector<int64_t>;
  const Sizes &qs = in[0].shape(), &ks = in[1].shape(), &vs = in[2].shape();
  const int64_t B = qs[0], H = qs[1], Tq = qs[2], D = qs[3];
  const int64_t Hkv = ks[1], Tk = ks[2], Dv = vs[3];
  const int64_t group = Hkv > 0 ? H / Hkv : 1;
  const double scale = node.attrs.get_float_or("attention", "scale", 1.0 / std::sqrt(double(D)));
  const bool causal = node.attrs.get_bool_or("attention", "causal", false);
  const std::vector<double> q = ref::read_doubles(in[0]), k = ref::read_doubles(in[1]),
                            v = ref::read_doubles(in[2]);
  const bool has_mask = in.size() > 3;
  const bool bool_mask = has_mask && in[3].dtype() == DType::Bool;
  std::vector<double> mask;
  Sizes mask_strides;
  if (has_mask) {
    mask = ref::read_doubles(in[3]);
    mask_strides = ref::broadcast_strides(in[3].shape(), {B, H, Tq, Tk});
  }
  const double inf = std::numeric_limits<double>::infinity();
  Tensor out = Tensor::empty(node.type.dtype, {B, H, Tq, Dv});
  std::vector<double> s(static_cast<size_t>(Tk)), y(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < Tq; ++i) {
        const double* qi = &q[static_cast<size_t>(((b * H + h) * Tq + i) * D)];
        for (int64_t j = 0; j < Tk; ++j) {
          const double* kj = &k[static_cast<size_t>(((b * Hkv + hk) * Tk + j) * D)];
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
        // softmax as ref_softmax: NaN-propagating max, exp(x - max) / sum.
        double mx = -inf;
        for (double x : s) mx = std::isnan(mx) || std::isnan(x) ? mx + x : std::max(mx, x);
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        std::fill(y.begin(), y.end(), 0.0);
        for (int64_t j = 0; j < Tk; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
          const double* vj = &v[static_cast<size_t>(((b * Hkv + hk) * Tk + j) * Dv)];
          for (int64_t d = 0; d < Dv; ++d) y[static_cast<size_t>(d)] += p * vj[d];
        }
        for (int64_t d = 0; d < Dv; ++d)
          ref::set_double(out, ((b * H + h) * Tq + i) * Dv + d, y[static_cast<size_t>(d)]);
      }
    }
  }
  return out;
}

}  // namespace coil

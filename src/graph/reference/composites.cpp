// Reference kernels of the composite ops: softmax, log_softmax, layer_norm, rms_norm.
// Computed directly in double (not through their decompositions), so that tests of the
// decompositions compare against an independent formula.
#include <cmath>
#include <limits>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b);
}

}  // namespace

Tensor ref_softmax(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Tensor& x = in[0];
  std::string_view op = node.op_name();
  bool log = op == "log_softmax";
  COIL_ASSERT(log || op == "softmax", "ref_softmax on {}", op);
  const std::vector<int64_t>& s = x.shape();
  int64_t axis = normalize_axis(op, node.attrs.get_int_or(op, "axis", -1), x.dim());
  // Element (o, j, i) sits at (o * n + j) * inner + i; a scalar is one row of one element.
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    int64_t size = s[static_cast<size_t>(d)];
    (d < axis ? outer : d == axis ? n : inner) *= size;
  }
  std::vector<double> v = ref::read_doubles(x);
  Tensor out = Tensor::empty(node.type.dtype, s);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * n + j) * inner + i); };
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) m = nan_max(m, v[at(j)]);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(v[at(j)] - m);
      for (int64_t j = 0; j < n; ++j) {
        double shifted = v[at(j)] - m;
        double y = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
        ref::set_double(out, static_cast<int64_t>(at(j)), y);
      }
    }
  }
  return out;
}

namespace {

// The rows of a normalization: the last `dims` dims of x form one row.
struct NormRows {
  int64_t rows = 0, width = 1;
};

NormRows norm_rows(const Node& node, const Tensor& x) {
  int64_t k = node.attrs.get_int_or(node.op_name(), "dims", 1);
  NormRows r;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) r.width *= x.shape()[static_cast<size_t>(d)];
  r.rows = r.width == 0 ? 0 : x.numel() / r.width;
  return r;
}

}  // namespace

Tensor ref_layer_norm(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Tensor& x = in[0];
  double eps = node.attrs.get_float_or("layer_norm", "eps", 1e-5);
  NormRows r = norm_rows(node, x);
  std::vector<double> v = ref::read_doubles(x);
  std::vector<double> w = in.size() > 1 ? ref::read_doubles(in[1]) : std::vector<double>();
  std::vector<double> b = in.size() > 2 ? ref::read_doubles(in[2]) : std::vector<double>();
  Tensor out = Tensor::empty(node.type.dtype, x.shape());
  auto width = static_cast<double>(r.width);
  for (int64_t row = 0; row < r.rows; ++row) {
    auto at = [&](int64_t j) { return static_cast<size_t>(row * r.width + j); };
    double mean = 0;
    for (int64_t j = 0; j < r.width; ++j) mean += v[at(j)];
    mean /= width;
    double var = 0;  // biased, two-pass
    for (int64_t j = 0; j < r.width; ++j) var += (v[at(j)] - mean) * (v[at(j)] - mean);
    var /= width;
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < r.width; ++j) {
      double y = (v[at(j)] - mean) * rstd;
      if (!w.empty()) y *= w[static_cast<size_t>(j)];
      if (!b.empty()) y += b[static_cast<size_t>(j)];
      ref::set_double(out, static_cast<int64_t>(at(j)), y);
    }
  }
  return out;
}

Tensor ref_rms_norm(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Tensor& x = in[0];
  double eps = node.attrs.get_float_or("rms_norm", "eps", 1e-6);
  NormRows r = norm_rows(node, x);
  std::vector<double> v = ref::read_doubles(x);
  std::vector<double> w = in.size() > 1 ? ref::read_doubles(in[1]) : std::vector<double>();
  Tensor out = Tensor::empty(node.type.dtype, x.shape());
  for (int64_t row = 0; row < r.rows; ++row) {
    auto at = [&](int64_t j) { return static_cast<size_t>(row * r.width + j); };
    double ms = 0;
    for (int64_t j = 0; j < r.width; ++j) ms += v[at(j)] * v[at(j)];
    ms /= static_cast<double>(r.width);
    double denom = std::sqrt(ms + eps);
    for (int64_t j = 0; j < r.width; ++j) {
      double y = v[at(j)] / denom;
      if (!w.empty()) y *= w[static_cast<size_t>(j)];
      ref::set_double(out, static_cast<int64_t>(at(j)), y);
    }
  }
  return out;
}

}  // namespace coil

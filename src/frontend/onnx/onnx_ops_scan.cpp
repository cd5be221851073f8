// Ops along one axis that coil has no loop for, as comparisons of every pair of positions along
// it (memory: the input times the axis length): CumSum (a masked sum over the positions before
// each one) and TopK (each element's rank among its axis, then a one-hot pick by rank). Both
// are exact: a position the mask excludes contributes a selected 0, never a product with 0.
// Also the window functions (HannWindow, HammingWindow, BlackmanWindow) and MelWeightMatrix,
// constants.
#include <cmath>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxPairs = int64_t{1} << 28;  // elements of the pairwise tensor

// Dim `axis` of x, static, and the pairwise tensor's size checked.
int64_t pair_dim(OnnxNode& n, int x, int64_t axis) {
  std::vector<int64_t> s = n.static_shape(x, "the input");
  int64_t d = s[static_cast<size_t>(axis)], total = 1;
  for (int64_t v : s) total *= v;
  if (d > 0 && total > kMaxPairs / d)
    unsupported(
        "an axis of {} elements in a tensor of {} (pairwise comparisons of more than "
        "2^28 elements)",
        d, total);
  return d;
}

}  // namespace

void map_cumsum(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r == 0) n.error("the input must have at least one dim");
  std::vector<int64_t> a = n.const_ints(1, "axis");
  if (a.size() != 1) n.error("axis must have one element, got {}", a.size());
  int64_t axis = n.axis(a[0], r);
  bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  int64_t d = pair_dim(n, x, axis);
  // out[j] = sum over i of x[i] where i <= j (i < j exclusive; >=, > reverse); j at `axis`, i
  // at axis + 1.
  int j = iota_along(n, d, axis, r + 1), i = iota_along(n, d, axis + 1, r + 1);
  const char* cmp = reverse ? (exclusive ? "gt" : "ge") : (exclusive ? "lt" : "le");
  int mask = n.add(cmp, {i, j});
  int v = n.add("unsqueeze", {x}, Attrs{{"dim", axis}});
  int sum = reduce(n, "sum", n.add("where", {mask, v, n.scalar(0, n.dtype(x))}), {axis + 1}, false);
  n.set_output(0, n.cast(sum, n.dtype(x)));
}

void map_topk(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r == 0) n.error("the input must have at least one dim");
  int64_t axis = n.axis(n.attr_int("axis", -1), r);
  int64_t k = 0;
  if (n.opset() < 10) {
    k = n.attr_int("k", -1);
  } else {
    std::vector<int64_t> kv = n.const_ints(1, "K");
    if (kv.size() != 1) n.error("K must have one element, got {}", kv.size());
    k = kv[0];
  }
  bool largest = n.attr_int("largest", 1) != 0;
  n.attr_int("sorted", 1);  // sorted=0 leaves the order open: the sorted one is a valid choice
  int64_t d = pair_dim(n, x, axis);
  if (k < 0 || k > d) n.error("K = {} is outside [0, {}] (the size of axis {})", k, d, axis);
  DType t = n.dtype(x);
  // before[.., i, j, ..] (i at axis, j at axis + 1): element j comes before element i: it is
  // greater (smaller), or equal with a lower index. NaN counts as greater than any number (as
  // torch.topk), and NaNs as equal to each other.
  int xi = n.add("unsqueeze", {x}, Attrs{{"dim", axis + 1}});
  int xj = n.add("unsqueeze", {x}, Attrs{{"dim", axis}});
  int gt = n.add(largest ? "gt" : "lt", {xj, xi});
  int eq = n.add("eq", {xj, xi});
  if (is_floating(t)) {
    int ni = n.add("isnan", {xi}), nj = n.add("isnan", {xj});
    int nan_first = largest ? n.add("logical_and", {nj, n.add("logical_not", {ni})})
                            : n.add("logical_and", {ni, n.add("logical_not", {nj})});
    gt = n.add("logical_or", {gt, nan_first});
    eq = n.add("logical_or", {eq, n.add("logical_and", {ni, nj})});
  }
  int pi = iota_along(n, d, axis, r + 1), pj = iota_along(n, d, axis + 1, r + 1);
  int before = n.add("logical_or", {gt, n.add("logical_and", {eq, n.add("lt", {pj, pi})})});
  int rank = reduce(n, "sum", n.cast(before, DType::I64), {axis + 1}, false);  // distinct ranks
  // hit[.., t, i, ..]: element i has rank t (t at axis, i at axis + 1).
  int hit = n.add(
      "eq", {n.add("unsqueeze", {rank}, Attrs{{"dim", axis}}), iota_along(n, k, axis, r + 1)});
  int values = reduce(n, "sum", n.add("where", {hit, xj, n.scalar(0, t)}), {axis + 1}, false);
  int idx = reduce(n, "sum", n.add("where", {hit, pj, n.scalar(0, DType::I64)}), {axis + 1}, false);
  n.set_output(0, n.cast(values, t));
  n.set_output(1, idx);
}

void map_window(OnnxNode& n) {
  int64_t size = n.const_int_scalar(0, "size");
  if (size < 0) n.error("size {} is negative", size);
  if (size > kFoldLimit * 256) unsupported("a window of {} elements (at most 2^24)", size);
  auto ot = static_cast<int32_t>(n.attr_int("output_datatype", 1));
  std::optional<DType> t = dtype_from_onnx(ot);
  if (!t) unsupported("output_datatype {}", onnx_dtype_name(ot));
  bool periodic = n.attr_int("periodic", 1) != 0;
  // ONNX's formulas: w[i] = a0 - a1 cos(2 pi i / N) (+ a2 cos(4 pi i / N)), N = size when
  // periodic, else size - 1. Computed in double, then converted once.
  const std::string& op = n.op_type();
  double a0 = 0.5, a1 = 0.5, a2 = 0;
  if (op == "HammingWindow") a0 = 25.0 / 46.0, a1 = 1 - a0;
  if (op == "BlackmanWindow") a0 = 0.42, a1 = 0.5, a2 = 0.08;
  auto denom = static_cast<double>(periodic ? size : size - 1);
  constexpr double kPi = 3.14159265358979323846;
  Tensor w = Tensor::empty(*t, {size});
  for (int64_t i = 0; i < size; ++i) {
    double phase = denom > 0 ? 2 * kPi * static_cast<double>(i) / denom : 0.0;
    w.set_from_double(i, a0 - a1 * std::cos(phase) + a2 * std::cos(2 * phase));
  }
  n.set_output(0, n.add_constant(w));
}

// MelWeightMatrix (opset 17): a constant [dft_length / 2 + 1, num_mel_bins] of triangular
// filters, computed at import as ONNX's reference does: the band edges are num_mel_bins + 2
// points evenly spaced on the mel scale (mel(f) = 2595 log10(1 + f / 700)) from lower_edge_hertz
// to upper_edge_hertz (the step is the range over num_mel_bins + 2, as the reference has it),
// mapped back to hertz and to the spectrogram bin floor((dft_length + 1) * f / sample_rate); the
// mel edges in f32 and the rest in double, as numpy computes the reference.
void map_mel_weight_matrix(OnnxNode& n) {
  int64_t bins = n.const_int_scalar(0, "num_mel_bins");
  int64_t dft = n.const_int_scalar(1, "dft_length");
  int64_t rate = n.const_int_scalar(2, "sample_rate");
  auto lower = static_cast<float>(n.const_scalar(3, "lower_edge_hertz"));
  auto upper = static_cast<float>(n.const_scalar(4, "upper_edge_hertz"));
  if (bins < 1 || dft < 1 || rate < 1 || bins > (int64_t{1} << 16) || dft > (int64_t{1} << 24))
    n.error(
        "num_mel_bins {}, dft_length {} and sample_rate {} must be positive (and at most "
        "2^16 bins, a DFT of 2^24)",
        bins, dft, rate);
  int64_t rows = dft / 2 + 1;
  if (rows * bins > (int64_t{1} << 24))
    unsupported("a matrix of {} x {} elements (at most 2^24)", rows, bins);
  if (!std::isfinite(lower) || !std::isfinite(upper))
    n.error("lower_edge_hertz {} and upper_edge_hertz {} must be finite", lower, upper);
  auto ot = static_cast<int32_t>(n.attr_int("output_datatype", 1));
  std::optional<DType> t = dtype_from_onnx(ot);
  if (!t) unsupported("output_datatype {}", onnx_dtype_name(ot));
  float low_mel = 2595.0f * std::log10(1.0f + lower / 700.0f);
  float high_mel = 2595.0f * std::log10(1.0f + upper / 700.0f);
  float step = (high_mel - low_mel) / static_cast<float>(bins + 2);
  std::vector<int64_t> edge(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    double mel = static_cast<double>(i) * static_cast<double>(step) + static_cast<double>(low_mel);
    double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    double bin = std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate));
    if (!(std::abs(bin) < static_cast<double>(int64_t{1} << 40)))
      n.error("band edge {} Hz is far outside the spectrogram", hz);
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(bin);
  }
  std::vector<double> m(static_cast<size_t>(rows * bins), 0.0);
  auto set = [&](int64_t row, int64_t col, double v) {
    if (row < 0 || row >= rows)
      n.error(
          "band edge {} is outside the {} spectrogram bins (upper_edge_hertz {} above "
          "sample_rate / 2?)",
          row, rows, upper);
    m[static_cast<size_t>(row * bins + col)] = v;
  };
  for (int64_t i = 0; i < bins; ++i) {
    int64_t left = edge[static_cast<size_t>(i)], center = edge[static_cast<size_t>(i + 1)],
            right = edge[static_cast<size_t>(i + 2)];
    if (center == left) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = left; j <= center; ++j)
        set(j, i, static_cast<double>(j - left) / static_cast<double>(center - left));
    }
    for (int64_t j = center; j < right; ++j)
      set(j, i, static_cast<double>(right - j) / static_cast<double>(right - center));
  }
  Tensor w = Tensor::empty(*t, {rows, bins});
  for (size_t k = 0; k < m.size(); ++k) w.set_from_double(static_cast<int64_t>(k), m[k]);
  n.set_output(0, n.add_constant(w));
}

}  // namespace coil::onnxfe

// Resize (and Upsample, its predecessor): each resized axis on its own, with source indices and
// weights computed at import time by ONNX's reference formulas (onnx/backend/test/case/node/
// resize.py): the coordinate transformation maps an output index to x in the input, the taps
// are the 1 (nearest), 2 (linear) or 4 (cubic) input indices around x (clamped to the edge),
// and the output is the weighted sum of the taps, gathered with coil's gather (constant
// indices). Nearest upsampling by an integer factor is an expand instead.
#include <algorithm>
#include <cmath>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxResized = int64_t{1} << 24;

struct ResizeMode {
  std::string mode = "nearest";       // nearest, linear, cubic
  std::string coords = "half_pixel";  // coordinate_transformation_mode
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
};

// The input position of output index `o` of an axis of `in` elements resized by `scale` (the
// reference's output_width is scale * in, not rounded), or NaN outside the crop of
// tf_crop_and_resize.
double source_x(const ResizeMode& m, int64_t o, int64_t in, double scale, double roi_start,
                double roi_end) {
  double x = static_cast<double>(o), width = scale * static_cast<double>(in);
  auto last = static_cast<double>(in - 1);
  const std::string& c = m.coords;
  if (c == "align_corners") return width == 1 ? 0.0 : x * last / (width - 1);
  if (c == "asymmetric") return x / scale;
  if (c == "pytorch_half_pixel") return width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (c == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (c == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  // tf_crop_and_resize
  double v = width == 1 ? (roi_end - roi_start) * last / 2
                        : x * (roi_end - roi_start) * last / (width - 1);
  v += roi_start * last;
  return v < 0 || v > last ? std::nan("") : v;
}

// The taps of output index o: (input index, weight) pairs, indices clamped to [0, in).
std::vector<std::pair<int64_t, double>> taps(const ResizeMode& m, double x, int64_t in) {
  // The reference's neighbours: i1 = ceil(x), i0 = i1 - 1, ratio = x - i0 in (0, 1].
  auto i1 = static_cast<int64_t>(std::ceil(x));
  int64_t i0 = i1 - 1;
  double ratio = x - static_cast<double>(i0);
  std::vector<std::pair<int64_t, double>> t;
  if (m.mode == "nearest") {
    bool ceil = ratio == 1.0;
    if (!ceil) {
      if (m.nearest == "round_prefer_floor") ceil = ratio > 0.5;
      if (m.nearest == "round_prefer_ceil") ceil = ratio >= 0.5;
      if (m.nearest == "ceil") ceil = true;
    }
    t = {{ceil ? i1 : i0, 1.0}};
  } else if (m.mode == "linear") {
    t = {{i0, 1 - ratio}, {i1, ratio}};
  } else {
    double a = m.cubic_a, r = ratio, s = 1 - ratio;
    t = {{i0 - 1, ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a},
         {i0, ((a + 2) * r - (a + 3)) * r * r + 1},
         {i1, ((a + 2) * s - (a + 3)) * s * s + 1},
         {i1 + 1, ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a}};
  }
  if (m.exclude_outside && t.size() > 1) {
    double sum = 0;
    for (auto& [i, w] : t) {
      if (i < 0 || i >= in) w = 0;
      sum += w;
    }
    for (auto& p : t) p.second /= sum;
  }
  for (auto& p : t) p.first = std::clamp<int64_t>(p.first, 0, in - 1);
  return t;
}

int const_vector(OnnxNode& n, DType t, const std::vector<double>& v, int64_t axis, int64_t rank) {
  Tensor c = Tensor::empty(t, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) c.set_from_double(static_cast<int64_t>(i), v[i]);
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = static_cast<int64_t>(v.size());
  return n.add("reshape", {n.add_constant(c)}, Attrs{{"shape", shape}});
}

int gather_indices(OnnxNode& n, int x, int64_t axis, const std::vector<int64_t>& idx) {
  Tensor c = Tensor::empty(DType::I64, {static_cast<int64_t>(idx.size())});
  for (size_t i = 0; i < idx.size(); ++i)
    c.set_from_double(static_cast<int64_t>(i), static_cast<double>(idx[i]));
  return n.add("gather", {x, n.add_constant(c)}, Attrs{{"axis", axis}});
}

// x resized along `axis` from `in` to `out` elements.
int resize_axis(OnnxNode& n, const ResizeMode& m, int x, int64_t axis, int64_t in, int64_t out,
                double scale, double roi_start, double roi_end) {
  int64_t r = n.rank(x);
  std::vector<std::vector<int64_t>> idx;  // [tap][o]
  std::vector<std::vector<double>> w;
  std::vector<double> inside(static_cast<size_t>(out), 1.0);
  bool identity = in == out, cropped = false;
  for (int64_t o = 0; o < out; ++o) {
    double sx = source_x(m, o, in, scale, roi_start, roi_end);
    if (std::isnan(sx)) {
      inside[static_cast<size_t>(o)] = 0, cropped = true;
      sx = 0;
    }
    auto t = taps(m, sx, in);
    idx.resize(t.size()), w.resize(t.size());
    for (size_t k = 0; k < t.size(); ++k) {
      idx[k].push_back(t[k].first), w[k].push_back(t[k].second);
      if (t[k].second != 0 && (t[k].first != o || t[k].second != 1)) identity = false;
    }
  }
  if (identity && !cropped) return x;
  int y = -1;
  if (m.mode == "nearest") {
    // An integer upsampling factor that repeats each element s times: reshape + expand.
    int64_t s = in > 0 ? out / in : 0;
    bool repeat = s > 1 && out == in * s;
    for (int64_t o = 0; repeat && o < out; ++o) repeat = idx[0][static_cast<size_t>(o)] == o / s;
    if (repeat) {
      int v = n.add("unsqueeze", {x}, Attrs{{"dim", axis + 1}});
      std::vector<int64_t> expand(static_cast<size_t>(r + 1), -1);
      expand[static_cast<size_t>(axis + 1)] = s;
      Shape big = n.type(x).shape;
      big[static_cast<size_t>(axis)] = out;
      y = reshape_to(n, n.add("expand", {v}, Attrs{{"shape", expand}}), big);
    } else {
      y = gather_indices(n, x, axis, idx[0]);
    }
  } else {
    for (size_t k = 0; k < idx.size(); ++k) {
      if (std::all_of(w[k].begin(), w[k].end(), [](double v) { return v == 0; })) continue;
      int term = n.add(
          "mul", {gather_indices(n, x, axis, idx[k]), const_vector(n, n.dtype(x), w[k], axis, r)});
      y = y < 0 ? term : n.add("add", {y, term});
    }
    if (y < 0) y = n.add("mul", {gather_indices(n, x, axis, idx[0]), n.scalar(0, n.dtype(x))});
  }
  if (cropped) {
    int mask = n.add("ne", {const_vector(n, DType::F32, inside, axis, r), n.scalar(0, DType::F32)});
    y = n.add("where", {mask, y, n.scalar(m.extrapolation, n.dtype(x))});
  }
  return y;
}

std::vector<double> const_floats(OnnxNode& n, int i, std::string_view what) {
  const Tensor* t = n.constant(n.in(i));
  if (!t) unsupported("{} is not a constant", what);
  std::vector<double> v;
  for (int64_t k = 0; k < t->numel(); ++k) v.push_back(t->item_as_double(k));
  return v;
}

bool empty_input(OnnxNode& n, int i) {
  if (!n.has_input(i)) return true;
  const Tensor* t = n.constant(n.in(i));
  return t != nullptr && t->numel() == 0;
}

}  // namespace

void map_resize(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  const Shape& dims = n.type(x).shape;
  ResizeMode m;
  m.mode = n.attr_string("mode", "nearest");
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  bool legacy = n.op_type() == "Upsample" || n.opset() < 11;
  if (legacy) {
    // Upsample and Resize-10: asymmetric coordinates, nearest rounds down.
    m.coords = "asymmetric", m.nearest = "floor";
    if (n.op_type() == "Upsample" && n.opset() < 9) {
      scales = n.attr_floats("scales").value_or(std::vector<double>{});
    } else {
      scales = const_floats(n, 1, "scales");
    }
    if (m.mode == "bilinear") m.mode = "linear";  // Upsample-7's name for it
  } else {
    m.coords = n.attr_string("coordinate_transformation_mode", "half_pixel");
    m.nearest = n.attr_string("nearest_mode", "round_prefer_floor");
    m.cubic_a = n.attr_float("cubic_coeff_a", -0.75);
    m.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
    m.extrapolation = n.attr_float("extrapolation_value", 0.0);
    if (m.coords == "tf_crop_and_resize") roi = const_floats(n, 1, "roi");
    if (!empty_input(n, 2)) scales = const_floats(n, 2, "scales");
    if (!empty_input(n, 3)) sizes = n.const_ints(3, "sizes");
    if (scales.empty() == sizes.empty()) n.error("exactly one of scales and sizes must be given");
  }
  if (m.mode != "nearest" && m.mode != "linear" && m.mode != "cubic")
    n.error("mode '{}' is not one of nearest, linear, cubic", printable(m.mode));
  auto one_of = [](const std::string& v, std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* c) { return v == c; });
  };
  if (!one_of(m.coords, {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn", "tf_crop_and_resize"}))
    n.error("coordinate_transformation_mode '{}' is not one of ONNX's", printable(m.coords));
  if (!one_of(m.nearest, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}))
    n.error("nearest_mode '{}' is not one of ONNX's", printable(m.nearest));
  if (m.mode != "nearest" && !is_floating(n.dtype(x)))
    unsupported("{} resizing of {}", m.mode, dtype_name(n.dtype(x)));
  auto ur = static_cast<size_t>(r);
  if (scales.empty() && sizes.empty()) n.error("scales are missing");
  if ((!scales.empty() && scales.size() != ur) || (!sizes.empty() && sizes.size() != ur) ||
      (!roi.empty() && roi.size() != 2 * ur))
    n.error("scales, sizes and roi need {} (roi {}) entries for input {}", r, 2 * r,
            shape_str(n.type(x).shape));
  int y = x;
  std::vector<int64_t> in(ur, 0);
  for (int64_t a = r - 1; a >= 0; --a) {
    auto i = static_cast<size_t>(a);
    if (auto c = dims[i].as_const()) {
      in[i] = *c;
    } else if (sizes.empty() && scales[i] == 1.0 && m.coords != "tf_crop_and_resize") {
      continue;  // a symbolic dim (a batch) kept as it is
    } else {
      unsupported("resizing the symbolic dim {} of {}", a, shape_str(dims));
    }
    double scale;
    int64_t out;
    if (!sizes.empty()) {
      out = sizes[i];
      if (out < 0) n.error("sizes [{}] has a negative entry", fmt::join(sizes, ", "));
      scale = in[i] > 0 ? static_cast<double>(out) / static_cast<double>(in[i]) : 1.0;
    } else {
      scale = scales[i];
      if (!(scale > 0)) n.error("scales [{}] must be positive", fmt::join(scales, ", "));
      double o = std::floor(scale * static_cast<double>(in[i]));
      if (!(o <= static_cast<double>(kMaxResized)))
        unsupported("scale {} of a dim of {} (an output dim of at most {})", scale, in[i],
                    kMaxResized);
      out = static_cast<int64_t>(o);
    }
    // The taps are built per output element at import time.
    if (out > kMaxResized)
      unsupported("an output dim of {} elements (at most {})", out, kMaxResized);
    if (in[i] == 0 || out == 0) {
      if (in[i] != out) unsupported("resizing an empty dim");
      continue;
    }
    y = resize_axis(n, m, y, a, in[i], out, scale, roi.empty() ? 0.0 : roi[i],
                    roi.empty() ? 1.0 : roi[ur + i]);
  }
  n.set_output(0, y);
}

}  // namespace coil::onnxfe

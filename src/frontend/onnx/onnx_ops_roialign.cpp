// RoiAlign (opsets 10 and 16): X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2) and batch_indices
// [R] at run time, Y [R, C, output_height, output_width]. The sample points follow ONNX
// Runtime's (and ONNX's reference) RoiAlign: per output bin a sampling_ratio x sampling_ratio
// grid; a sample outside [-1, size] along either dim contributes 0; a coordinate is clamped to
// [0, size - 1] and interpolated bilinearly between its floor and the next index.
//
// Bilinear weights are separable: the sample (y, x) weighs X[y', x'] by wy(y') wx(x'). So each
// roi's rows (and columns) get a weight matrix Ay [R, outH, H] (Ax [R, outW, W]): one-hot
// comparisons of the sample's two source indices with an iota over H, times their weights,
// summed over the grid. mode avg is then Ay X_r Ax^T / count, two batched matmuls, where X_r is
// the roi's image (picked by a one-hot comparison of batch_indices with an iota over N, a sum of
// selected values: an index out of range gives zeros). mode max takes, as ONNX Runtime, the max
// over the samples of the max over the 4 taps of weight * value: the taps' values come from
// one-hot row and column matrices through the same two matmuls (exact for finite X: every other
// term is 0 * x), one per tap. sampling_ratio 0 (a grid that depends on the rois' values) is
// unsupported.
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxElems = int64_t{1} << 28;

struct Roi {
  OnnxNode& n;
  DType t;
  int c(double v) const { return n.scalar(v, t); }
  int add(int a, int b) const { return n.add("add", {a, b}); }
  int sub(int a, int b) const { return n.add("sub", {a, b}); }
  int mul(int a, int b) const { return n.add("mul", {a, b}); }
  int where(int m, int a, int b) const { return n.add("where", {m, a, b}); }
};

// Along one dim (of `size` positions) with `bins` output bins and a grid of `grid` samples per
// bin: for the roi coordinates start [R] and extent [R], the two taps of each sample as one-hot
// weights over an iota of the positions: low [R, bins, grid, size] holding (1 - l) at the low
// index and high holding l at the high one, each 0 for a sample outside [-1, size].
struct Taps {
  int low, high;
};

Taps taps(const Roi& m, int start, int extent, int64_t bins, int64_t grid, int64_t size) {
  OnnxNode& n = m.n;
  auto shape4 = [&](int v) {  // [R] -> [R, 1, 1, 1]
    return n.add("reshape", {v}, Attrs{{"shape", std::vector<int64_t>{-1, 1, 1, 1}}});
  };
  int bin = n.add("div", {shape4(extent), m.c(static_cast<double>(bins))});
  int ph = n.cast(iota_along(n, bins, 1, 4), m.t);
  int iy = n.cast(iota_along(n, grid, 2, 4), m.t);
  // start + ph * bin + (iy + 0.5) * bin / grid
  int frac = m.mul(m.add(iy, m.c(0.5)), m.c(1.0 / static_cast<double>(grid)));
  int y = m.add(shape4(start), m.mul(m.add(ph, frac), bin));  // [R, bins, grid, 1]
  auto fsize = static_cast<double>(size);
  int valid = n.add("logical_and", {n.add("ge", {y, m.c(-1)}), n.add("le", {y, m.c(fsize)})});
  int yc = n.add("maximum", {y, m.c(0)});
  int fl = n.add("floor", {yc});
  int at_end = n.add("ge", {fl, m.c(fsize - 1)});
  int lo = n.add("minimum", {fl, m.c(fsize - 1)});
  int hi = n.add("minimum", {m.add(lo, m.c(1)), m.c(fsize - 1)});
  int l = m.where(at_end, m.c(0), m.sub(yc, fl));
  int h = m.sub(m.c(1), l);
  int pos = n.cast(iota_along(n, size, 3, 4), m.t);
  int zero = m.c(0);
  l = m.where(valid, l, zero);
  h = m.where(valid, h, zero);
  return {m.where(n.add("eq", {pos, lo}), h, zero), m.where(n.add("eq", {pos, hi}), l, zero)};
}

}  // namespace

void map_roi_align(OnnxNode& n) {
  int x = n.in(0), rois = n.in(1), bidx = n.in(2);
  if (n.rank(x) != 4) n.error("X must be 4-D [N, C, H, W], got rank {}", n.rank(x));
  DType xt = n.dtype(x);
  if (!is_floating(xt)) n.error("X must be floating point, got {}", dtype_name(xt));
  std::vector<int64_t> xs = n.static_shape(x, "X");
  std::vector<int64_t> rs = n.static_shape(rois, "rois");
  if (rs.size() != 2 || rs[1] != 4) n.error("rois must be [num_rois, 4], got {}", shape_str(rs));
  std::vector<int64_t> bs = n.static_shape(bidx, "batch_indices");
  if (bs.size() != 1 || bs[0] != rs[0])
    n.error("batch_indices must be [{}] (one per roi), got {}", rs[0], shape_str(bs));
  if (!is_integral(n.dtype(bidx)) || n.dtype(bidx) == DType::Bool)
    n.error("batch_indices must be integers, got {}", dtype_name(n.dtype(bidx)));
  std::string mode = n.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") n.error("mode '{}' is not avg or max", printable(mode));
  // Opset 10 has no coordinate_transformation_mode: its coordinates are output_half_pixel's.
  std::string ctm = n.attr_string("coordinate_transformation_mode",
                                  n.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    n.error("coordinate_transformation_mode '{}' is not half_pixel or output_half_pixel",
            printable(ctm));
  int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1);
  int64_t ratio = n.attr_int("sampling_ratio", 0);
  double scale = n.attr_float("spatial_scale", 1.0);
  if (oh < 1 || ow < 1) n.error("output_height {} and output_width {} must be >= 1", oh, ow);
  if (ratio < 0) n.error("sampling_ratio {} is negative", ratio);
  if (ratio == 0)
    unsupported(
        "sampling_ratio 0 (an adaptive grid of ceil(roi size / output size) samples: a shape "
        "that depends on the rois' values)");
  int64_t nb = xs[0], c = xs[1], h = xs[2], w = xs[3], r = rs[0];
  if (r * c * h * w * std::max<int64_t>(nb, 1) > kMaxElems ||
      r * std::max(oh, ow) * ratio * std::max(h, w) > kMaxElems)
    unsupported("{} rois over X {} (intermediates of more than 2^28 elements)", r, shape_str(xs));

  Roi m{n, xt == DType::F64 ? DType::F64 : DType::F32};
  int xf = n.cast(x, m.t), rf = n.cast(rois, m.t);
  auto coord = [&](int64_t k) {  // rois[:, k] * spatial_scale - offset, [R]
    int v = n.add("slice", {rf}, Attrs{{"dim", int64_t{1}}, {"start", k}, {"end", k + 1}});
    v = n.add("reshape", {v}, Attrs{{"shape", std::vector<int64_t>{r}}});
    return m.sub(m.mul(v, m.c(scale)), m.c(ctm == "half_pixel" ? 0.5 : 0.0));
  };
  int x1 = coord(0), y1 = coord(1), x2 = coord(2), y2 = coord(3);
  int rw = m.sub(x2, x1), rh = m.sub(y2, y1);
  if (ctm == "output_half_pixel") {  // malformed rois forced to 1x1, as ONNX Runtime
    rw = n.add("maximum", {rw, m.c(1)});
    rh = n.add("maximum", {rh, m.c(1)});
  }
  Taps ty = taps(m, y1, rh, oh, ratio, h), tx = taps(m, x1, rw, ow, ratio, w);
  // The roi's image: X_r [R, C, H, W] = sum over b of where(batch_indices[r] == b, X[b], 0).
  int hit = n.add("eq", {n.add("reshape", {n.cast(bidx, DType::I64)},
                               Attrs{{"shape", std::vector<int64_t>{r, 1, 1, 1, 1}}}),
                         iota_along(n, nb, 1, 5)});
  int xr =
      reduce(n, "sum", m.where(hit, n.add("unsqueeze", {xf}, Attrs{{"dim", int64_t{0}}}), m.c(0)),
             {1}, false);
  // rows [R, bins * grid, size] -> (rows @ X_r @ cols^T) [R, C, oh * grid, ow * grid]
  auto flat = [&](int v, int64_t bins, int64_t size) {
    return n.add("reshape", {v}, Attrs{{"shape", std::vector<int64_t>{r, 1, bins * ratio, size}}});
  };
  auto product = [&](int rows, int cols) {
    int t = n.add("matmul", {rows, xr});
    return n.add("matmul", {t, n.add("transpose", {cols},
                                     Attrs{{"dim0", int64_t{2}}, {"dim1", int64_t{3}}})});
  };
  int y;
  if (mode == "avg") {
    // Each dim's taps summed over its grid: [R, 1, bins, size].
    int ay = reduce(n, "sum", m.add(ty.low, ty.high), {2}, true);
    int ax = reduce(n, "sum", m.add(tx.low, tx.high), {2}, true);
    ay = n.add("reshape", {ay}, Attrs{{"shape", std::vector<int64_t>{r, 1, oh, h}}});
    ax = n.add("reshape", {ax}, Attrs{{"shape", std::vector<int64_t>{r, 1, ow, w}}});
    y = m.mul(product(ay, ax), m.c(1.0 / static_cast<double>(ratio * ratio)));
  } else {
    // The 4 taps of each sample: value (one-hot rows and columns) times weight (the rows' and
    // columns' weights at the tap), the max over the taps, then over the samples.
    auto one_hot = [&](int t) { return m.where(n.add("ne", {t, m.c(0)}), m.c(1), m.c(0)); };
    int best = -1;
    for (int a : {ty.low, ty.high})
      for (int b : {tx.low, tx.high}) {
        // A tap's one-hot pattern: where its weight is nonzero; with weight 0 (a sample outside,
        // or the high tap at the end) the value is 0 * anything, taken as 0 as ONNX Runtime does
        // (its taps then read position 0 with weight 0).
        int wy = reduce(n, "sum", a, {3}, false);  // [R, oh, grid]
        int wx = reduce(n, "sum", b, {3}, false);  // [R, ow, grid]
        int ry = flat(one_hot(a), oh, h), cx = flat(one_hot(b), ow, w);
        int v = product(ry, cx);  // [R, C, oh * grid, ow * grid]
        int wyf =
            n.add("reshape", {wy}, Attrs{{"shape", std::vector<int64_t>{r, 1, oh * ratio, 1}}});
        int wxf =
            n.add("reshape", {wx}, Attrs{{"shape", std::vector<int64_t>{r, 1, 1, ow * ratio}}});
        int tv = m.mul(m.mul(wyf, wxf), v);
        best = best < 0 ? tv : n.add("maximum", {best, tv});
      }
    int six = n.add("reshape", {best},
                    Attrs{{"shape", std::vector<int64_t>{r, c, oh, ratio, ow, ratio}}});
    y = reduce(n, "max", six, {3, 5}, false);
  }
  n.set_output(0, n.cast(y, xt));
}

}  // namespace coil::onnxfe

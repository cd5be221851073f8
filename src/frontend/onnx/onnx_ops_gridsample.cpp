// GridSample (opset 16; 2-D: X [N, C, H, W], grid [N, Ho, Wo, 2] of normalized (x, y)) as an
// interpolation matrix: every tap of every output point adds its weight at the tap's source
// position (a one-hot comparison with an iota over the H*W positions, as the scatter ops do),
// and the output is X [N, C, H*W] times that matrix [N, H*W, Ho*Wo], one batched matmul. The
// coordinates follow torch's grid_sampler_2d, which ONNX's expected values come from:
// unnormalize (align_corners or not), then for bilinear and nearest the border clip or the
// reflection of the coordinate; bicubic reflects or clips each tap's integer index instead. A tap
// outside the image weighs 0 (zeros padding). Costs N * Ho * Wo * H * W per tap (at most 2^28).
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

struct Sampler {
  OnnxNode& n;
  bool align;
  std::string padding;

  int f(double v) { return n.scalar(v, DType::F32); }
  int add(int a, int b) { return n.add("add", {a, b}); }
  int sub(int a, int b) { return n.add("sub", {a, b}); }
  int mul(int a, int b) { return n.add("mul", {a, b}); }

  // A normalized coordinate in [-1, 1] to a pixel coordinate along a dim of `size`.
  int unnormalize(int c, int64_t size) {
    int c1 = add(c, f(1));
    if (align) return mul(c1, f(0.5 * static_cast<double>(size - 1)));
    return mul(sub(mul(c1, f(static_cast<double>(size))), f(1)), f(0.5));
  }

  // torch's reflect_coordinates: c reflected into [lo2 / 2, hi2 / 2].
  int reflect(int c, double lo2, double hi2) {
    if (lo2 == hi2) return f(0);
    double lo = lo2 / 2, span = (hi2 - lo2) / 2;
    int in = n.add("abs", {sub(c, f(lo))});
    int flips = n.add("floor", {n.add("div", {in, f(span)})});
    int extra = sub(in, mul(flips, f(span)));
    int half = n.add("floor", {mul(flips, f(0.5))});
    int even = n.add("eq", {sub(flips, mul(half, f(2))), f(0)});
    return n.add("where", {even, add(extra, f(lo)), add(sub(f(span), extra), f(lo))});
  }

  // torch's compute_coordinates: the border clip or the reflection (then a clip).
  int pad(int c, int64_t size) {
    double hi = static_cast<double>(size - 1);
    Attrs clip{{"min", 0.0}, {"max", hi}};
    if (padding == "border") return n.add("clamp", {c}, clip);
    if (padding == "reflection") {
      int r = align ? reflect(c, 0, 2 * hi) : reflect(c, -1, 2 * static_cast<double>(size) - 1);
      return n.add("clamp", {r}, clip);
    }
    return c;
  }

  // Whether integer-valued c is inside [0, size).
  int inside(int c, int64_t size) {
    return n.add("logical_and",
                 {n.add("ge", {c, f(0)}), n.add("lt", {c, f(static_cast<double>(size))})});
  }
};

// torch's cubic convolution coefficients (A = -0.75) for the 4 taps at distance t from the
// second one.
std::vector<int> cubic_weights(Sampler& s, int t) {
  const double a = -0.75;
  auto near = [&](int x) {  // ((A + 2) x - (A + 3)) x^2 + 1, for |x| <= 1
    return s.add(s.mul(s.sub(s.mul(s.f(a + 2), x), s.f(a + 3)), s.mul(x, x)), s.f(1));
  };
  auto far = [&](int x) {  // ((A x - 5A) x + 8A) x - 4A, for 1 < |x| < 2
    return s.sub(s.mul(s.add(s.mul(s.sub(s.mul(s.f(a), x), s.f(5 * a)), x), s.f(8 * a)), x),
                 s.f(4 * a));
  };
  int one_minus = s.sub(s.f(1), t);
  return {far(s.add(t, s.f(1))), near(t), near(one_minus), far(s.add(one_minus, s.f(1)))};
}

}  // namespace

void map_grid_sample(OnnxNode& n) {
  int x = n.in(0), grid = n.in(1);
  if (n.rank(x) != 4 || n.rank(grid) != 4)
    unsupported("inputs of rank {} and {} (coil samples 2-D images: X [N, C, H, W])", n.rank(x),
                n.rank(grid));
  if (!is_floating(n.dtype(x))) n.error("X must be floating point, got {}", dtype_name(n.dtype(x)));
  std::vector<int64_t> xs = n.static_shape(x, "X"), gs = n.static_shape(grid, "the grid");
  if (gs[0] != xs[0] || gs[3] != 2)
    n.error("the grid is {}, expected [{}, Ho, Wo, 2] for X {}", shape_str(n.type(grid).shape),
            xs[0], shape_str(n.type(x).shape));
  std::string mode = n.attr_string("mode", "bilinear");
  Sampler s{n, n.attr_int("align_corners", 0) != 0, n.attr_string("padding_mode", "zeros")};
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    n.error("mode '{}' is not bilinear, nearest or bicubic", printable(mode));
  if (s.padding != "zeros" && s.padding != "border" && s.padding != "reflection")
    n.error("padding_mode '{}' is not zeros, border or reflection", printable(s.padding));
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = gs[1], Wo = gs[2];
  int taps = mode == "bicubic" ? 16 : mode == "bilinear" ? 4 : 1;
  if (static_cast<double>(N * Ho * Wo) * static_cast<double>(H * W) * taps > (1 << 28))
    unsupported("{} taps of {} outputs over {} positions (the comparisons exceed 2^28)", taps,
                N * Ho * Wo, H * W);

  // Pixel coordinates [N, Ho*Wo, 1] of the output points.
  int g = n.cast(reshape_to(n, grid, Shape{N, Ho * Wo, 2}), DType::F32);
  auto coord = [&](int64_t k, int64_t size) {
    int c = n.add("slice", {g},
                  Attrs{{"dim", int64_t{2}}, {"start", k}, {"end", k + 1}, {"step", int64_t{1}}});
    return s.unnormalize(c, size);
  };
  int ix = coord(0, W), iy = coord(1, H);
  int pos = iota_along(n, H * W, 2, 3);  // [1, 1, H*W]
  int matrix = -1;                       // [N, Ho*Wo, H*W]
  // Adds weight w [N, Ho*Wo, 1] at integer-valued (px, py); taps outside weigh 0.
  auto tap = [&](int px, int py, int w) {
    int ok = n.add("logical_and", {s.inside(px, W), s.inside(py, H)});
    int lin = s.add(s.mul(n.add("clamp", {py}, Attrs{{"min", 0.0}, {"max", double(H - 1)}}),
                          s.f(static_cast<double>(W))),
                    n.add("clamp", {px}, Attrs{{"min", 0.0}, {"max", double(W - 1)}}));
    int hit = n.add("eq", {n.cast(lin, DType::I64), pos});
    int term = n.add("where", {hit, n.add("where", {ok, w, s.f(0)}), s.f(0)});
    matrix = matrix < 0 ? term : s.add(matrix, term);
  };
  if (mode == "nearest") {
    tap(n.add("round", {s.pad(ix, W)}), n.add("round", {s.pad(iy, H)}), s.f(1));
  } else if (mode == "bilinear") {
    int px = s.pad(ix, W), py = s.pad(iy, H);
    int x0 = n.add("floor", {px}), y0 = n.add("floor", {py});
    int tx = s.sub(px, x0), ty = s.sub(py, y0);
    int x1 = s.add(x0, s.f(1)), y1 = s.add(y0, s.f(1));
    int ux = s.sub(s.f(1), tx), uy = s.sub(s.f(1), ty);
    tap(x0, y0, s.mul(ux, uy));
    tap(x1, y0, s.mul(tx, uy));
    tap(x0, y1, s.mul(ux, ty));
    tap(x1, y1, s.mul(tx, ty));
  } else {
    int x0 = n.add("floor", {ix}), y0 = n.add("floor", {iy});
    std::vector<int> wx = cubic_weights(s, s.sub(ix, x0)), wy = cubic_weights(s, s.sub(iy, y0));
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        // Each tap's index is clipped or reflected by the padding mode.
        int px = s.pad(s.add(x0, s.f(i - 1)), W), py = s.pad(s.add(y0, s.f(j - 1)), H);
        tap(px, py, s.mul(wx[static_cast<size_t>(i)], wy[static_cast<size_t>(j)]));
      }
  }
  int xf = n.cast(reshape_to(n, x, Shape{N, C, H * W}), DType::F32);
  int y = n.add("matmul",
                {xf, n.add("permute", {matrix}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1}}})});
  n.set_output(0, n.cast(reshape_to(n, y, Shape{N, C, Ho, Wo}), n.dtype(x)));
}

}  // namespace coil::onnxfe

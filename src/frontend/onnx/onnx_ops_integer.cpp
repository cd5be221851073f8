// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv (opset 10, 8-bit operands) through
// coil's f32 matmul and conv2d.
//
// Each operand minus its zero point is an integer of magnitude at most 255, exact in f32, and so
// is every product (< 2^16). A sum of such terms is exact in f32 while every partial sum stays
// below 2^24 in magnitude, whatever order the reduction adds them in; then the f32 result cast
// to int32 is ONNX's int32 accumulator exactly. The import checks that bound: the largest
// |a - a_zero_point| times the largest sum of |b - b_zero_point| over the reduced elements of one
// output (exact for a constant weight with a per-tensor or per-output zero point; otherwise the
// reduction length times the dtype's bound). MatMul beyond it is split along K into chunks that
// fit, each cast to int32 and the chunks added in int32; Conv beyond it is unsupported.
//
// The QLinear ops then requantize the int32 accumulator (plus QLinearConv's int32 bias) as
// QuantizeLinear does: saturate(round(acc * a_scale * b_scale / y_scale) + y_zero_point),
// rounding half to even, in f32 (onnx_ops_quantize.cpp).
#include <algorithm>
#include <cmath>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kExactF32 = int64_t{1} << 24;

void require_8bit(OnnxNode& n, int v, std::string_view what) {
  DType t = n.dtype(v);
  if (t != DType::U8 && t != DType::I8)
    n.error("{} must be uint8 or int8, got {}", what, dtype_name(t));
}

// A zero point or scale `v` of operand x, shaped to broadcast against x (rank r): one element
// (per tensor) becomes a scalar; a 1-D one of `len` elements (per row, column or channel: the
// dim `axis` of x) gets x's rank with 1 elsewhere; with `reduced_axis` >= 0 an N-D one of x's rank
// is accepted when it is 1 along that dim and equal to x or 1 along the others (MatMulInteger's
// [D1, D2, M, 1] and [D1, D2, 1, N]). Anything else is an error naming the op's input.
int along(OnnxNode& n, int v, int x, int64_t axis, int64_t reduced_axis, std::string_view what) {
  const Shape& vs = n.type(v).shape;
  const Shape& xs = n.type(x).shape;
  int64_t r = n.rank(x);
  auto is_one = [](const sym::Expr& e) { return e.as_const() == int64_t{1}; };
  bool one = std::all_of(vs.begin(), vs.end(), is_one);
  if (one) return n.rank(v) == 0 ? v : reshape_to(n, v, Shape{});
  if (axis >= 0 && vs.size() == 1 && vs[0] == xs[static_cast<size_t>(axis)]) {
    Shape target(static_cast<size_t>(r), sym::Expr(1));
    target[static_cast<size_t>(axis)] = vs[0];
    return reshape_to(n, v, target);
  }
  if (reduced_axis >= 0 && n.rank(v) == r && is_one(vs[static_cast<size_t>(reduced_axis)])) {
    bool fits = true;
    for (size_t d = 0; d < vs.size(); ++d)
      fits &= static_cast<int64_t>(d) == reduced_axis || is_one(vs[d]) || vs[d] == xs[d];
    if (fits) return v;
  }
  std::string forms = "one element";
  if (axis >= 0)
    forms +=
        fmt::format(", or {} along dim {}", sym::to_string(xs[static_cast<size_t>(axis)]), axis);
  if (reduced_axis >= 0) forms += fmt::format(", or {}-D with 1 along dim {}", r, reduced_axis);
  n.error("{} of shape {} does not fit its operand of shape {} ({})", what, shape_str(vs),
          shape_str(xs), forms);
}

// v - zero_point as f32; zp -1 for none (0). The zero point must have v's dtype.
int shifted(OnnxNode& n, int v, int zp, std::string_view what) {
  int f = n.cast(v, DType::F32);
  if (zp < 0) return f;
  if (n.dtype(zp) != n.dtype(v))
    n.error("{} has dtype {}, its operand {}", what, dtype_name(n.dtype(zp)),
            dtype_name(n.dtype(v)));
  return n.add("sub", {f, n.cast(zp, DType::F32)});
}

// The largest |v - zp| over v's dtype: exact from a constant zero point (input `zp_input`, or
// none), else the dtype's span.
int64_t element_bound(OnnxNode& n, int v, int zp_input) {
  int64_t lo = n.dtype(v) == DType::U8 ? 0 : -128, hi = lo + 255;
  if (!n.has_input(zp_input)) return std::max(-lo, hi);
  if (!n.constant(n.in(zp_input))) return hi - lo;
  int64_t bound = 0;
  for (int64_t z : n.const_ints(zp_input, "the zero point"))
    bound = std::max({bound, z - lo, hi - z});
  return bound;
}

// The largest sum of |w - zp| over the reduced elements of one output, w (input `w_input`) a
// constant viewed as [P, K, Q] with outputs (p, q), its zero point (input `zp_input`) one
// element, or `per_p` P of them (conv's output channels), or else Q of them (matmul's
// columns); -1 when w or the zero point is not a constant, the zero point has another form, or
// w does not have P * K * Q elements.
int64_t constant_l1(OnnxNode& n, int w_input, int zp_input, int64_t P, int64_t K, int64_t Q,
                    bool per_p) {
  if (!n.constant(n.in(w_input))) return -1;
  std::vector<int64_t> zp{0};
  if (n.has_input(zp_input)) {
    if (!n.constant(n.in(zp_input))) return -1;
    zp = n.const_ints(zp_input, "the zero point");
    if (zp.size() != 1 && static_cast<int64_t>(zp.size()) != (per_p ? P : Q)) return -1;
  }
  std::vector<int64_t> w = n.const_ints(w_input, "the weight");
  if (P < 0 || K < 0 || Q < 0 ||
      static_cast<double>(P) * static_cast<double>(K) * static_cast<double>(Q) !=
          static_cast<double>(w.size()))
    return -1;
  int64_t most = 0;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t q = 0; q < Q; ++q) {
      int64_t z = zp.size() == 1 ? zp[0] : zp[static_cast<size_t>(per_p ? p : q)], sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += std::abs(w[static_cast<size_t>((p * K + k) * Q + q)] - z);
      most = std::max(most, sum);
    }
  return most;
}

// In double: the bounds below compare sizes that may be huge in a malformed model (no int64
// overflow); exact wherever they are small enough to matter.
double product(const std::vector<int64_t>& v, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to; ++i) p *= static_cast<double>(v[i]);
  return p;
}

// QLinear's requantization of an int32 accumulator: QuantizeLinear of acc * a_scale * b_scale
// with y_scale and y_zero_point (inputs y_scale_input and y_scale_input + 1), to y_zero_point's
// dtype. The scales are already shaped to broadcast against acc.
int requantize(OnnxNode& n, int acc, int a_scale, int b_scale, int y_scale, int y_zp) {
  require_8bit(n, y_zp, "y_zero_point");
  int real = n.add("mul", {n.add("mul", {n.cast(acc, DType::F32), n.cast(a_scale, DType::F32)}),
                           n.cast(b_scale, DType::F32)});
  return quantize_to(n, real, n.cast(y_scale, DType::F32), n.cast(y_zp, DType::F32), n.dtype(y_zp));
}

}  // namespace

// MatMulInteger(A, B, a_zero_point, b_zero_point) and QLinearMatMul(a, a_scale, a_zero_point, b,
// b_scale, b_zero_point, y_scale, y_zero_point): numpy's matmul of the shifted operands; the
// zero points and scales of A per tensor or per row, of B per tensor or per column.
void map_matmul_integer(OnnxNode& n) {
  bool qlinear = n.op_type() == "QLinearMatMul";
  // Input positions: A, its zero point, B, its zero point.
  int iaz = 2, ib = qlinear ? 3 : 1, ibz = qlinear ? 5 : 3;
  int a = n.in(0), b = n.in(ib);
  require_8bit(n, a, "A");
  require_8bit(n, b, "B");
  int64_t ra = n.rank(a), rb = n.rank(b);
  if (ra < 1 || rb < 1) n.error("A and B must have at least one dim");
  // Per row of A: its dim -2; per column of B: its last dim (none for 1-D operands).
  int64_t a_row = ra >= 2 ? ra - 2 : -1, b_col = rb >= 2 ? rb - 1 : -1;
  int64_t a_k = ra - 1, b_k = rb >= 2 ? rb - 2 : 0;
  auto zp_of = [&](int input, int x, int64_t axis, int64_t k, std::string_view what) {
    return n.has_input(input) ? along(n, n.in(input), x, axis, qlinear ? -1 : k, what) : -1;
  };
  int a_zp = zp_of(iaz, a, a_row, a_k, "a_zero_point");
  int b_zp = zp_of(ibz, b, b_col, b_k, "b_zero_point");
  int fa = shifted(n, a, a_zp, "a_zero_point"), fb = shifted(n, b, b_zp, "b_zero_point");
  // The exactness bound (header comment); B's sums are exact when it is a constant.
  std::vector<int64_t> bs;
  for (const sym::Expr& e : n.type(b).shape) bs.push_back(e.as_const().value_or(-1));
  auto k_dim = n.type(a).shape[static_cast<size_t>(a_k)].as_const();
  if (!k_dim) unsupported("A of shape {} (K must be static)", shape_str(n.type(a).shape));
  int64_t K = *k_dim, amax = element_bound(n, a, iaz), bmax = element_bound(n, b, ibz);
  double l1 = -1;  // of a constant B (its own dims)
  if (rb >= 2 && std::all_of(bs.begin(), bs.end(), [](int64_t v) { return v >= 0; }))
    l1 = static_cast<double>(constant_l1(n, ib, ibz,
                                         static_cast<int64_t>(product(bs, 0, bs.size() - 2)),
                                         bs[bs.size() - 2], bs.back(), false));
  else if (rb == 1 && bs[0] >= 0)
    l1 = static_cast<double>(constant_l1(n, ib, ibz, 1, bs[0], 1, false));
  if (l1 < 0) l1 = static_cast<double>(K) * static_cast<double>(bmax);
  int y;
  if (static_cast<double>(amax) * l1 <= static_cast<double>(kExactF32)) {
    y = n.cast(n.add("matmul", {fa, fb}), DType::I32);
  } else {
    // Chunks of K whose sums stay below 2^24, added in int32 (as ONNX's accumulator).
    int64_t chunk = std::max<int64_t>(1, kExactF32 / (amax * bmax));
    if ((K + chunk - 1) / chunk > 256)
      unsupported("K = {}: more than 256 chunks of {} for exact f32 sums", K, chunk);
    y = -1;
    for (int64_t k0 = 0; k0 < K; k0 += chunk) {
      int64_t k1 = std::min(K, k0 + chunk);
      int sa = n.add("slice", {fa}, Attrs{{"dim", a_k}, {"start", k0}, {"end", k1}});
      int sb = n.add("slice", {fb}, Attrs{{"dim", b_k}, {"start", k0}, {"end", k1}});
      int part = n.cast(n.add("matmul", {sa, sb}), DType::I32);
      y = y < 0 ? part : n.add("add", {y, part});
    }
  }
  if (!qlinear) return n.set_output(0, y);
  // Scales: a_scale per row of A (a row of the result), b_scale per column, y_scale per row.
  // The result's rows: its dim -2, or its last dim when B is 1-D (A's rows remain).
  int64_t ry = n.rank(y);
  int64_t y_row = ra >= 2 ? (rb >= 2 ? ry - 2 : ry - 1) : -1, y_col = rb >= 2 ? ry - 1 : -1;
  auto scale_of = [&](int input, int64_t axis, std::string_view what) {
    return along(n, n.in(input), y, axis, -1, what);
  };
  n.set_output(0, requantize(n, y, scale_of(1, y_row, "a_scale"), scale_of(4, y_col, "b_scale"),
                             scale_of(6, y_row, "y_scale"),
                             along(n, n.in(7), y, y_row, -1, "y_zero_point")));
}

// ConvInteger(x, w, x_zero_point, w_zero_point) and QLinearConv(x, x_scale, x_zero_point, w,
// w_scale, w_zero_point, y_scale, y_zero_point, B): Conv of the shifted operands (1-D and 2-D,
// every Conv attribute); x's zero point per tensor, w's per tensor or per output channel.
void map_conv_integer(OnnxNode& n) {
  bool qlinear = n.op_type() == "QLinearConv";
  int ixz = 2, iw = qlinear ? 3 : 1, iwz = qlinear ? 5 : 3;
  int x = n.in(0), w = n.in(iw);
  require_8bit(n, x, "x");
  require_8bit(n, w, "w");
  if (n.rank(w) != n.rank(x) || n.rank(x) < 3)
    n.error("x {} and w {} must be [N, C, D1, ...] and [M, C / group, k1, ...]",
            shape_str(n.type(x).shape), shape_str(n.type(w).shape));
  int x_zp = n.has_input(ixz) ? along(n, n.in(ixz), x, -1, -1, "x_zero_point") : -1;
  int w_zp = n.has_input(iwz) ? along(n, n.in(iwz), w, 0, -1, "w_zero_point") : -1;
  std::vector<int64_t> ws = n.static_shape(w, "the weight");
  double K = product(ws, 1, ws.size());
  int64_t M = ws[0];
  double l1 =
      K < static_cast<double>(kExactF32)
          ? static_cast<double>(constant_l1(n, iw, iwz, M, static_cast<int64_t>(K), 1, true))
          : -1;
  if (l1 < 0) l1 = K * static_cast<double>(element_bound(n, w, iwz));
  double bound = static_cast<double>(element_bound(n, x, ixz)) * l1;
  if (bound > static_cast<double>(kExactF32))
    unsupported(
        "a window of {} elements: sums up to {} exceed 2^24, beyond which coil's f32 "
        "convolution is not exact",
        K, bound);
  int acc = n.cast(
      conv_float(n, shifted(n, x, x_zp, "x_zero_point"), shifted(n, w, w_zp, "w_zero_point"), -1),
      DType::I32);
  if (!qlinear) return n.set_output(0, acc);
  if (n.has_input(8)) {
    int bias = n.in(8);
    if (n.dtype(bias) != DType::I32 || n.rank(bias) != 1 || !(n.type(bias).shape[0] == M))
      n.error("B must be int32 of shape [{}], got {} {}", M, dtype_name(n.dtype(bias)),
              shape_str(n.type(bias).shape));
    acc = n.add("add", {acc, along(n, bias, acc, 1, -1, "B")});
  }
  n.set_output(0, requantize(n, acc, along(n, n.in(1), acc, -1, -1, "x_scale"),
                             along(n, n.in(4), acc, 1, -1, "w_scale"),
                             along(n, n.in(6), acc, -1, -1, "y_scale"),
                             along(n, n.in(7), acc, -1, -1, "y_zero_point")));
}

}  // namespace coil::onnxfe

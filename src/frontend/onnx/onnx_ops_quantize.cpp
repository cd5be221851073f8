// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (opsets 10 to 18: 8-bit integers,
// a per-tensor scale or a per-axis one) as compositions of elementwise ops and reductions, as
// ONNX's reference and function bodies write them:
//   QuantizeLinear        y = saturate(round(x / scale) + zero_point)   (round: half to even)
//   DequantizeLinear      y = (x - zero_point) * scale
//   DynamicQuantizeLinear scale = (max(x, 0) - min(x, 0)) / 255,
//                         zero_point = round(clip(-min(x, 0) / scale, 0, 255)),
//                         y = QuantizeLinear(x, scale, zero_point)                  (uint8)
// Scales and zero points may be run-time inputs: they are ordinary operands, so nothing is
// specialized on their values. The arithmetic is in f32, as ONNX Runtime's kernels.
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

// `v`, a scale or zero point of x: a scalar (per tensor) is returned as it is, a 1-D one (per
// axis) is reshaped to broadcast along the `axis` attribute.
int along_axis(OnnxNode& n, int v, int x, std::string_view what) {
  if (n.rank(v) == 0) return v;
  if (n.rank(v) != 1)
    n.error("{} must be a scalar or 1-D, not of shape {}", what, shape_str(n.type(v).shape));
  int64_t rank = n.rank(x);
  int64_t a = n.axis(n.attr_int("axis", 1), rank);
  const sym::Expr& len = n.type(v).shape[0];
  const sym::Expr& dim = n.type(x).shape[static_cast<size_t>(a)];
  if (!(len == dim))
    n.error("{} has {} elements, x has {} along axis {}", what, sym::to_string(len),
            sym::to_string(dim), a);
  Shape target(static_cast<size_t>(rank), sym::Expr(1));
  target[static_cast<size_t>(a)] = len;
  return reshape_to(n, v, target);
}

// The saturation bounds of an 8-bit quantized dtype; Unsupported for others.
std::pair<double, double> int8_range(DType t) {
  if (t == DType::U8) return {0, 255};
  if (t == DType::I8) return {-128, 127};
  unsupported("y_zero_point of dtype {} (coil quantizes to uint8 and int8)", dtype_name(t));
}

}  // namespace

int quantize_to(OnnxNode& n, int x, int scale, int zero_point, DType t) {
  auto [lo, hi] = int8_range(t);
  int q = n.add("round", {n.add("div", {x, scale})});
  if (zero_point >= 0) q = n.add("add", {q, zero_point});
  return n.cast(n.add("clamp", {q}, Attrs{{"min", lo}, {"max", hi}}), t);
}

void map_quantize_linear(OnnxNode& n) {
  int x = n.in(0);
  n.attr_int("axis", 1);  // read by along_axis when a scale is 1-D
  int scale = n.cast(along_axis(n, n.in(1), x, "y_scale"), DType::F32);
  DType t = DType::U8;  // ONNX: uint8 without a zero point
  int zp = -1;
  if (n.has_input(2)) {
    t = n.dtype(n.in(2));
    int8_range(t);
    zp = n.cast(along_axis(n, n.in(2), x, "y_zero_point"), DType::F32);
  }
  n.set_output(0, quantize_to(n, n.cast(x, DType::F32), scale, zp, t));
}

void map_dequantize_linear(OnnxNode& n) {
  int x = n.in(0);
  DType t = n.dtype(x);
  if (t != DType::U8 && t != DType::I8 && t != DType::I32)
    unsupported("DequantizeLinear of dtype {} (coil reads uint8, int8 and int32)", dtype_name(t));
  n.attr_int("axis", 1);
  int scale = along_axis(n, n.in(1), x, "x_scale");
  DType out = n.dtype(scale);
  int y = n.cast(x, DType::F32);
  if (n.has_input(2)) {
    if (n.dtype(n.in(2)) != t)
      n.error("x_zero_point has dtype {}, x has {}", dtype_name(n.dtype(n.in(2))), dtype_name(t));
    y = n.add("sub", {y, n.cast(along_axis(n, n.in(2), x, "x_zero_point"), DType::F32)});
  }
  n.set_output(0, n.cast(n.add("mul", {y, n.cast(scale, DType::F32)}), out));
}

void map_dynamic_quantize_linear(OnnxNode& n) {
  int x = n.in(0);
  if (n.dtype(x) != DType::F32)
    unsupported("DynamicQuantizeLinear of dtype {} (ONNX defines it for float)",
                dtype_name(n.dtype(x)));
  std::vector<int64_t> all(static_cast<size_t>(n.rank(x)));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  int zero = n.scalar(0, DType::F32);
  // The range always includes 0, so that 0 is exact in the quantized form.
  int lo = n.add("minimum", {reduce(n, "min", x, all, false), zero});
  int hi = n.add("maximum", {reduce(n, "max", x, all, false), zero});
  int scale = n.add("div", {n.add("sub", {hi, lo}), n.scalar(255, DType::F32)});
  int zp = n.add("sub", {zero, n.add("div", {lo, scale})});
  zp = n.add("round", {n.add("clamp", {zp}, Attrs{{"min", 0.0}, {"max", 255.0}})});
  n.set_output(0, quantize_to(n, x, scale, zp, DType::U8));
  if (n.wants_output(1)) n.set_output(1, scale);
  if (n.wants_output(2)) n.set_output(2, n.cast(zp, DType::U8));
}

}  // namespace coil::onnxfe

// DFT and STFT (opset 17) as direct O(n^2) transforms: the transformed dim moved last, then one
// f64 matmul with a constant cos matrix and one with a sin matrix per real and imaginary part
// (complex values are ONNX's trailing dim of 2). f64 because ONNX's expected values are exact
// zeros where the sums cancel (a DFT of a ramp): summed in f32 those come out 1e-5 to 1e-4 off,
// beyond atol 1e-5; in f64 they are ~1e-13 off. The angles are 2 pi ((j k) mod n) / n, so the
// matrices are accurate for large j k too. Memory and time are n^2 per transformed line (an FFT
// would be n log n); sizes up to 2^14 per dim are accepted.
#include <cmath>
#include <numeric>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxDftLength = int64_t{1} << 14;
constexpr int64_t kMaxFrames = 4096;

struct Complex {
  int re, im;  // im: -1 for a real value
};

// The DFT along the last dim of x (f64 values [..., len]): the first `len` samples of a signal of
// `length` (the rest zeros), bins 0 .. bins - 1; inverse: e^{+i...} / length.
Complex dft_last(OnnxNode& n, Complex x, int64_t len, int64_t length, int64_t bins, bool inverse) {
  constexpr double kPi = 3.14159265358979323846;
  Tensor c = Tensor::empty(DType::F64, {len, bins}), s = Tensor::empty(DType::F64, {len, bins});
  double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
  for (int64_t j = 0; j < len; ++j)
    for (int64_t k = 0; k < bins; ++k) {
      double a = 2 * kPi * static_cast<double>((j * k) % length) / static_cast<double>(length);
      c.set_from_double(j * bins + k, scale * std::cos(a));
      s.set_from_double(j * bins + k, scale * sign * std::sin(a));
    }
  int cm = n.add_constant(c), sm = n.add_constant(s);
  auto mm = [&](int a, int b) { return n.add("matmul", {a, b}); };
  // (xr + i xi)(cos + i s) = xr cos - xi s + i (xr s + xi cos)
  int re = mm(x.re, cm), im = mm(x.re, sm);
  if (x.im >= 0) {
    re = n.add("sub", {re, mm(x.im, sm)});
    im = n.add("add", {im, mm(x.im, cm)});
  }
  return {re, im};
}

// x [..., 1] or [..., 2] (ONNX's real or complex form) as f64 parts without the last dim.
Complex parts(OnnxNode& n, int x) {
  int64_t r = n.rank(x);
  std::vector<int64_t> s = n.static_shape(x, "the input");
  int64_t last = s.back();
  if (last != 1 && last != 2)
    n.error("the last dim must be 1 (real) or 2 (complex), got {} (shape {})", last, shape_str(s));
  s.pop_back();
  auto part = [&](int64_t k) {
    int v = n.add("slice", {x}, Attrs{{"dim", r - 1}, {"start", k}, {"end", k + 1}});
    return n.cast(n.add("reshape", {v}, Attrs{{"shape", s}}), DType::F64);
  };
  return {part(0), last == 2 ? part(1) : -1};
}

// re and im stacked as ONNX's complex form (a trailing dim of 2), cast to t.
int stack(OnnxNode& n, Complex y, DType t) {
  int64_t r = n.rank(y.re);
  int re = n.add("unsqueeze", {y.re}, Attrs{{"dim", r}});
  int im = n.add("unsqueeze", {y.im}, Attrs{{"dim", r}});
  return n.cast(n.add("concat", {re, im}, Attrs{{"dim", r}}), t);
}

void check_length(OnnxNode& n, std::string_view what, int64_t v) {
  if (v < 1) n.error("{} {} is not positive", what, v);
  if (v > kMaxDftLength)
    unsupported("{} {} (a direct DFT: at most 2^14 points per transformed dim)", what, v);
}

}  // namespace

void map_dft(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r < 2) n.error("the input must have a signal dim and the real/complex dim, got rank {}", r);
  DType t = n.dtype(x);
  if (!is_floating(t)) n.error("the input must be floating point, got {}", dtype_name(t));
  int64_t a = n.attr_int("axis", 1);
  if (a < -r || a >= r - 1 || a == -1)
    n.error("axis {} is outside [{}, {}] and [0, {}] (the last dim holds real/imaginary parts)", a,
            -r, -2, r - 2);
  int64_t axis = a < 0 ? a + r : a;
  bool inverse = n.attr_int("inverse", 0) != 0, onesided = n.attr_int("onesided", 0) != 0;
  if (inverse && onesided)
    unsupported(
        "onesided with inverse (a one-sided spectrum's inverse is not defined by opset 17)");
  int64_t size = n.static_shape(x, "the input")[static_cast<size_t>(axis)];
  int64_t length = size;
  if (n.has_input(1)) length = n.const_int_scalar(1, "dft_length");
  check_length(n, "dft_length", length);
  if (length < size)  // truncated to dft_length; a longer one pads with zeros (fewer columns)
    x = n.add("slice", {x}, Attrs{{"dim", axis}, {"start", int64_t{0}}, {"end", length}});
  int64_t len = std::min(size, length), bins = onesided ? length / 2 + 1 : length;
  Complex p = parts(n, x);
  // The transformed dim last, and back.
  std::vector<int64_t> perm(static_cast<size_t>(r - 1));
  std::iota(perm.begin(), perm.end(), 0);
  perm.erase(perm.begin() + axis);
  perm.push_back(axis);
  std::vector<int64_t> back(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  bool moved = axis != r - 2;
  auto permute = [&](int v, const std::vector<int64_t>& dims) {
    return moved && v >= 0 ? n.add("permute", {v}, Attrs{{"dims", dims}}) : v;
  };
  Complex y = dft_last(n, {permute(p.re, perm), permute(p.im, perm)}, len, length, bins, inverse);
  n.set_output(0, stack(n, {permute(y.re, back), permute(y.im, back)}, t));
}

void map_stft(OnnxNode& n) {
  int x = n.in(0);
  if (n.rank(x) != 3) n.error("the signal must be [batch, length, 1 or 2], got rank {}", n.rank(x));
  DType t = n.dtype(x);
  if (!is_floating(t)) n.error("the signal must be floating point, got {}", dtype_name(t));
  std::vector<int64_t> s = n.static_shape(x, "the signal");
  int64_t step = n.const_int_scalar(1, "frame_step");
  if (step < 1) n.error("frame_step {} is not positive", step);
  int window = n.has_input(2) ? n.in(2) : -1;
  int64_t length = -1;
  if (n.has_input(3)) length = n.const_int_scalar(3, "frame_length");
  if (window >= 0) {
    std::vector<int64_t> ws = n.static_shape(window, "the window");
    if (ws.size() != 1) n.error("the window must be 1-D, got {}", shape_str(ws));
    if (length >= 0 && length != ws[0])
      n.error("frame_length {} differs from the window's length {}", length, ws[0]);
    length = ws[0];
  }
  if (length < 0) n.error("neither a window nor frame_length gives the frame length");
  check_length(n, "frame_length", length);
  if (length > s[1]) n.error("frame_length {} exceeds the signal's {} samples", length, s[1]);
  bool onesided = n.attr_int("onesided", 1) != 0;
  if (onesided && s[2] == 2) n.error("onesided needs a real signal (its last dim is 2: complex)");
  int64_t frames = (s[1] - length) / step + 1;
  if (frames > kMaxFrames) unsupported("{} frames (at most {})", frames, kMaxFrames);
  // [B, frames, length, 1 or 2]: one slice per frame.
  std::vector<int> pieces;
  for (int64_t f = 0; f < frames; ++f) {
    int v = n.add("slice", {x},
                  Attrs{{"dim", int64_t{1}}, {"start", f * step}, {"end", f * step + length}});
    pieces.push_back(n.add("unsqueeze", {v}, Attrs{{"dim", int64_t{1}}}));
  }
  int fr = pieces.size() == 1 ? pieces[0] : n.add("concat", pieces, Attrs{{"dim", int64_t{1}}});
  Complex p = parts(n, fr);
  if (window >= 0) {
    int w = n.cast(n.add("reshape", {window}, Attrs{{"shape", std::vector<int64_t>{1, 1, length}}}),
                   DType::F64);
    p.re = n.add("mul", {p.re, w});
    if (p.im >= 0) p.im = n.add("mul", {p.im, w});
  }
  int64_t bins = onesided ? length / 2 + 1 : length;
  n.set_output(0, stack(n, dft_last(n, p, length, length, bins, false), t));
}

}  // namespace coil::onnxfe

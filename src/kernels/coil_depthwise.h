// The depthwise convolution of generated CPU code (a conv2d with one input and one output
// channel per group: mobilenet's and efficientnet's 3x3 and 5x5 convs), computed on NCHW in
// place, with bias and the activation that follows it (relu, clamp, silu) applied to each
// output row while it is in registers and cache. Real code, tested against the reference
// interpreter by tests/unit/depthwise_conv_test.cpp, embedded into libcoil like coil_vec.h.
//
// Why not oneDNN: its depthwise kernels want blocked or channels-last activations, so each call
// reorders the NCHW input and output around the primitive (a 96-channel 112x112 stride-2 conv of
// mobilenet_v2: about 1.5 ms at one thread of which the convolution is 0.5 ms), and its relu
// and clip post-ops turn a NaN into 0 (lower/fold_conv_activations.cpp) so relu6 stayed a
// separate pass over the output. Here the activations use coil_vec.h's maximum/minimum/relu/
// sigmoid, bit for bit what coil's own pointwise kernels compute (NaN propagates).
//
// Usage (x [N, C, H, W], w [C, 1, KH, KW], bias [C] or null, y [N, C, OH, OW], contiguous f32):
//   coil::depthwise::Params p{N, C, H, W, KH, KW, {sh, sw}, {top, left}, {dh, dw}, OH, OW,
//                             coil::depthwise::Activation::clamp, 0.0f, 6.0f};
//   coil::depthwise::forward(p, x, w, bias, y);
//
// How: one (image, channel) plane per task over OpenMP threads (a plane is computed by one
// thread, so results do not depend on the thread count). The plane is first copied into a
// zero-padded scratch plane (per thread; its borders are zeroed once) split into `stride` column
// phases (phase j holds padded columns j, j + stride, ...), so that every tap of every output row
// reads a contiguous run of one phase row, with no bounds test; each phase row has a vector of
// zeros more, so full vectors are read past the last column. Output rows are computed four at a
// time, a vector of columns each, with the accumulators in registers: bias, then the taps in
// (kh, kw) order (that summation order), then the activation, one (masked) store.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "coil_vec.h"

#if defined(COIL_CPU_AVX512)
#include <immintrin.h>
#endif

namespace coil::depthwise {

enum class Activation { none, relu, clamp, silu };

struct Params {
  int64_t n, c, h, w, kh, kw;
  int64_t stride[2];    // h, w
  int64_t padding[2];   // top, left (bottom and right follow from the output size)
  int64_t dilation[2];  // h, w (1 = dense)
  int64_t oh, ow;
  Activation activation;
  float lo, hi;  // clamp: maximum(lo, y), then minimum(hi, .)
};

namespace detail {

using V = Vec<float>;
constexpr int64_t kLanes = V::size();

inline V activate(const Params& p, V v) {
  switch (p.activation) {
    case Activation::none:
      return v;
    case Activation::relu:
      return v.relu();
    case Activation::clamp:
      return V(p.hi).minimum(V(p.lo).maximum(v));
    case Activation::silu:
      return v * v.sigmoid();
  }
  return v;
}

/// The padded plane's geometry: rows r <-> input row r - top, columns t <-> input column
/// t - left; phase j, row r, entry u holds column u * stride_w + j.
struct Padded {
  int64_t rows, cols, phase_cols, row_stride, phase_stride;
};

inline Padded padded_shape(const Params& p) {
  Padded g;
  g.rows = (p.oh - 1) * p.stride[0] + (p.kh - 1) * p.dilation[0] + 1;
  g.cols = (p.ow - 1) * p.stride[1] + (p.kw - 1) * p.dilation[1] + 1;
  g.phase_cols = (g.cols + p.stride[1] - 1) / p.stride[1];
  g.row_stride = g.phase_cols + kLanes;  // a vector of zeros past the end
  g.phase_stride = g.rows * g.row_stride;
  return g;
}

#if defined(COIL_CPU_AVX512)
/// The 16 input columns [c0, c0 + 16) of row `in`, with zeros in the lanes outside [0, last):
/// a masked load, which reads (and can fault on) only the lanes it keeps.
inline __m512 columns(const float* in, int64_t c0, int64_t last) {
  const int64_t lo = std::clamp<int64_t>(-c0, 0, 16), hi = std::clamp<int64_t>(last - c0, 0, 16);
  if (lo >= hi) return _mm512_setzero_ps();
  const __mmask16 m = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  return _mm512_maskz_loadu_ps(
      m, reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(in) + c0 * 4));
}
#endif

/// Copies the plane (its padded rows [r0, r1), all by default) into the padded scratch. Only
/// the interior is written: the borders stay the zeros the scratch was created with (the same
/// cells for every plane). Row ranges let several threads fill one plane (coil_direct_conv.h).
inline void fill_padded(const Params& p, const Padded& g, const float* x, float* buf,
                        int64_t r0 = 0, int64_t r1 = -1) {
  const int64_t s = p.stride[1], left = p.padding[1];
  const int64_t last = std::min<int64_t>(p.w, g.cols - left);  // input columns [0, last)
  if (r1 < 0) r1 = g.rows;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ih = r - p.padding[0];
    if (ih < 0 || ih >= p.h) continue;
    const float* in = x + ih * p.w;
    float* out = buf + r * g.row_stride;
#if defined(COIL_CPU_AVX512)
    // Whole vectors read with masks, no library call per row: mobilenet_v2's 576-channel
    // 14x14 stride-2 conv spent most of its 0.12 ms (about 700 cycles a plane) in the fill's
    // per-row copies into a staging row, for 7x7 outputs of 9 taps.
    if (s == 1) {
      for (int64_t u = 0; u < last; u += kLanes) {
        const int64_t n = std::min<int64_t>(kLanes, last - u);
        _mm512_mask_storeu_ps(
            out + left + u, static_cast<__mmask16>((1u << n) - 1u),
            _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), in + u));
      }
      continue;
    }
    if (s == 2) {
      // Padded columns [t, t + 32) are input columns [t - left, t + 32 - left) (zeros outside
      // the image), split into the two phases with two permutes. What lands past phase_cols
      // is zeros, inside the phase rows' spare vector.
      const __m512i even =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd =
          _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      for (int64_t t = 0; t < g.cols; t += 32) {
        const __m512 a = columns(in, t - left, last), b = columns(in, t + 16 - left, last);
        _mm512_storeu_ps(out + t / 2, _mm512_permutex2var_ps(a, even, b));
        _mm512_storeu_ps(out + g.phase_stride + t / 2, _mm512_permutex2var_ps(a, odd, b));
      }
      continue;
    }
#endif
    if (s == 1) {
      if (last > 0) std::copy(in, in + last, out + left);
      continue;
    }
    for (int64_t j = 0; j < s; ++j) {
      // Entries u whose input column u * s + j - left is in [0, last): a branch-free strided
      // copy (a test per element took 0.7 ms of mobilenet's 96-channel 112x112 plane split).
      const int64_t lo = left > j ? (left - j + s - 1) / s : 0;
      const int64_t hi = std::min(g.phase_cols, (last + left - j + s - 1) / s);
      float* phase = out + j * g.phase_stride;
      const float* from = in + j - left;
      for (int64_t u = lo; u < hi; ++u) phase[u] = from[u * s];
    }
  }
}

/// Where tap (i, j) of output (0, 0) reads in the scratch, for each tap in (kh, kw) order.
inline std::vector<int64_t> tap_offsets(const Params& p, const Padded& g) {
  std::vector<int64_t> off;
  const int64_t s = p.stride[1];
  for (int64_t i = 0; i < p.kh; ++i)
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t t = j * p.dilation[1];  // padded column of output column 0
      off.push_back(i * p.dilation[0] * g.row_stride + (t % s) * g.phase_stride + t / s);
    }
  return off;
}

/// Output rows [oh, oh + R) of a plane, a vector of columns at a time, R accumulators at once.
/// Each accumulator is a chain of `taps` dependent adds; one at a time (R = 1) the adds' latency
/// bounded the kernel (a 144-channel 56x56 stride-1 conv of mobilenet_v2 without its fill:
/// 0.20 ms, 20 GMAC/s); four independent chains per tap, one weight broadcast shared, take
/// 0.15 ms, where reading and writing the planes from L3 is the floor. Each output's sum
/// (bias, then the taps in (kh, kw) order, multiply then add) is unchanged.
template <int R>
inline void rows(const Params& p, const Padded& g, const int64_t* off, int64_t taps,
                 const float* wt, float bias, float* y, const float* buf, int64_t oh) {
  const int64_t step = p.stride[0] * g.row_stride;
  const float* row = buf + oh * step;
  for (int64_t o = 0; o < p.ow; o += kLanes) {
    V acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = V(bias);
    for (int64_t k = 0; k < taps; ++k) {
      const V wv(wt[k]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = acc[r] + V::loadu(row + r * step + o + off[k]) * wv;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) activate(p, acc[r]).store(y + (oh + r) * p.ow + o, p.ow - o);
  }
}

inline void plane(const Params& p, const Padded& g, const int64_t* off, const float* x,
                  const float* wt, float bias, float* y, float* buf) {
  fill_padded(p, g, x, buf);
  const int64_t taps = p.kh * p.kw;
  int64_t oh = 0;
  for (; oh + 4 <= p.oh; oh += 4) rows<4>(p, g, off, taps, wt, bias, y, buf, oh);
  for (; oh < p.oh; ++oh) rows<1>(p, g, off, taps, wt, bias, y, buf, oh);
}

}  // namespace detail

inline void forward(const Params& p, const float* x, const float* w, const float* bias, float* y) {
  const int64_t planes = p.n * p.c;
  const detail::Padded g = detail::padded_shape(p);
  const std::vector<int64_t> off = detail::tap_offsets(p, g);
  // Threads only where each gets some work: below ~32K multiply-adds a plane split costs more
  // than it saves.
  const bool parallel = planes > 1 && planes * p.oh * p.ow * p.kh * p.kw >= (int64_t{1} << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(static_cast<size_t>(p.stride[1] * g.phase_stride));
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const int64_t ch = pl % p.c;
      detail::plane(p, g, off.data(), x + pl * p.h * p.w, w + ch * p.kh * p.kw,
                    bias ? bias[ch] : 0.0f, y + pl * p.oh * p.ow, buf.data());
    }
  }
}

}  // namespace coil::depthwise

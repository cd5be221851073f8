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
// zeros more, so full vectors are read past the last column. Output rows are computed a vector of
// columns at a time with the accumulator in a register: bias, then the taps in (kh, kw) order (that
// summation order), then the activation, one (masked) store.
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
  int64_t staging;  // floats of a padded input row staged for the AVX-512 stride-2 split
};

inline Padded padded_shape(const Params& p) {
  Padded g;
  g.rows = (p.oh - 1) * p.stride[0] + (p.kh - 1) * p.dilation[0] + 1;
  g.cols = (p.ow - 1) * p.stride[1] + (p.kw - 1) * p.dilation[1] + 1;
  g.phase_cols = (g.cols + p.stride[1] - 1) / p.stride[1];
  g.row_stride = g.phase_cols + kLanes;  // a vector of zeros past the end
  g.phase_stride = g.rows * g.row_stride;
#if defined(COIL_CPU_AVX512)
  g.staging = p.stride[1] == 2 ? (g.cols + 31) / 32 * 32 : 0;
#else
  g.staging = 0;
#endif
  return g;
}

/// Copies the plane (its padded rows [r0, r1), all by default) into the padded scratch. Only
/// the interior is written: the borders stay the zeros the scratch was created with (the same
/// cells for every plane). Row ranges let several threads fill one plane (coil_direct_conv.h);
/// with the AVX-512 stride-2 split, each range needs its own staging row (`staging`).
inline void fill_padded(const Params& p, const Padded& g, const float* x, float* buf,
                        int64_t r0 = 0, int64_t r1 = -1, float* staging = nullptr) {
  const int64_t s = p.stride[1], left = p.padding[1];
  const int64_t last = std::min<int64_t>(p.w, g.cols - left);  // input columns [0, last)
  if (r1 < 0) r1 = g.rows;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ih = r - p.padding[0];
    if (ih < 0 || ih >= p.h) continue;
    const float* in = x + ih * p.w;
    float* out = buf + r * g.row_stride;
    if (s == 1) {
      if (last > 0) std::copy(in, in + last, out + left);
      continue;
    }
#if defined(COIL_CPU_AVX512)
    if (s == 2) {
      // The padded row is staged contiguously (its zeros past the image stay from the scratch's
      // creation), then 32 columns at a time split into the two phases with two permutes.
      // What lands past phase_cols is the staged row's zeros, inside the phase rows' spare
      // vector.
      float* staged = staging ? staging : buf + s * g.phase_stride;
      if (last > 0) std::copy(in, in + last, staged + left);
      const __m512i even =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd =
          _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      for (int64_t t = 0; t < g.cols; t += 32) {
        const __m512 a = _mm512_loadu_ps(staged + t), b = _mm512_loadu_ps(staged + t + 16);
        _mm512_storeu_ps(out + t / 2, _mm512_permutex2var_ps(a, even, b));
        _mm512_storeu_ps(out + g.phase_stride + t / 2, _mm512_permutex2var_ps(a, odd, b));
      }
      continue;
    }
#endif
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

inline void plane(const Params& p, const Padded& g, const int64_t* off, const float* x,
                  const float* wt, float bias, float* y, float* buf) {
  fill_padded(p, g, x, buf);
  const int64_t taps = p.kh * p.kw;
  for (int64_t oh = 0; oh < p.oh; ++oh) {
    const float* row = buf + oh * p.stride[0] * g.row_stride;
    for (int64_t o = 0; o < p.ow; o += kLanes) {
      V acc(bias);
      for (int64_t k = 0; k < taps; ++k) acc = acc + V::loadu(row + o + off[k]) * V(wt[k]);
      activate(p, acc).store(y + oh * p.ow + o, p.ow - o);
    }
  }
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
    std::vector<float> buf(static_cast<size_t>(p.stride[1] * g.phase_stride + g.staging));
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const int64_t ch = pl % p.c;
      detail::plane(p, g, off.data(), x + pl * p.h * p.w, w + ch * p.kh * p.kw,
                    bias ? bias[ch] : 0.0f, y + pl * p.oh * p.ow, buf.data());
    }
  }
}

}  // namespace coil::depthwise

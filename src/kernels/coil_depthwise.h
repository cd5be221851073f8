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

/// Which loop computes the conv (tests force each; generated code leaves `automatic`).
/// planes: one (image, channel) plane at a time, a vector of output columns per step;
/// channel_blocks (AVX-512): 16 channels in the lanes of a vector, see detail::cblock.
enum class Path { automatic, planes, channel_blocks };

struct Params {
  int64_t n, c, h, w, kh, kw;
  int64_t stride[2];    // h, w
  int64_t padding[2];   // top, left (bottom and right follow from the output size)
  int64_t dilation[2];  // h, w (1 = dense)
  int64_t oh, ow;
  Activation activation;
  float lo, hi;  // clamp: maximum(lo, y), then minimum(hi, .)
  Path path = Path::automatic;
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

#if defined(COIL_CPU_AVX512)
/// Channel blocks: 16 channels of an image in the 16 lanes of a vector, so that every vector
/// is full whatever the plane's width. On NCHW planes of 7, 14 or 28 columns the planes path
/// uses 7/16 .. 28/32 of its lanes and pays a plane's fill and per-row overheads for 49..784
/// outputs (mobilenet_v2's 960-channel 7x7 conv: 0.11 ms at one thread where ONNX Runtime,
/// whose activations are channel-blocked throughout, takes 0.024).
///
/// Per task (an image, a block of 16 channels, a band of output rows): the band's input rows
/// are transposed into a zero-padded scratch S[row][column][16 channels] (16 columns of 16
/// planes loaded, a 16 x 16 transpose in registers, 16 stores); then each output row is
/// computed NB positions at a time, NB accumulators of 16 channels, bias then the taps in
/// (kh, kw) order (the planes path's order: the same sums), the activation, and a transpose
/// back into the 16 NCHW output rows (masked stores). Tasks are independent, so the result
/// does not depend on the thread count.
namespace cblock {

constexpr int kC = 16;  // channels per block

/// r[i][j] <-> r[j][i] for the 16 x 16 floats of r[0..15].
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] =
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(
        _mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(
        _mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4q + m] now holds, in 128-bit lane l, elements (4l + m)-th column of rows 4q .. 4q + 3.
  for (int q = 0; q < 2; ++q)
    for (int m = 0; m < 4; ++m) {
      t[8 * q + m] = _mm512_shuffle_f32x4(r[8 * q + m], r[8 * q + 4 + m], 0x88);
      t[8 * q + 4 + m] = _mm512_shuffle_f32x4(r[8 * q + m], r[8 * q + 4 + m], 0xdd);
    }
  for (int m = 0; m < 8; ++m) {
    r[m] = _mm512_shuffle_f32x4(t[m], t[8 + m], 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(t[m], t[8 + m], 0xdd);
  }
}

inline __mmask16 first(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

/// The scratch's geometry: `pitch` columns per row (the padded columns, and zeros up to the
/// last column a block of NB positions reads), `rows` rows per band.
struct Geometry {
  int64_t pitch, band_out_rows, band_rows;
};

inline Geometry geometry(const Params& p, const Padded& g, int nb) {
  Geometry q;
  const int64_t out_cols = (p.ow + nb - 1) / nb * nb;
  q.pitch = std::max(g.cols, (out_cols - 1) * p.stride[1] + (p.kw - 1) * p.dilation[1] + 1);
  // Bands of output rows whose scratch takes at most ~96 KiB (L2-resident next to the planes
  // being read and written); a small plane is one band.
  const int64_t row_bytes = q.pitch * kC * 4;
  const int64_t halo = (p.kh - 1) * p.dilation[0] + 1;
  int64_t rows = std::max<int64_t>(1, (96 * 1024 / row_bytes - halo) / p.stride[0] + 1);
  q.band_out_rows = std::min(rows, p.oh);
  q.band_rows = (q.band_out_rows - 1) * p.stride[0] + halo;
  return q;
}

/// Padded rows [r0, r0 + q.band_rows) of channels [c0, c0 + cn) of image x into S.
inline void fill(const Params& p, const Padded& g, const Geometry& q, const float* x, int64_t cn,
                 int64_t r0, float* S) {
  const int64_t plane = p.h * p.w, left = p.padding[1];
  const int64_t last = std::min<int64_t>(p.w, g.cols - left);  // input columns [0, last)
  for (int64_t r = r0; r < r0 + q.band_rows; ++r) {
    float* row = S + (r - r0) * q.pitch * kC;
    const int64_t ih = r - p.padding[0];
    if (ih < 0 || ih >= p.h) {
      std::fill(row, row + q.pitch * kC, 0.0f);
      continue;
    }
    if (p.w < 16 && last == p.w) {
      // Narrow rows: 16 consecutive elements of the planes (this row and the next ones, the
      // rows of a plane being contiguous) per transpose instead of one row's few columns.
      int64_t rows_here = 1;  // this and the following in-range rows of the band
      while (r + rows_here < r0 + q.band_rows && ih + rows_here < p.h) ++rows_here;
      const int64_t count = rows_here * p.w;
      for (int64_t e0 = 0; e0 < count; e0 += 16) {
        const __mmask16 m = first(count - e0);
        __m512 v[16];
        for (int c = 0; c < 16; ++c)
          v[c] = c < cn ? _mm512_maskz_loadu_ps(m, x + c * plane + ih * p.w + e0)
                        : _mm512_setzero_ps();
        transpose16(v);
        const int64_t n = std::min<int64_t>(16, count - e0);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t e = e0 + j, rr = e / p.w, cc = e % p.w;
          _mm512_storeu_ps(row + (rr * q.pitch + left + cc) * kC, v[j]);
        }
      }
      r += rows_here - 1;
      continue;
    }
    for (int64_t w0 = 0; w0 < last; w0 += 16) {
      const __mmask16 m = first(last - w0);
      __m512 v[16];
      for (int c = 0; c < 16; ++c)
        v[c] =
            c < cn ? _mm512_maskz_loadu_ps(m, x + c * plane + ih * p.w + w0) : _mm512_setzero_ps();
      transpose16(v);
      const int64_t n = std::min<int64_t>(16, last - w0);
      for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(row + (left + w0 + j) * kC, v[j]);
    }
  }
}

/// Output rows `oh` and `oh + 1` of at most 8 columns (ow <= 8) as one block of 16 positions:
/// lanes 0..7 the first row's columns, 8..15 the second's; after the transpose both rows of a
/// channel are contiguous in NCHW (2 * ow elements from oh * ow), stored with one permute and
/// one masked store. A lone last row passes `two = false`.
template <int SW>
inline void row_pair(const Params& p, const Geometry& q, const int64_t* off, int64_t taps,
                     const float* wt, __m512 bias, const float* S, int64_t oh, int64_t oh0,
                     float* y, int64_t cn, bool two) {
  const int64_t sw = SW > 0 ? SW : p.stride[1];
  const int64_t step = p.stride[0] * q.pitch * kC;  // one output row further in S
  const float* base = S + (oh - oh0) * step;
  __m512 acc[16];
  for (int b = 0; b < 16; ++b) acc[b] = bias;
  for (int64_t k = 0; k < taps; ++k) {
    const __m512 wv = _mm512_loadu_ps(wt + k * kC);
    const float* at = base + off[k];
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b)
      acc[b] = (V(acc[b]) + V(_mm512_loadu_ps(at + b * sw * kC)) * V(wv)).reg();
    if (two) {
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b)
        acc[8 + b] = (V(acc[8 + b]) + V(_mm512_loadu_ps(at + step + b * sw * kC)) * V(wv)).reg();
    }
  }
  for (int b = 0; b < 16; ++b) acc[b] = activate(p, V(acc[b])).reg();
  transpose16(acc);
  // Lanes [0, ow) and [8, 8 + ow) next to each other.
  alignas(64) int32_t idx[16];
  for (int i = 0; i < 16; ++i) idx[i] = i < p.ow ? i : 8 + (i - static_cast<int>(p.ow)) % 8;
  const __m512i pack = _mm512_load_si512(idx);
  const __mmask16 m = first(two ? 2 * p.ow : p.ow);
  const int64_t out_plane = p.oh * p.ow;
  for (int64_t c = 0; c < cn; ++c)
    _mm512_mask_storeu_ps(y + c * out_plane + oh * p.ow, m, _mm512_permutexvar_ps(pack, acc[c]));
}

/// Output row `oh` (band row `oh - oh0`), NB positions at a time, of 16 channels.
template <int NB, int SW>
inline void row(const Params& p, const Geometry& q, const int64_t* off, int64_t taps,
                const float* wt, __m512 bias, const float* S, int64_t oh, int64_t oh0, float* y,
                int64_t cn) {
  const int64_t sw = SW > 0 ? SW : p.stride[1];
  const float* srow = S + (oh - oh0) * p.stride[0] * q.pitch * kC;
  const int64_t out_plane = p.oh * p.ow;
  for (int64_t o0 = 0; o0 < p.ow; o0 += NB) {
    const float* base = srow + o0 * sw * kC;
    __m512 acc[16];
    for (int b = 0; b < NB; ++b) acc[b] = bias;
    for (int64_t k = 0; k < taps; ++k) {
      const __m512 wv = _mm512_loadu_ps(wt + k * kC);
      const float* at = base + off[k];
#pragma GCC unroll 16
      for (int b = 0; b < NB; ++b)
        acc[b] = (V(acc[b]) + V(_mm512_loadu_ps(at + b * sw * kC)) * V(wv)).reg();
    }
    for (int b = 0; b < NB; ++b) acc[b] = activate(p, V(acc[b])).reg();
    for (int b = NB; b < 16; ++b) acc[b] = _mm512_setzero_ps();
    transpose16(acc);
    const __mmask16 m = first(p.ow - o0);
    for (int64_t c = 0; c < cn; ++c)
      _mm512_mask_storeu_ps(y + c * out_plane + oh * p.ow + o0, m, acc[c]);
  }
}

template <int NB, int SW>
inline void run(const Params& p, const float* x, const float* w, const float* bias, float* y) {
  const Padded g = padded_shape(p);
  const Geometry q = geometry(p, g, NB);
  const int64_t taps = p.kh * p.kw;
  std::vector<int64_t> off;  // tap (i, j) of output (0, 0), in floats of S
  for (int64_t i = 0; i < p.kh; ++i)
    for (int64_t j = 0; j < p.kw; ++j)
      off.push_back((i * p.dilation[0] * q.pitch + j * p.dilation[1]) * kC);
  const int64_t blocks = (p.c + kC - 1) / kC,
                bands = (p.oh + q.band_out_rows - 1) / q.band_out_rows;
  const int64_t tasks = p.n * blocks * bands;
  const bool parallel = tasks > 1 && p.n * p.c * p.oh * p.ow * taps >= (int64_t{1} << 15);
#pragma omp parallel if (parallel)
  {
    // Zeros where no fill writes (the padding columns and the columns past them) stay zeros.
    std::vector<float> scratch(static_cast<size_t>(q.band_rows * q.pitch * kC), 0.0f);
    std::vector<float> wt(static_cast<size_t>(taps * kC));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t band = t % bands, blk = (t / bands) % blocks, n = t / bands / blocks;
      const int64_t c0 = blk * kC, cn = std::min<int64_t>(kC, p.c - c0);
      for (int64_t k = 0; k < taps; ++k)
        for (int64_t c = 0; c < kC; ++c)
          wt[static_cast<size_t>(k * kC + c)] = c < cn ? w[(c0 + c) * taps + k] : 0.0f;
      __m512 b = _mm512_setzero_ps();
      if (bias) b = _mm512_maskz_loadu_ps(first(cn), bias + c0);
      const int64_t oh0 = band * q.band_out_rows, oh1 = std::min(p.oh, oh0 + q.band_out_rows);
      fill(p, g, q, x + (n * p.c + c0) * p.h * p.w, cn, oh0 * p.stride[0], scratch.data());
      float* yb = y + (n * p.c + c0) * p.oh * p.ow;
      if (NB == 8) {
        for (int64_t oh = oh0; oh < oh1; oh += 2)
          row_pair<SW>(p, q, off.data(), taps, wt.data(), b, scratch.data(), oh, oh0, yb, cn,
                       oh + 1 < oh1);
      } else {
        for (int64_t oh = oh0; oh < oh1; ++oh)
          row<NB, SW>(p, q, off.data(), taps, wt.data(), b, scratch.data(), oh, oh0, yb, cn);
      }
    }
  }
}

/// Whether channel blocks beat the planes path (measured on mobilenet_v2's and efficientnet's
/// depthwise convs, bench/depthwise_bench.cpp): wherever a block of 16 channels is mostly full
/// and an output row is narrow enough that the planes path wastes lanes on it.
inline bool preferred(const Params& p) {
  return p.c >= 8 && p.ow <= 14;
}

inline void forward(const Params& p, const float* x, const float* w, const float* bias, float* y) {
  const bool narrow = p.ow <= 8;
  if (p.stride[1] == 1) {
    narrow ? run<8, 1>(p, x, w, bias, y) : run<16, 1>(p, x, w, bias, y);
  } else if (p.stride[1] == 2) {
    narrow ? run<8, 2>(p, x, w, bias, y) : run<16, 2>(p, x, w, bias, y);
  } else {
    narrow ? run<8, 0>(p, x, w, bias, y) : run<16, 0>(p, x, w, bias, y);
  }
}

}  // namespace cblock
#endif

}  // namespace detail

inline void forward(const Params& p, const float* x, const float* w, const float* bias, float* y) {
#if defined(COIL_CPU_AVX512)
  if (p.path == Path::channel_blocks ||
      (p.path == Path::automatic && detail::cblock::preferred(p))) {
    detail::cblock::forward(p, x, w, bias, y);
    return;
  }
#endif
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

// A dense convolution with few input channels (an image stem: resnet's 7x7 stride-2 3 -> 64,
// mobilenet's and efficientnet's 3x3 stride-2 3 -> 32), computed directly on NCHW with bias and
// the activation that follows it (relu, clamp, silu) applied to each output vector while it is
// in a register. Real code, tested against the reference interpreter by
// tests/unit/direct_conv_test.cpp, embedded into libcoil like coil_vec.h.
//
// Why not oneDNN: with 3 input channels its kernels run far below the FMA rate and reorder the
// output from its blocked layout back to NCHW on every call, and its relu6 (clip) post-op turns a
// NaN into 0, so mobilenet's relu6 was a separate pass. Measured at one thread (`coil bench
// --profile`, load about 5): resnet18's stem 1.84 ms for 118 MFLOP (64 GFLOP/s), mobilenet_v2's
// 0.54 ms and efficientnet_b0's 0.82 ms (with silu) for 22 MFLOP each.
//
// Usage (x [N, C, H, W], w [OC, C, KH, KW], bias [OC] or null, y [N, OC, OH, OW], contiguous f32):
//   coil::direct::Params p{N, C, H, W, OC, KH, KW, {sh, sw}, {top, left}, {dh, dw}, OH, OW,
//                          coil::depthwise::Activation::relu, 0.0f, 0.0f};
//   coil::direct::forward(p, x, w, bias, y);
//
// How: each input plane is copied once per call into a zero-padded scratch split into `stride`
// column phases, as the depthwise kernel does (coil_depthwise.h), so every tap of an output row
// reads a contiguous run. Then, per task (image, block of up to 8 output channels, band of 6
// output rows), a vector of output columns of 3 rows of every channel of the block is
// accumulated in registers (24 accumulators): bias, then the taps in (c, kh, kw) order, per tap
// 3 input vector loads and 8 weight broadcasts (from a per-call packed copy
// [block][tap][channel]) feeding 24 FMAs, then the activation and one (masked) store each. Tasks
// run band by band (all blocks of a band, then the next band). A task is computed by one thread,
// so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "coil_depthwise.h"
#include "coil_vec.h"

namespace coil::direct {

using Activation = coil::depthwise::Activation;

struct Params {
  int64_t n, c, h, w, oc, kh, kw;
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
constexpr int64_t kBlock = 8;  // output channels per task
constexpr int64_t kBand = 6;   // output rows per task: twice 3 rows of 8 channels, 24 accumulators

/// a * b + c in one rounding where the ISA has FMA (generated code is built with
/// -ffp-contract=off, so a * b + c would be two instructions).
inline V fmadd(const V& a, const V& b, const V& c) {
#if defined(COIL_CPU_AVX512)
  return _mm512_fmadd_ps(a.reg(), b.reg(), c.reg());
#elif defined(COIL_CPU_AVX2)
  return _mm256_fmadd_ps(a.reg(), b.reg(), c.reg());
#else
  return a * b + c;
#endif
}

/// The depthwise kernel's view of one input plane: its padded-scratch geometry and filling.
inline depthwise::Params plane_params(const Params& p) {
  return depthwise::Params{p.n,
                           p.c,
                           p.h,
                           p.w,
                           p.kh,
                           p.kw,
                           {p.stride[0], p.stride[1]},
                           {p.padding[0], p.padding[1]},
                           {p.dilation[0], p.dilation[1]},
                           p.oh,
                           p.ow,
                           p.activation,
                           p.lo,
                           p.hi};
}

/// Output rows [r0, r0 + R) of B channels, a vector of columns at a time: `in` is image n's
/// padded scratch, `off` the tap offsets in (c, kh, kw) order, `wp` the block's packed weights
/// [tap][B], `y` channel 0 of the block in image n. B x R accumulators: per tap R input vectors
/// and B broadcast weights feed B * R FMAs (with R = 1 the broadcasts, one load each, would
/// bound it at about one FMA per cycle where the core has two).
template <int B, int R>
void block_rows(const depthwise::Params& dp, int64_t row_stride, const int64_t* off, int64_t taps,
                const float* in, const float* wp, const float* bias, float* y, int64_t r0) {
  const int64_t plane = dp.oh * dp.ow, step = dp.stride[0] * row_stride;
  const float* row = in + r0 * step;
  for (int64_t o = 0; o < dp.ow; o += kLanes) {
    V acc[B][R];
#pragma GCC unroll 16
    for (int b = 0; b < B; ++b) {
      const V init(bias ? bias[b] : 0.0f);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[b][r] = init;
    }
    for (int64_t k = 0; k < taps; ++k) {
      V x[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) x[r] = V::loadu(row + r * step + o + off[k]);
      const float* wk = wp + k * B;
#pragma GCC unroll 16
      for (int b = 0; b < B; ++b) {
        const V wv(wk[b]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[b][r] = fmadd(x[r], wv, acc[b][r]);
      }
    }
#pragma GCC unroll 16
    for (int b = 0; b < B; ++b)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        depthwise::detail::activate(dp, acc[b][r])
            .store(y + b * plane + (r0 + r) * dp.ow + o, dp.ow - o);
  }
}

/// Rows [r0, r1) of B channels: three at a time, then one.
template <int B>
void block(const depthwise::Params& dp, int64_t row_stride, const int64_t* off, int64_t taps,
           const float* in, const float* wp, const float* bias, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 3 <= r1; r += 3) block_rows<B, 3>(dp, row_stride, off, taps, in, wp, bias, y, r);
  for (; r < r1; ++r) block_rows<B, 1>(dp, row_stride, off, taps, in, wp, bias, y, r);
}

/// Channels [oc0, oc0 + count) as blocks of 8, 4, 2 and 1 (few instantiations: every module
/// that includes this header compiles them).
inline void channels(const depthwise::Params& dp, int64_t row_stride, const int64_t* off,
                     int64_t taps, const float* in, const float* wp, const float* bias, float* y,
                     int64_t count, int64_t r0, int64_t r1) {
  const int64_t plane = dp.oh * dp.ow;
  int64_t done = 0;
  auto run = [&](auto size) {
    constexpr int B = decltype(size)::value;
    for (; count - done >= B; done += B)
      block<B>(dp, row_stride, off, taps, in, wp + done * taps, bias ? bias + done : nullptr,
               y + done * plane, r0, r1);
  };
  run(std::integral_constant<int, 8>{});
  run(std::integral_constant<int, 4>{});
  run(std::integral_constant<int, 2>{});
  run(std::integral_constant<int, 1>{});
}

/// The calling thread's padded scratch for these parameters: zeroed when the geometry changed
/// (the borders must be zeros; the interior is rewritten by every call).
inline float* scratch(const Params& p, size_t floats) {
  thread_local std::vector<float> buf;
  thread_local std::vector<int64_t> key;
  std::vector<int64_t> k = {p.n,           p.c,           p.h,         p.w,          p.kh,
                            p.kw,          p.stride[0],   p.stride[1], p.padding[0], p.padding[1],
                            p.dilation[0], p.dilation[1], p.oh,        p.ow};
  if (k != key || buf.size() != floats) {
    buf.assign(floats, 0.0f);
    key = std::move(k);
  }
  return buf.data();
}

}  // namespace detail

inline void forward(const Params& p, const float* x, const float* w, const float* bias, float* y) {
  using namespace detail;
  const depthwise::Params dp = plane_params(p);
  const depthwise::detail::Padded g = depthwise::detail::padded_shape(dp);
  // One padded plane per (image, input channel).
  const int64_t plane_floats = p.stride[1] * g.phase_stride;
  float* pad = scratch(p, static_cast<size_t>(p.n * p.c * plane_floats));
  const std::vector<int64_t> tap = depthwise::detail::tap_offsets(dp, g);
  const int64_t kk = p.kh * p.kw, taps = p.c * kk;
  std::vector<int64_t> off(static_cast<size_t>(taps));
  for (int64_t c = 0; c < p.c; ++c)
    for (int64_t k = 0; k < kk; ++k)
      off[static_cast<size_t>(c * kk + k)] = c * plane_floats + tap[k];
  // Weights packed [oc][tap] -> per block of kBlock channels [tap][channel]: a block's
  // channels at one tap are adjacent, broadcast one after the other.
  const int64_t blocks = (p.oc + kBlock - 1) / kBlock;
  std::vector<float> wp(static_cast<size_t>(p.oc * taps));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t oc0 = b * kBlock, count = std::min(kBlock, p.oc - oc0);
    // Within a block, sub-blocks of 8/4/2/1 channels (channels()) each see [tap][sub].
    int64_t done = 0;
    for (int64_t sub : {8, 4, 2, 1})
      for (; count - done >= sub; done += sub)
        for (int64_t t = 0; t < taps; ++t)
          for (int64_t j = 0; j < sub; ++j)
            wp[static_cast<size_t>((oc0 + done) * taps + t * sub + j)] =
                w[(oc0 + done + j) * taps + t];
  }
  const int64_t bands = (p.oh + kBand - 1) / kBand;
  const int64_t tasks = p.n * blocks * bands;
  const bool parallel = tasks > 1 && p.n * p.oc * p.oh * p.ow * taps >= (int64_t{1} << 15);
  // The planes are filled in bands of padded rows, so that both threads share the copy of 3
  // planes (mobilenet's 3 x 224 x 224: about a fifth of the whole conv at one thread).
  //
  // Both loops run image, then row band, outermost, so that under the static schedule each
  // thread computes about the rows it padded itself (they are in its own cache) and every
  // block of channels of a band reads the band's input rows while they are in L1/L2. Blocks
  // outermost (as first written) made each of two threads stream all the planes, half of them
  // filled by the other core, once per block of channels: mobilenet_v2's stem took 0.28-0.45
  // ms at two threads against 0.18-0.19 ms at one (its repro, medians of 300 runs); band-major
  // 0.14-0.18 ms at two (best 0.105), the same at one.
  constexpr int64_t kFillRows = 16;
  const int64_t fill_bands = (g.rows + kFillRows - 1) / kFillRows;
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < p.n * p.c * fill_bands; ++i) {
      const int64_t n = i / (fill_bands * p.c), r0 = i / p.c % fill_bands * kFillRows;
      const int64_t pl = n * p.c + i % p.c;
      depthwise::detail::fill_padded(dp, g, x + pl * p.h * p.w, pad + pl * plane_floats, r0,
                                     std::min(g.rows, r0 + kFillRows));
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t n = t / (blocks * bands), band = t / blocks % bands, b = t % blocks;
      const int64_t oc0 = b * kBlock, count = std::min(kBlock, p.oc - oc0);
      const int64_t r0 = band * kBand, r1 = std::min(p.oh, r0 + kBand);
      channels(dp, g.row_stride, off.data(), taps, pad + n * p.c * plane_floats,
               wp.data() + oc0 * taps, bias ? bias + oc0 : nullptr,
               y + (n * p.oc + oc0) * p.oh * p.ow, count, r0, r1);
    }
  }
}

}  // namespace coil::direct

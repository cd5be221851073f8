// An inverted residual block's expand conv (1x1, bias, activation) and the depthwise conv that
// reads it (mobilenet_v2's and efficientnet's t = 6 blocks), computed band by band of output
// rows so that the expanded tensor, six times the block's input, never leaves the caches.
// Real code, tested against the reference interpreter by tests/unit/expand_depthwise_test.cpp.
//
// Why: apart, the expand conv writes its output (96 x 112 x 112 floats, 4.8 MB, in
// mobilenet_v2's second block) to memory and the depthwise conv reads it back: in that model at
// one thread the pair took 0.53 + 0.60 ms where each alone, on data in the caches, takes 0.31 and
// 0.38 (ONNX Runtime's two convs: 0.44 + 0.26). Here the expanded rows a band of output rows
// needs are computed into a per-thread scratch of at most kScratchBytes and consumed at once.
//
// Usage (x [N, C_in, H, W], w1 [C, C_in], b1 [C] or null, wd [C, 1, KH, KW], bd [C] or null,
// y [N, C, OH, OW], contiguous f32):
//   coil::expand_depthwise::Params p{dw, C_in, coil::depthwise::Activation::clamp, 0.f, 6.f};
//   coil::expand_depthwise::forward(p, x, w1, b1, wd, bd, y);
// where dw is the depthwise conv's coil::depthwise::Params over the expanded [N, C, H, W].
//
// How: tasks are (image, band of output rows), over OpenMP threads (the band count a multiple
// of the thread count). A task packs the input rows its band reads (about kBandInputRows; the
// rows its taps share with the next band are computed by both: kernel - stride of every
// kBandInputRows expanded rows, 2 of 32 for a 3x3 conv at stride 1) as the matmul's B, then per
// chunk of channels: the matmul template (coil_gemm.h, on the calling thread) with the bias
// and activation in its epilogue writes the chunk's expanded rows E[channel][row][column], and
// the depthwise kernel's planes path (coil_depthwise.h) computes each channel's output rows of
// the band from them.
// Every output is the sum the two kernels compute apart (each expanded value: the matmul's
// chain in increasing k, then + bias, then the activation; each depthwise output: bias, then
// the taps in (kh, kw) order), so results do not depend on the band or the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "coil_depthwise.h"
#include "coil_gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace coil::expand_depthwise {

struct Params {
  depthwise::Params dw;              // the depthwise conv, over the expanded tensor [n, c, h, w]
  int64_t c_in;                      // the expand conv's input channels
  depthwise::Activation activation;  // the expand conv's, after its bias
  float lo, hi;                      // clamp: maximum(lo, v), then minimum(hi, .)
};

namespace detail {

// A chunk's expanded rows stay within this much (a quarter of a 1 MiB L2), beside the packed
// input rows and the depthwise kernel's padded plane.
constexpr int64_t kScratchBytes = 256 * 1024;
// Input rows per band (about), before rounding the band count to the thread count: the rows
// recomputed by two bands cost (kernel - stride) / kBandInputRows of the expand's work.
constexpr int64_t kBandInputRows = 32;

struct Geometry {
  int64_t band_rows, bands;  // output rows per band, bands per image
  int64_t in_rows;           // input rows a band reads at most
  int64_t chunk;             // channels per chunk (a multiple of the matmul's row panel)
};

inline Geometry geometry(const Params& p, int threads) {
  const depthwise::Params& d = p.dw;
  Geometry g;
  const int64_t band_out = std::max<int64_t>(1, kBandInputRows / d.stride[0]);
  int64_t bands = std::max<int64_t>(1, (d.oh + band_out / 2) / band_out);
  if (threads > 1 && d.n < threads) bands = (bands + threads - 1) / threads * threads;
  bands = std::min(bands, d.oh);
  g.band_rows = (d.oh + bands - 1) / bands;
  g.bands = (d.oh + g.band_rows - 1) / g.band_rows;
  g.in_rows = std::min(d.h, (g.band_rows - 1) * d.stride[0] + (d.kh - 1) * d.dilation[0] + 1);
  const int64_t per_channel = std::max<int64_t>(1, g.in_rows * d.w * 4);
  const int64_t chunks =
      std::max<int64_t>(1, (d.c * per_channel + kScratchBytes - 1) / kScratchBytes);
  const int64_t mr = gemm::kMR;
  g.chunk = ((d.c + chunks - 1) / chunks + mr - 1) / mr * mr;
  return g;
}

/// Output rows [oh0, oh0 + bp.oh) of channels [c0, c0 + cn) of image n from the chunk's
/// expanded rows e (cols floats per channel). Kept out of line: inlined into forward's parallel
/// region, GCC kept the planes path's four accumulators on the stack (0.6x the kernel apart).
__attribute__((noinline)) inline void band_planes(const depthwise::Params& bp,
                                                  const depthwise::detail::Padded& g,
                                                  const int64_t* off, const float* e, int64_t cols,
                                                  const float* wd, const float* bd, int64_t c0,
                                                  int64_t cn, float* y, int64_t out_plane,
                                                  float* plane) {
  const int64_t taps = bp.kh * bp.kw;
  for (int64_t i = 0; i < cn; ++i) {
    const int64_t ch = c0 + i;
    depthwise::detail::plane(bp, g, off, e + i * cols, wd + ch * taps, bd ? bd[ch] : 0.0f,
                             y + ch * out_plane, plane);
  }
}

}  // namespace detail

inline void forward(const Params& p, const float* x, const float* w1, const float* b1,
                    const float* wd, const float* bd, float* y) {
  using V = Vec<float>;
  const depthwise::Params& d = p.dw;
  if (d.n <= 0 || d.c <= 0 || d.oh <= 0 || d.ow <= 0) return;
  int threads = 1;
#ifdef _OPENMP
  threads = omp_in_parallel() ? 1 : omp_get_max_threads();
#endif
  const detail::Geometry geo = detail::geometry(p, threads);
  const int64_t taps = d.kh * d.kw, hw = d.h * d.w, out_plane = d.oh * d.ow;
  const int64_t s = d.stride[0], top = d.padding[0];
  // The padded plane of a band: the same geometry for every band (a band's own rows above
  // and below the image are zeroed before each fill), so its column borders stay zero.
  depthwise::Params band = d;
  band.n = band.c = 1;
  band.oh = geo.band_rows;
  band.path = depthwise::Path::planes;
  const depthwise::detail::Padded g = depthwise::detail::padded_shape(band);
  const std::vector<int64_t> off = depthwise::detail::tap_offsets(band, g);
  const int64_t max_cols = geo.in_rows * d.w;
  const gemm::Blocking blk = gemm::choose_blocking(geo.chunk, max_cols, p.c_in, 4);
  const int64_t packed_floats = gemm::packed_b_elements(p.c_in, max_cols, blk);
  const int64_t expanded_floats = geo.chunk * max_cols;
  const int64_t plane_floats = d.stride[1] * g.phase_stride;
  depthwise::Params act = d;  // the expand's activation, as depthwise::detail::activate takes it
  act.activation = p.activation;
  act.lo = p.lo;
  act.hi = p.hi;
  const int64_t tasks = d.n * geo.bands;

#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1)
  {
    // The packed rows and the expanded chunk: this thread's scratch, kept between calls (no
    // allocation or page faults per call; coil_gemm.h's slot 2, which nothing else uses).
    float* const packed = static_cast<float*>(
        gemm::detail::thread_scratch_slot<2>(4 * (packed_floats + expanded_floats) + 64));
    float* const expanded = packed + (packed_floats + 15) / 16 * 16;
    std::vector<float> plane(static_cast<size_t>(plane_floats), 0.0f);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t n = t / geo.bands, oh0 = (t % geo.bands) * geo.band_rows;
      const int64_t oh1 = std::min(d.oh, oh0 + geo.band_rows);
      // Padded rows [r_lo, r_hi) of the image feed the band; [ir0, ir1) of them are real.
      const int64_t r_lo = oh0 * s - top;
      const int64_t r_hi = (oh1 - 1) * s - top + (d.kh - 1) * d.dilation[0] + 1;
      const int64_t ir0 = std::max<int64_t>(0, r_lo), ir1 = std::min(d.h, r_hi);
      const int64_t cols = std::max<int64_t>(0, ir1 - ir0) * d.w;
      depthwise::Params bp = band;
      bp.h = std::max<int64_t>(0, ir1 - ir0);
      bp.padding[0] = ir0 - r_lo;
      bp.oh = oh1 - oh0;
      if (cols > 0 && p.c_in > 0)
        gemm::pack_b(x + n * p.c_in * hw + ir0 * d.w, hw, 1, p.c_in, cols, blk, packed);
      // Rows of the padded plane outside the image: zero (a band at the top or the bottom).
      for (int64_t ph = 0; ph < d.stride[1]; ++ph) {
        float* base = plane.data() + ph * g.phase_stride;
        std::fill(base, base + bp.padding[0] * g.row_stride, 0.0f);
        std::fill(base + (bp.padding[0] + bp.h) * g.row_stride, base + g.rows * g.row_stride, 0.0f);
      }
      for (int64_t c0 = 0; c0 < d.c; c0 += geo.chunk) {
        const int64_t cn = std::min(geo.chunk, d.c - c0);
        float* e = expanded;
        if (cols > 0) {
          if (p.c_in > 0) {
            gemm::matmul(
                1, cn, cols, p.c_in, [&](int64_t) { return w1 + c0 * p.c_in; }, p.c_in, 1,
                [&](int64_t) { return packed; }, blk,
                [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
                    int64_t ld) {
                  for (int64_t i = m0; i < m1; ++i) {
                    const V bias(b1 ? b1[c0 + i] : 0.0f);
                    const float* from = acc + (i - m0) * ld;
                    float* to = e + i * cols;
                    for (int64_t j = n0; j < n1; j += V::size()) {
                      const int64_t count = std::min<int64_t>(V::size(), n1 - j);
                      depthwise::detail::activate(act, V::loadu(from + (j - n0), count) + bias)
                          .store(to + j, count);
                    }
                  }
                });
          } else {
            for (int64_t i = 0; i < cn; ++i) {
              const float v = b1 ? b1[c0 + i] : 0.0f;
              for (int64_t j = 0; j < cols; j += V::size()) {
                const int64_t count = std::min<int64_t>(V::size(), cols - j);
                depthwise::detail::activate(act, V(v)).store(e + i * cols + j, count);
              }
            }
          }
        }
        detail::band_planes(bp, g, off.data(), e, cols, wd, bd, c0, cn,
                            y + n * d.c * out_plane + oh0 * d.ow, out_plane, plane.data());
      }
    }
  }
}

}  // namespace coil::expand_depthwise

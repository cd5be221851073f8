#include "gemm_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace coil::bench {
namespace {

constexpr int kAccumulators = 16;  // > FMA latency (4) x FMA pipes (2): the pipes never wait

volatile float g_sink = 0;

// (not _mm512_reduce_add_ps: gcc 12 warns about an uninitialized variable inside it)
float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float f : lanes) s += f;
  return s;
}

// iters x 16 vfmadd231ps on 16 independent registers. a*m + c with m just below 1 stays
// bounded and normal, so no value ever becomes denormal or infinite.
__attribute__((noinline)) float fma_loop(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.001f * i);
  const __m512 m = _mm512_set1_ps(0.99999f), c = _mm512_set1_ps(1e-5f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  return lane_sum(s);
}

// iters x 16 vdpbf16ps: acc += a.b over bf16 pairs; small operands keep acc far from overflow.
__attribute__((noinline)) float bf16_loop(int64_t iters) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(3e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAccumulators; ++i) s = _mm512_add_ps(s, acc[i]);
  return lane_sum(s);
}

double seconds_of(float (*loop)(int64_t), int64_t iters, int threads) {
  auto start = std::chrono::steady_clock::now();
  float sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  sum += loop(iters);
  g_sink = g_sink + sum;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peak(float (*loop)(int64_t), double flops_per_iter, int threads, double seconds,
            int samples) {
  // Samples are short (a few ms, about a scheduler time slice) and the best one is taken: on a
  // shared machine a long measurement would include time lost to other processes, while some
  // short ones run undisturbed. The iteration count is calibrated on this thread alone, so
  // that a team member waiting for its CPU cannot shrink the work of every sample.
  samples = std::max(1, samples);
  const double per_sample = seconds / samples;
  int64_t iters = 1 << 10;
  double best_iter = 1e9;  // the fastest seconds per iteration seen on one thread
  for (int r = 0; r < 20; ++r) {
    auto start = std::chrono::steady_clock::now();
    g_sink = g_sink + loop(iters);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_iter = std::min(best_iter, t / static_cast<double>(iters));
    if (t < 200e-6) iters *= 2;
  }
  iters = std::max<int64_t>(1024, static_cast<int64_t>(per_sample / best_iter));
  seconds_of(loop, iters, threads);  // wakes the thread team
  double best = 0;
  for (int r = 0; r < samples; ++r) {
    double t = seconds_of(loop, iters, threads);
    best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / t);
  }
  return best;
}

}  // namespace

double fp32_fma_peak_flops(int threads, double seconds, int samples) {
  return peak(fma_loop, kAccumulators * 16.0 * 2.0, threads, seconds, samples);
}

double bf16_dot_peak_flops(int threads, double seconds, int samples) {
  return peak(bf16_loop, kAccumulators * 16.0 * 4.0, threads, seconds, samples);
}

}  // namespace coil::bench

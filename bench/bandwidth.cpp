#include "bandwidth.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace coil::bench {

void copy_floats(float* __restrict__ dst, const float* __restrict__ src, int64_t n, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

bool copy_floats_nontemporal(float* __restrict__ dst, const float* __restrict__ src, int64_t n,
                             int threads) {
#if defined(__x86_64__)
#if defined(__AVX512F__)
  constexpr int64_t kLanes = 16;
#elif defined(__AVX__)
  constexpr int64_t kLanes = 8;
#else
  constexpr int64_t kLanes = 4;
#endif
  const int64_t blocks = n / kLanes;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i = b * kLanes;
#if defined(__AVX512F__)
    _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif defined(__AVX__)
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#else
    _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  }
  _mm_sfence();
  for (int64_t i = blocks * kLanes; i < n; ++i) dst[i] = src[i];
  return true;
#else
  copy_floats(dst, src, n, threads);
  return false;
#endif
}

float sum_floats(const float* src, int64_t n, int threads) {
  // One vector accumulator per thread, the shape of a generated row sum. (Four accumulators,
  // tried first, read memory about 10% slower on the Zen 4 this was written on, and coil's
  // own sums beat that "ceiling".)
  float total = 0;
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += src[i];
  return total;
}

void fill_floats(float* dst, int64_t n, float value, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = value;
}

}  // namespace coil::bench

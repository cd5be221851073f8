// A one-row product y[N] = x[K] . W^T (W [N, K] row-major: torch's linear weight, what coil.torch
// hands coil for a decode step's projections) three ways, in one process: oneDNN's dnnl_sgemm
// (what coil's generated code calls for it today) and two plain AVX-512 kernels that stream W
// once, rows split over the OpenMP threads: 4 rows and 8 rows per step. Shapes: the Llama 125M
// step's products (bench/gpu/graphs/llama125m_decode_step.coil). W is cycled through copies of
// at least 256 MB so every call reads it from memory, as a decode step does.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" int dnnl_sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc);

template <int R>
static void gemv_rows(const float* W, const float* x, float* y, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n += R) {
    __m512 acc[R];
    const int r_end = static_cast<int>(std::min<int64_t>(R, N - n));
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
      const __mmask16 m = K - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (K - k)) - 1);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
      for (int r = 0; r < R; ++r)
        if (r < r_end)
          acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, W + (n + r) * K + k), xv, acc[r]);
    }
    for (int r = 0; r < r_end; ++r) y[n + r] = _mm512_reduce_add_ps(acc[r]);
  }
}

template <class F>
static double median_us(F&& f, int runs) {
  std::vector<double> ts;
  for (int i = 0; i < runs + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f(i);
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  ts.erase(ts.begin(), ts.begin() + 3);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2] * 1e6;
}

int main() {
  const int64_t shapes[][2] = {{768, 768}, {256, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
  std::printf("threads %d; us (GB/s of W)\n%-14s %16s %16s %16s\n", omp_get_max_threads(), "N x K",
              "dnnl_sgemm", "rows4", "rows8");
  for (auto& s : shapes) {
    const int64_t N = s[0], K = s[1], bytes = N * K * 4;
    const int copies = static_cast<int>(std::max<int64_t>(2, (256ll << 20) / bytes));
    std::vector<float> W(static_cast<size_t>(copies * N * K)), x(K), y(N), ref(N);
    for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
    for (int64_t i = 0; i < K; ++i) x[i] = static_cast<float>(i % 17) * 0.1f;
    auto w = [&](int i) { return W.data() + (i % copies) * N * K; };
    const int runs = bytes > (32 << 20) ? 20 : 60;
    const double d = median_us(
        [&](int i) {
          dnnl_sgemm('N', 'T', 1, N, K, 1.f, x.data(), K, w(i), K, 0.f, ref.data(), N);
        },
        runs);
    const double r4 = median_us([&](int i) { gemv_rows<4>(w(i), x.data(), y.data(), N, K); }, runs);
    const double r8 = median_us([&](int i) { gemv_rows<8>(w(i), x.data(), y.data(), N, K); }, runs);
    float err = 0;
    dnnl_sgemm('N', 'T', 1, N, K, 1.f, x.data(), K, w(0), K, 0.f, ref.data(), N);
    gemv_rows<8>(w(0), x.data(), y.data(), N, K);
    for (int64_t i = 0; i < N; ++i)
      err = std::max(err, std::abs(y[i] - ref[i]) / (1 + std::abs(ref[i])));
    auto gbs = [&](double us) { return bytes / us * 1e-3; };
    std::printf("%5ld x %-6ld %8.1f (%5.1f) %8.1f (%5.1f) %8.1f (%5.1f)  rel.err %.1e\n", long(N),
                long(K), d, gbs(d), r4, gbs(r4), r8, gbs(r8), err);
  }
}

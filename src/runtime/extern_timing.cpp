#include "runtime/extern_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <vector>

#include "kernels/coil_extern.h"
#include "support/check.h"

namespace coil {
namespace {

using Clock = std::chrono::steady_clock;

// Operands of the largest shape timed on this thread (up to 32 MiB in all); values in
// [-1, 1), never rewritten (only C is), so growing them is the only cost.
struct Operands {
  std::vector<float> a, b, c;
  uint32_t state = 12345;

  void grow(std::vector<float>& v, size_t n) {
    size_t old = v.size();
    if (n <= old) return;
    v.resize(n);
    for (size_t i = old; i < n; ++i) {
      state = state * 1664525u + 1013904223u;  // an LCG is plenty for timing data
      v[i] = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
  }
};

using Gemm = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t,
                      bool, float*, int64_t);

double seconds_of(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double time_gemm(const char* name, Gemm gemm, int64_t M, int64_t N, int64_t K, bool transA,
                 bool transB, int reps, double max_seconds) {
  COIL_USER_CHECK(M >= 0 && N >= 0 && K >= 0, "{}: negative GEMM size M={} N={} K={}", name, M, N,
                  K);
  if (M == 0 || N == 0 || K == 0) return 0;
  thread_local Operands ops;
  ops.grow(ops.a, static_cast<size_t>(M * K));
  ops.grow(ops.b, static_cast<size_t>(K * N));
  ops.grow(ops.c, static_cast<size_t>(M * N));
  const int64_t lda = transA ? M : K, ldb = transB ? K : N, ldc = N;
  auto call = [&] {
    gemm(M, N, K, ops.a.data(), lda, transA, ops.b.data(), ldb, transB, ops.c.data(), ldc);
  };
  // Operands of large shapes are not kept after the call: they would stay allocated for the
  // life of the process, and refilling them costs little next to timing such a GEMM.
  struct ReleaseLarge {
    Operands& ops;
    ~ReleaseLarge() {
      if ((ops.a.size() + ops.b.size() + ops.c.size()) * sizeof(float) > (size_t{32} << 20)) {
        ops.a = {}, ops.b = {}, ops.c = {};
      }
    }
  } release{ops};
  try {
    call();  // warm-up: kernel generation, first touch, thread pool start
    Clock::time_point start = Clock::now();
    call();
    const double first = std::max(seconds_of(start), 1e-9);
    // Batch calls so that one sample lasts about 20 us or more.
    const int batch = static_cast<int>(std::clamp(std::ceil(20e-6 / first), 1.0, 1000.0));
    std::vector<double> samples;
    if (batch == 1) samples.push_back(first);
    const double per_sample = first * batch;
    const int wanted = std::max(1, reps);
    const int affordable = static_cast<int>(std::max(1.0, std::floor(max_seconds / per_sample)));
    const int total = std::min(wanted, affordable);
    while (static_cast<int>(samples.size()) < total) {
      start = Clock::now();
      for (int i = 0; i < batch; ++i) call();
      samples.push_back(seconds_of(start) / batch);
    }
    // The fastest sample: on a shared machine other work only ever adds time, so the minimum
    // is the best estimate of what the call costs (a median cached under load misleads every
    // later compile).
    return *std::min_element(samples.begin(), samples.end());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    user_error("{}(M={}, N={}, K={}{}{}): {}", name, M, N, K, transA ? ", transA" : "",
               transB ? ", transB" : "", e.what());
  }
}

}  // namespace

double time_sgemm_dnnl(int64_t M, int64_t N, int64_t K, bool transA, bool transB, int reps,
                       double max_seconds) {
  return time_gemm("time_sgemm_dnnl", &ext::sgemm_dnnl, M, N, K, transA, transB, reps, max_seconds);
}

double time_sgemm_openblas(int64_t M, int64_t N, int64_t K, bool transA, bool transB, int reps,
                           double max_seconds) {
#ifdef COIL_HAVE_OPENBLAS
  return time_gemm("time_sgemm_openblas", &ext::sgemm_openblas, M, N, K, transA, transB, reps,
                   max_seconds);
#else
  return std::numeric_limits<double>::infinity();
#endif
}

}  // namespace coil

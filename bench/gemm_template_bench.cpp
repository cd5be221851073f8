// Micro-benchmark of the matmul runtime (src/kernels/coil_gemm.h) against oneDNN's
// dnnl_sgemm: row-major C = A @ B, B packed once outside the timing (a constant weight), the
// epilogue a plain copy of each block into C. Prints the median GFLOP/s of many runs, ours and
// oneDNN's interleaved so that both see the same machine load.
//   OMP_NUM_THREADS=1 build/bin/coil_gemm_template_bench [--runs N] [--quick]
//       [--shape M N K]... [--bf16 M N K]... [--attention BATCH M N D]... (instead of the
//       default list) [--blk MC NC KC]... (extra blockings, timed against choose_blocking's)
// Built with the AVX-512 kernel flags (bench/CMakeLists.txt); not run by CTest.
#include <dnnl.h>
#include <omp.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/coil_gemm.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T>
struct AlignedBuffer {
  explicit AlignedBuffer(int64_t n)
      : p(static_cast<T*>(std::aligned_alloc(64, coil::gemm::detail::round_up(n * sizeof(T), 64)))),
        size(n) {}
  ~AlignedBuffer() { std::free(p); }
  T* p;
  int64_t size;
};

// The calling thread's CPU time: unlike the wall clock, it does not count the time the thread
// waits for a core, so on one thread it measures the code even on a busy machine.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct Timing {
  double median;  // wall seconds
  double best;    // fastest wall seconds
  double cpu;     // median CPU seconds of the calling thread (= wall when nothing else runs)
};

// Times fns interleaved, `runs` times each after one warm-up.
std::vector<Timing> time_interleaved(const std::vector<std::function<void()>>& fns, int runs) {
  std::vector<std::vector<double>> wall(fns.size()), cpu(fns.size());
  for (auto& f : fns) f();
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      double c0 = thread_cpu_seconds();
      auto t0 = Clock::now();
      fns[i]();
      wall[i].push_back(seconds_since(t0));
      cpu[i].push_back(thread_cpu_seconds() - c0);
    }
  }
  std::vector<Timing> out;
  for (size_t i = 0; i < fns.size(); ++i) {
    out.push_back(
        {median(wall[i]), *std::min_element(wall[i].begin(), wall[i].end()), median(cpu[i])});
  }
  return out;
}

void fill(float* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = d(rng);
}

// --blk MC NC KC (repeatable): blockings timed against choose_blocking's, interleaved with it,
// for tuning choose_blocking on a noisy machine.
std::vector<coil::gemm::Blocking> g_extra_blockings;

struct Case {
  int64_t M, N, K;
};

int runs_for(const Case& c, int base) {
  double flops = 2.0 * c.M * c.N * c.K;
  // ~0.1 s of our runs per case at 100 GFLOP/s, at least `base` runs.
  return std::max<int>(base, static_cast<int>(std::min(2000.0, 1e10 / flops)));
}

void bench_f32(const Case& c, int base_runs) {
  const int64_t M = c.M, N = c.N, K = c.K;
  AlignedBuffer<float> A(M * K), B(K * N), C(M * N), Cd(M * N);
  fill(A.p, M * K, 1);
  fill(B.p, K * N, 2);
  std::vector<coil::gemm::Blocking> blks = {coil::gemm::choose_blocking(M, N, K, 4)};
  for (const auto& b : g_extra_blockings) blks.push_back(b);
  AlignedBuffer<float> Bp(coil::gemm::packed_b_elements(K, N, blks[0]));
  coil::gemm::pack_b(B.p, N, 1, K, N, blks[0], Bp.p);  // the layout does not depend on blk
  float* cp = C.p;
  std::vector<std::function<void()>> fns;
  for (const auto& blk : blks) {
    fns.push_back([&, blk] {
      coil::gemm::matmul(
          1, M, N, K, [&](int64_t) { return A.p; }, K, 1, [&](int64_t) { return Bp.p; }, blk,
          [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
              int64_t ld) {
            for (int64_t i = m0; i < m1; ++i) {
              std::memcpy(cp + i * N + n0, acc + (i - m0) * ld, (n1 - n0) * sizeof(float));
            }
          });
    });
  }
  fns.push_back([&] { dnnl_sgemm('N', 'N', M, N, K, 1.0f, A.p, K, B.p, N, 0.0f, Cd.p, N); });
  std::vector<Timing> t = time_interleaved(fns, runs_for(c, base_runs));
  double max_diff = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    max_diff = std::max<double>(max_diff, std::fabs(C.p[i] - Cd.p[i]));
  }
  double gf = 2.0 * M * N * K / 1e9;
  const size_t d = blks.size();
  for (size_t i = 0; i < blks.size(); ++i) {
    std::printf(
        "f32  M=%5ld N=%5ld K=%5ld  coil %6.1f GFLOP/s  dnnl %6.1f GFLOP/s  ratio %.3f"
        "  (best %.1f / %.1f; cpu-time %.1f / %.1f; blk mc=%ld nc=%ld kc=%ld; "
        "max|diff| %.2g)\n",
        long(M), long(N), long(K), gf / t[i].median, gf / t[d].median, t[d].median / t[i].median,
        gf / t[i].best, gf / t[d].best, gf / t[i].cpu, gf / t[d].cpu, long(blks[i].mc),
        long(blks[i].nc), long(blks[i].kc), max_diff);
  }
}

void bench_bf16(const Case& c, int base_runs) {
  const int64_t M = c.M, N = c.N, K = c.K;
  AlignedBuffer<float> Af(M * K), Bf(K * N), C(M * N);
  fill(Af.p, M * K, 1);
  fill(Bf.p, K * N, 2);
  std::vector<coil::bfloat16> A(Af.p, Af.p + M * K), B(Bf.p, Bf.p + K * N);
  std::vector<coil::gemm::Blocking> blks = {coil::gemm::choose_blocking(M, N, K, 2)};
  for (const auto& b : g_extra_blockings) blks.push_back(b);
  AlignedBuffer<coil::bfloat16> Bp(coil::gemm::packed_b_elements_bf16(K, N, blks[0]));
  coil::gemm::pack_b_bf16(B.data(), N, 1, K, N, blks[0], Bp.p);
  float* cp = C.p;
  std::vector<std::function<void()>> fns;
  for (const auto& blk : blks) {
    fns.push_back([&, blk] {
      coil::gemm::matmul_bf16(
          1, M, N, K, [&](int64_t) { return A.data(); }, K, 1, [&](int64_t) { return Bp.p; }, blk,
          [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
              int64_t ld) {
            for (int64_t i = m0; i < m1; ++i) {
              std::memcpy(cp + i * N + n0, acc + (i - m0) * ld, (n1 - n0) * sizeof(float));
            }
          });
    });
  }
  std::vector<Timing> t = time_interleaved(fns, runs_for(c, base_runs));
  double gf = 2.0 * M * N * K / 1e9;
  for (size_t i = 0; i < blks.size(); ++i) {
    std::printf(
        "bf16 M=%5ld N=%5ld K=%5ld  coil %6.1f GFLOP/s  (best %.1f; cpu-time %.1f; %s; "
        "blk mc=%ld nc=%ld kc=%ld)\n",
        long(M), long(N), long(K), gf / t[i].median, gf / t[i].best, gf / t[i].cpu,
        coil::gemm::kNativeBf16 ? "vdpbf16ps" : "widened to f32", long(blks[i].mc),
        long(blks[i].nc), long(blks[i].kc));
  }
}

// Attention scores: batch x (M x d) @ (N x d)^T, B packed on every call (it is an activation):
// an omp for packs each batch's K^T (rs = 1, cs = d), then one batched matmul. dnnl: one
// dnnl_sgemm with transb per batch (each one parallel inside).
void bench_attention(int64_t batch, int64_t M, int64_t N, int64_t d, int base_runs) {
  AlignedBuffer<float> Q(batch * M * d), Kt(batch * N * d), C(batch * M * N), Cd(batch * M * N);
  fill(Q.p, Q.size, 3);
  fill(Kt.p, Kt.size, 4);
  coil::gemm::Blocking blk = coil::gemm::choose_blocking(M, N, d, 4);
  const int64_t per = coil::gemm::packed_b_elements(d, N, blk);
  AlignedBuffer<float> Bp(batch * per);
  float* cp = C.p;
  auto ours = [&] {
#pragma omp parallel for
    for (int64_t b = 0; b < batch; ++b) {
      coil::gemm::pack_b(Kt.p + b * N * d, 1, d, d, N, blk, Bp.p + b * per);
    }
    coil::gemm::matmul(
        batch, M, N, d, [&](int64_t b) { return Q.p + b * M * d; }, d, 1,
        [&](int64_t b) { return Bp.p + b * per; }, blk,
        [&](int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
            int64_t ld) {
          for (int64_t i = m0; i < m1; ++i) {
            std::memcpy(cp + (b * M + i) * N + n0, acc + (i - m0) * ld, (n1 - n0) * 4);
          }
        });
  };
  auto dnnl = [&] {
    for (int64_t b = 0; b < batch; ++b) {
      dnnl_sgemm('N', 'T', M, N, d, 1.0f, Q.p + b * M * d, d, Kt.p + b * N * d, d, 0.0f,
                 Cd.p + b * M * N, N);
    }
  };
  std::vector<Timing> t = time_interleaved({ours, dnnl}, runs_for({batch * M, N, d}, base_runs));
  double max_diff = 0;
  for (int64_t i = 0; i < C.size; ++i) {
    max_diff = std::max<double>(max_diff, std::fabs(C.p[i] - Cd.p[i]));
  }
  double gf = 2.0 * batch * M * N * d / 1e9;
  std::printf(
      "attn batch=%ld M=%ld N=%ld d=%ld, B packed per call  coil %6.1f GFLOP/s  dnnl %6.1f "
      "GFLOP/s  ratio %.3f  (max|diff| %.2g)\n",
      long(batch), long(M), long(N), long(d), gf / t[0].median, gf / t[1].median,
      t[1].median / t[0].median, max_diff);
}

}  // namespace

int main(int argc, char** argv) {
  int base_runs = 15;
  bool quick = false;
  std::vector<Case> shapes, bf16_shapes;
  std::vector<std::array<int64_t, 4>> attention;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      base_runs = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--blk" && i + 3 < argc) {
      g_extra_blockings.push_back(
          {std::atol(argv[i + 1]), std::atol(argv[i + 2]), std::atol(argv[i + 3])});
      i += 3;
    } else if ((a == "--shape" || a == "--bf16") && i + 3 < argc) {
      Case c{std::atol(argv[i + 1]), std::atol(argv[i + 2]), std::atol(argv[i + 3])};
      (a == "--shape" ? shapes : bf16_shapes).push_back(c);
      i += 3;
    } else if (a == "--attention" && i + 4 < argc) {
      attention.push_back({std::atol(argv[i + 1]), std::atol(argv[i + 2]), std::atol(argv[i + 3]),
                           std::atol(argv[i + 4])});
      i += 4;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--runs N] [--quick] [--shape M N K]... [--bf16 M N K]...\n"
                   "          [--attention BATCH M N D]... [--blk MC NC KC]...\n"
                   "Without shapes: the default list (--quick: without 2048).\n",
                   argv[0]);
      return 2;
    }
  }
  if (shapes.empty() && bf16_shapes.empty() && attention.empty()) {
    shapes = {{64, 256, 256}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}};
    bf16_shapes = {{64, 256, 256}, {1024, 1024, 1024}};
    if (!quick) {
      shapes.push_back({2048, 2048, 2048});
      bf16_shapes.push_back({2048, 2048, 2048});
    }
    attention = {{16, 256, 256, 64}};
  }
  std::printf("threads %d, tile %d x %d, bf16 %s\n", omp_get_max_threads(), coil::gemm::kMR,
              coil::gemm::kNR, coil::gemm::kNativeBf16 ? "native" : "widened");
  for (const Case& c : shapes) bench_f32(c, base_runs);
  for (const auto& a : attention) bench_attention(a[0], a[1], a[2], a[3], base_runs);
  for (const Case& c : bf16_shapes) bench_bf16(c, base_runs);
  return 0;
}

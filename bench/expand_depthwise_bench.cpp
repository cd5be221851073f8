// An inverted residual block's expand conv and depthwise conv, apart (the matmul template writes
// the whole expanded tensor, then coil_depthwise.h reads it: what coil ran before
// kernels/coil_expand_depthwise.h) and fused band by band (coil::expand_depthwise::forward), on
// the blocks of mobilenet_v2 and efficientnet_b0 whose depthwise conv takes the planes path
// (batch 1, their padding and strides). Each figure is the median of --runs calls on the thread
// count OpenMP is given; with --cold, 64 MB are written between calls (untimed), as the rest of
// a model run does, so that the input starts outside the caches. The outputs are compared:
// they are the same sums, so they must agree bit for bit.
//
//   build/bin/coil_expand_depthwise_bench [--runs N] [--threads N] [--cold]
//
// docs/benchmarks.md, "Expand and depthwise convs fused", has the results.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/coil_expand_depthwise.h"

namespace {

using A = coil::depthwise::Activation;

struct Shape {
  const char* model;
  int64_t c_in, c, hw, k, stride;
  A act;
};

std::vector<float> g_flush(16 << 20);

double median_us(const std::function<void()>& f, int runs, bool cold) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    if (cold) {
      for (float& v : g_flush) v += 1.0f;
    }
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// The two kernels apart: the expand as coil's template computes it (B packed per call into
/// one buffer, the bias and activation in the epilogue) into the whole expanded tensor, then
/// the depthwise conv on it.
void apart(const coil::expand_depthwise::Params& p, const float* x, const float* w1,
           const float* b1, const float* wd, const float* bd, float* e, float* packed, float* y) {
  const coil::depthwise::Params& d = p.dw;
  const int64_t hw = d.h * d.w;
  const coil::gemm::Blocking blk = coil::gemm::choose_blocking(d.c, hw, p.c_in, 4);
  coil::gemm::pack_b_parallel(x, hw, 1, p.c_in, hw, blk, packed);
  coil::depthwise::Params act = d;
  act.activation = p.activation;
  using V = coil::Vec<float>;
  coil::gemm::matmul(
      1, d.c, hw, p.c_in, [&](int64_t) { return w1; }, p.c_in, 1, [&](int64_t) { return packed; },
      blk,
      [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc, int64_t ld) {
        for (int64_t i = m0; i < m1; ++i)
          for (int64_t j = n0; j < n1; j += V::size()) {
            const int64_t count = std::min<int64_t>(V::size(), n1 - j);
            coil::depthwise::detail::activate(
                act, V::loadu(acc + (i - m0) * ld + (j - n0), count) + V(b1[i]))
                .store(e + i * hw + j, count);
          }
      });
  coil::depthwise::forward(d, e, wd, bd, y);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50, threads = 1;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--cold")) {
      cold = true;
    } else {
      std::fprintf(stderr, "usage: %s [--runs N] [--threads N] [--cold]\n", argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  const Shape shapes[] = {
      {"mobilenet_v2", 16, 96, 112, 3, 2, A::clamp},
      {"mobilenet_v2", 24, 144, 56, 3, 1, A::clamp},
      {"mobilenet_v2", 24, 144, 56, 3, 2, A::clamp},
      {"mobilenet_v2", 32, 192, 28, 3, 1, A::clamp},
      {"mobilenet_v2", 32, 192, 28, 3, 2, A::clamp},
      {"efficientnet_b0", 16, 96, 112, 3, 2, A::silu},
      {"efficientnet_b0", 24, 144, 56, 3, 1, A::silu},
      {"efficientnet_b0", 24, 144, 56, 5, 2, A::silu},
      {"efficientnet_b0", 40, 240, 28, 5, 1, A::silu},
      {"efficientnet_b0", 40, 240, 28, 3, 2, A::silu},
  };
  std::printf("threads %d, median of %d runs (us)%s\n", threads, runs,
              cold ? ", 64 MB written between runs" : "");
  std::printf("%-16s %4s %5s %4s %2s %2s %10s %10s %8s\n", "model", "Cin", "C", "HW", "k", "s",
              "apart", "fused", "speedup");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Shape& s : shapes) {
    const int64_t pad = s.k / 2, out = (s.hw + 2 * pad - s.k) / s.stride + 1;
    coil::depthwise::Params dw{1,          s.c,    s.hw, s.hw, s.k,   s.k,  {s.stride, s.stride},
                               {pad, pad}, {1, 1}, out,  out,  s.act, 0.0f, 6.0f};
    dw.path = coil::depthwise::Path::planes;
    const coil::expand_depthwise::Params p{dw, s.c_in, s.act, 0.0f, 6.0f};
    auto make = [&](int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& f : v) f = u(rng);
      return v;
    };
    const int64_t hw = s.hw * s.hw;
    std::vector<float> x = make(s.c_in * hw), w1 = make(s.c * s.c_in), b1 = make(s.c),
                       wd = make(s.c * s.k * s.k), bd = make(s.c);
    std::vector<float> e(static_cast<size_t>(s.c * hw)),
        packed(static_cast<size_t>(s.c_in * (hw + 64))), y0(static_cast<size_t>(s.c * out * out)),
        y1(y0.size());
    const double t_apart = median_us(
        [&] {
          apart(p, x.data(), w1.data(), b1.data(), wd.data(), bd.data(), e.data(), packed.data(),
                y0.data());
        },
        runs, cold);
    const double t_fused = median_us(
        [&] {
          coil::expand_depthwise::forward(p, x.data(), w1.data(), b1.data(), wd.data(), bd.data(),
                                          y1.data());
        },
        runs, cold);
    const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0;
    std::printf("%-16s %4ld %5ld %4ld %2ld %2ld %10.1f %10.1f %7.2fx%s\n", s.model, long(s.c_in),
                long(s.c), long(s.hw), long(s.k), long(s.stride), t_apart, t_fused,
                t_apart / t_fused, same ? "" : "  OUTPUTS DIFFER");
    if (!same) return 1;
  }
  return 0;
}

// The two loops of coil's depthwise kernel (kernels/coil_depthwise.h) side by side on the
// depthwise convs of mobilenet_v2 and efficientnet_b0 (batch 1, their padding and strides):
// the planes path, channel blocks, and which one `automatic` picks. Each figure is the median
// of --runs calls (after warm-up) on the thread count OpenMP is given; the two paths' outputs
// are compared (they sum in the same order, so they agree to the last bits, within 1e-5).
//
//   build/bin/coil_depthwise_bench [--runs N] [--threads N]
//
// docs/benchmarks.md, "Depthwise convolutions in channel blocks", has the results.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/coil_depthwise.h"

namespace {

struct Shape {
  const char* model;
  int64_t c, hw, k, stride;
  coil::depthwise::Activation act;
};

double median_us(const coil::depthwise::Params& p, const std::vector<float>& x,
                 const std::vector<float>& w, const std::vector<float>& b, std::vector<float>& y,
                 int runs) {
  for (int i = 0; i < 3; ++i) coil::depthwise::forward(p, x.data(), w.data(), b.data(), y.data());
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto s = std::chrono::steady_clock::now();
    coil::depthwise::forward(p, x.data(), w.data(), b.data(), y.data());
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50, threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--runs N] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  using A = coil::depthwise::Activation;
  const Shape shapes[] = {
      {"mobilenet_v2", 32, 112, 3, 1, A::clamp},   {"mobilenet_v2", 96, 112, 3, 2, A::clamp},
      {"mobilenet_v2", 144, 56, 3, 1, A::clamp},   {"mobilenet_v2", 144, 56, 3, 2, A::clamp},
      {"mobilenet_v2", 192, 28, 3, 1, A::clamp},   {"mobilenet_v2", 192, 28, 3, 2, A::clamp},
      {"mobilenet_v2", 384, 14, 3, 1, A::clamp},   {"mobilenet_v2", 576, 14, 3, 1, A::clamp},
      {"mobilenet_v2", 576, 14, 3, 2, A::clamp},   {"mobilenet_v2", 960, 7, 3, 1, A::clamp},
      {"efficientnet_b0", 32, 112, 3, 1, A::silu}, {"efficientnet_b0", 96, 112, 3, 2, A::silu},
      {"efficientnet_b0", 144, 56, 5, 2, A::silu}, {"efficientnet_b0", 240, 28, 5, 1, A::silu},
      {"efficientnet_b0", 480, 14, 5, 1, A::silu}, {"efficientnet_b0", 672, 14, 5, 2, A::silu},
      {"efficientnet_b0", 1152, 7, 5, 1, A::silu}, {"efficientnet_b0", 1152, 7, 3, 1, A::silu},
  };
  std::printf("threads %d, median of %d runs (us)\n", threads, runs);
  std::printf("%-16s %5s %4s %2s %2s %10s %10s %8s %s\n", "model", "C", "HW", "k", "s", "planes",
              "cblocks", "planes/cb", "automatic");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Shape& s : shapes) {
    const int64_t pad = s.k / 2, out = (s.hw + 2 * pad - s.k) / s.stride + 1;
    coil::depthwise::Params p{1,          s.c,    s.hw, s.hw, s.k,   s.k,  {s.stride, s.stride},
                              {pad, pad}, {1, 1}, out,  out,  s.act, 0.0f, 6.0f};
    std::vector<float> x(static_cast<size_t>(s.c * s.hw * s.hw)),
        w(static_cast<size_t>(s.c * s.k * s.k)), b(static_cast<size_t>(s.c)),
        y0(static_cast<size_t>(s.c * out * out)), y1(y0.size());
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : b) v = u(rng);
    p.path = coil::depthwise::Path::planes;
    const double planes = median_us(p, x, w, b, y0, runs);
    p.path = coil::depthwise::Path::channel_blocks;
    const double blocks = median_us(p, x, w, b, y1, runs);
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, double(std::fabs(y0[i] - y1[i])));
    p.path = coil::depthwise::Path::automatic;
    const bool cb = coil::depthwise::detail::cblock::preferred(p);
    std::printf("%-16s %5ld %4ld %2ld %2ld %10.1f %10.1f %8.2fx %s%s\n", s.model, long(s.c),
                long(s.hw), long(s.k), long(s.stride), planes, blocks, planes / blocks,
                cb ? "cblocks" : "planes", diff > 1e-5 ? "  OUTPUTS DIFFER" : "");
    if (diff > 1e-5) return 1;
  }
  return 0;
}

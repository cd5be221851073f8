// A 1x1 convolution three ways through coil's matmul template (README.md): out[CO, P] =
// W[CO, CI] x[CI, P] with W packed at load and x packed on the calling thread before the
// product (the template until 2026-12-07), with x packed by the threads that read it
// (matmul_raw_b, the template since), and pixels as rows (out^T = x^T W^T: M = P, N = CO, W^T
// packed at load, x^T packed per block, the tile stored transposed), at the shapes of
// mobilenet_v2's 7x7 and 14x14 stages and its 112x112 project (issue 28). Medians of 200
// calls; the bias added in the epilogue; the results compared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "coil_gemm.h"
using namespace coil::gemm;
template <class F>
double med(F f) {
  std::vector<double> t;
  for (int r = 0; r < 200; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  int shapes[][3] = {{320, 960, 49}, {160, 960, 49}, {1280, 320, 49},
                     {160, 576, 49}, {96, 576, 196}, {16, 32, 12544}};
  for (auto& s : shapes) {
    int64_t CO = s[0], CI = s[1], P = s[2];
    std::vector<float> W(CO * CI), x(CI * P), out(CO * P), out2(CO * P), bias(CO);
    for (auto& v : W) v = (rand() % 100) / 100.f - 0.5f;
    for (auto& v : x) v = (rand() % 100) / 100.f - 0.5f;
    for (auto& v : bias) v = (rand() % 100) / 100.f;
    // current: A = W packed at load, B = x packed per call
    Blocking b1 = choose_blocking(CO, P, CI, 4);
    std::vector<float> pa(packed_a_elements(CO, CI, b1));
    pack_a_all(W.data(), CI, 1, CO, CI, b1, pa.data());
    auto cur = [&] {
      float* pb = static_cast<float*>(packed_b_scratch(4 * packed_b_elements(CI, P, b1)));
      pack_b_parallel(x.data(), P, 1, CI, P, b1, pb);
      matmul_packed_a(
          1, CO, P, CI, pa.data(), [&](int64_t) { return pb; }, b1,
          [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
              int64_t ld) {
            for (int64_t r = m0; r < m1; ++r)
              for (int64_t c = n0; c < n1; ++c)
                out[r * P + c] = acc[(r - m0) * ld + (c - n0)] + bias[r];
          });
    };
    // transposed: A' = x^T (x is [CI, P]: a(i=p, k=ci) = x[ci * P + p]: rs 1, cs P) packed per
    // call, B' = W^T (b(k=ci, n=co) = W[co * CI + ci]: rs 1, cs CI) packed at load.
    Blocking b2 = choose_blocking(P, CO, CI, 4);
    std::vector<float> pbw(packed_b_elements(CI, CO, b2));
    pack_b(W.data(), 1, CI, CI, CO, b2, pbw.data());
    auto tr = [&] {
      matmul(
          1, P, CO, CI, [&](int64_t) { return x.data(); }, 1, P,
          [&](int64_t) { return pbw.data(); }, b2,
          [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
              int64_t ld) {
            for (int64_t c = n0; c < n1; ++c)
              for (int64_t r = m0; r < m1; ++r)
                out2[c * P + r] = acc[(r - m0) * ld + (c - n0)] + bias[c];
          });
    };
    // the template as generated since 2026-12-07: x packed inside the call by the threads that
    // read it (matmul_raw_b)
    auto raw = [&] {
      matmul_raw_b(
          1, CO, P, CI, pa.data(), [&](int64_t) { return static_cast<const float*>(nullptr); }, 0,
          0, [&](int64_t) { return x.data(); }, P, 1, b1,
          [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
              int64_t ld) {
            for (int64_t r = m0; r < m1; ++r)
              for (int64_t c = n0; c < n1; ++c)
                out2[r * P + c] = acc[(r - m0) * ld + (c - n0)] + bias[r];
          });
    };
    const double t3 = med(raw);
    cur();
    bool same = true;
    for (size_t i = 0; i < out.size(); ++i) same = same && out[i] == out2[i];
    double t1 = med(cur), t2 = med(tr);
    double err = 0;
    for (size_t i = 0; i < out.size(); ++i) err = std::max(err, (double)std::abs(out[i] - out2[i]));
    printf(
        "CO %5ld CI %4ld P %5ld: packed then product %7.1f us, packed by the threads %7.1f us "
        "(%.2fx, same bits: %d), pixels as rows %7.1f us (%.2fx, err %.1e)\n",
        (long)CO, (long)CI, (long)P, t1, t3, t1 / t3, (int)same, t2, t1 / t2, err);
  }
}

// The model that consumer.cpp exports and consumer_runtime.cpp runs from the export
// (tests/install/test_install.sh): y = relu(x @ W + bias), W and bias constants (so the export
// carries weights, W packed for the matmul template), with W, bias and x made here by formulas
// both programs share, and the expected y computed in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace deployed {

inline constexpr int64_t kRows = 5, kIn = 70, kOut = 37;

inline float weight(int64_t k, int64_t n) {
  return static_cast<float>(std::sin(0.11 * k + 0.07 * n) * 0.2);
}
inline float bias(int64_t n) {
  return static_cast<float>(std::cos(0.3 * n) * 0.1);
}
inline float input(int64_t r, int64_t k) {
  return static_cast<float>(std::cos(0.05 * r * k + 0.4 * k));
}

/// Whether `got` (kRows x kOut, row-major) is relu(x @ W + bias) within float rounding; prints
/// the first wrong element.
inline bool check(const float* got) {
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t n = 0; n < kOut; ++n) {
      double want = bias(n);
      for (int64_t k = 0; k < kIn; ++k) want += double(input(r, k)) * weight(k, n);
      want = want > 0 ? want : 0;
      if (std::fabs(got[r * kOut + n] - want) > 1e-5 + 1e-5 * std::fabs(want)) {
        std::printf("FAIL: y[%ld, %ld] = %.9g, expected %.9g\n", long(r), long(n),
                    got[r * kOut + n], want);
        return false;
      }
    }
  return true;
}

}  // namespace deployed

// The g++ 12.2 wrong-code bug behind issue 26's graph 8, where(sign(x) > x, a, sign(x)), in the
// shape of coil's generated code: both operands are loaded unconditionally and a ?: picks one.
//   g++ -O3 -march=native -fno-trapping-math gcc12_masked_load.cpp && ./a.out   -> y[10] = 0
// tree-sink moves the load of a[] into the arm of the ?: that uses it, if-conversion turns it
// into a masked load, and the vectorizer gives the group's three 4-lane masked loads the mask of
// the first vector. Right with -fno-tree-sink (coil adds it for g++: docs/numerics.md), at -O2,
// without -fno-trapping-math (then nothing is if-converted) and with clang.
// tests/unit/toolchain_bugs_test.cpp builds this file with the flags of generated kernels.
#include <cmath>
#include <cstdio>

extern "C" __attribute__((noinline)) void coil_repro_kernel(const float* __restrict__ x,
                                                            const float* __restrict__ a,
                                                            float* __restrict__ y) {
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 6; j++) {
      const float v = x[6 * i + j];
      const float s = std::isnan(v) ? v : static_cast<float>((0.f < v) - (v < 0.f));
      const float w = a[6 * i + j];
      y[6 * i + j] = s > v ? w : s;
    }
}

/// 0 when the kernel is right; else the number of wrong elements.
extern "C" int coil_repro_wrong_elements() {
  const float x[12] = {-1.46f, -1.45f, -0.19f, -1.91f, -0.59f, 1.64f,
                       -0.11f, -1.70f, 0.27f,  0.54f,  -1.64f, 0.22f};
  float a[12], y[12];
  for (int k = 0; k < 12; k++) a[k] = 100.f + k;
  coil_repro_kernel(x, a, y);
  int wrong = 0;
  for (int k = 0; k < 12; k++) {
    const float s = static_cast<float>((0.f < x[k]) - (x[k] < 0.f));
    wrong += y[k] != (s > x[k] ? a[k] : s);
  }
  return wrong;
}

#ifndef COIL_REPRO_NO_MAIN
int main() {
  const int wrong = coil_repro_wrong_elements();
  std::printf("%s (%d of 12 elements wrong)\n", wrong ? "WRONG" : "ok", wrong);
  return wrong != 0;
}
#endif

// The g++ 13.3 wrong-code bug behind coil_fuzz seed 402 graph 3070 (the GPU machine's host,
// Ubuntu 24.04): where(max(x, 0.5) <= x, y, x) over a bf16 x and an f32 y of shape [127, 2], in
// the shape of coil's generated code before the fix: both operands loaded unconditionally, a ?:
// picks one. Even with -fno-tree-sink (the g++ 12 workaround, gcc12_masked_load.cpp) the load
// of y ends up in the arm of the ?: that uses it; if-conversion makes it a masked load, and the
// vectorizer gives both 8-lane masked loads of a group the first one's mask (vmovups ...{%k1}
// twice, the second mask %k2 unused), so lanes of the second read 0:
//   g++ -O3 -march=native -fno-trapping-math -fno-tree-sink -I src/kernels \
//       -fopenmp gcc13_masked_load.cpp && ./a.out   -> WRONG (29 of 254) with g++ 13.3
// Right at -O2, with -fno-tree-loop-if-convert or -fno-tree-loop-vectorize, with
// -march=x86-64-v2 (no masked loads), with g++ 12.2 and with -DCOIL_REPRO_WORKAROUND:
// generated code prints where() as coil::select (coil_kernel.h), a bitwise blend with no arm.
// tests/unit/toolchain_bugs_test.cpp builds this file with the flags of generated kernels.
#include <cstdio>
#include <random>

#include "coil_kernel.h"

extern "C" __attribute__((noinline)) void coil_repro_kernel(const coil::bfloat16* __restrict__ x,
                                                            const float* __restrict__ y,
                                                            float* __restrict__ out) {
  for (int64_t i = 0; i < 127; i++)
    for (int64_t j = 0; j < 2; j++) {
      const float v = static_cast<float>(x[2 * i + j]);
      const float m = coil::maximum(0.5f, v);
      const bool c = m <= v;
      const float w = y[2 * i + j];
#ifdef COIL_REPRO_WORKAROUND
      out[2 * i + j] = coil::select<float>(c, w, v);
#else
      out[2 * i + j] = c ? w : v;
#endif
    }
}

/// 0 when the kernel is right; else the number of wrong elements.
extern "C" int coil_repro_wrong_elements() {
  static coil::bfloat16 x[254];
  static float y[254], out[254];
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-3.f, 3.f);
  for (int k = 0; k < 254; k++) {
    x[k] = coil::bfloat16(d(rng));
    y[k] = d(rng);
  }
  coil_repro_kernel(x, y, out);
  int wrong = 0;
  for (int k = 0; k < 254; k++) {
    const float v = static_cast<float>(x[k]);
    wrong += out[k] != (v >= 0.5f ? y[k] : v);
  }
  return wrong;
}

#ifndef COIL_REPRO_NO_MAIN
int main() {
  const int wrong = coil_repro_wrong_elements();
  std::printf("%s (%d of 254 elements wrong)\n", wrong ? "WRONG" : "ok", wrong);
  return wrong != 0;
}
#endif

// A g++ 12.2 wrong-code bug found by coil_fuzz (cast f64 -> f32 -> f64 of a [2, 1, 1] tensor):
//   g++ -O2 -march=native gcc12_f64_f32_round_trip.cpp && ./a.out   -> WRONG
// The SLP vectorizer turns the two unrolled iterations into one v2df and drops the conversion
// pair: the result keeps every bit of the double. Right at -O1, with -fno-tree-slp-vectorize
// and with clang. Generated code narrows f64 to f32 through coil::f64_to_f32 (coil_kernel.h),
// whose empty asm keeps the float opaque; tests/unit/toolchain_bugs_test.cpp builds this file
// with the flags of generated kernels and the workaround (COIL_REPRO_WORKAROUND).
#include <cstdint>
#include <cstdio>

static inline float narrow(double x) {
  float f = static_cast<float>(x);
#ifdef COIL_REPRO_WORKAROUND
  __asm__("" : "+x"(f));
#endif
  return f;
}

extern "C" __attribute__((noinline)) void coil_repro_kernel(const double* __restrict__ in,
                                                            double* __restrict__ out) {
  for (int64_t x0 = 0; x0 < 2; x0++)
    for (int64_t x1 = 0; x1 < 1; x1++) {
      const double v = in[x0];
      const float f = narrow(v);
      out[x0] = static_cast<double>(f);
    }
}

/// 0 when the kernel is right; else the number of wrong elements.
extern "C" int coil_repro_wrong_elements() {
  const double in[2] = {-1.3608265465181566, 0.1};
  double out[2];
  coil_repro_kernel(in, out);
  int wrong = 0;
  for (int k = 0; k < 2; k++) {
    volatile float f = static_cast<float>(in[k]);
    wrong += out[k] != static_cast<double>(f);
  }
  return wrong;
}

#ifndef COIL_REPRO_NO_MAIN
int main() {
  const int wrong = coil_repro_wrong_elements();
  std::printf("%s (%d of 2 elements wrong)\n", wrong ? "WRONG" : "ok", wrong);
  return wrong != 0;
}
#endif

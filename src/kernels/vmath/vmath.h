// libcoil_vmath: vectorized math that generated kernels call but should not compile themselves.
// Eigen's erf is 8x faster than SLEEF's, but including Eigen costs ~1.4 s of compiler time per
// kernel; so this small shared library is built once with Eigen (vmath_avx512.cpp,
// vmath_avx2.cpp, each compiled for its ISA), and generated modules of those ISAs link it
// (runtime/isa.h: vmath_link_flags()). The runtime headers (coil_vec_avx512.h, coil_vec_avx2.h)
// declare the same functions; this header is for the library itself and its tests.
//
// Every function is one register in, one register out, no state; call them only on a CPU that
// runs the ISA they are named after.
#pragma once

#include <immintrin.h>

extern "C" {
#if defined(__AVX512F__)
/// erf of 16 floats: Eigen's rational approximation (within 7.42 ulp / 4.5e-7 absolute of the
/// exact erf over every float; docs/numerics.md), NaN propagates, erf(+-inf) = +-1, erf(+-0) = +-0.
__m512 coil_vmath_erf_f32x16(__m512 x) noexcept __attribute__((const));
#endif
#if defined(__AVX2__) && defined(__FMA__)
/// erf of 8 floats, as coil_vmath_erf_f32x16.
__m256 coil_vmath_erf_f32x8(__m256 x) noexcept __attribute__((const));
#endif
}

// libcoil_vmath's AVX-512 functions (vmath.h). This file alone is compiled with -mavx512f
// -mavx512dq -mfma (CMakeLists.txt), so that Eigen selects its 16-lane packets.

// gcc 12's AVX-512 intrinsics read an "undefined" register (GCC PR 105593; see
// coil_vec_avx512.h): a false -W(maybe-)uninitialized after inlining.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/vmath/vmath.h"
#include "kernels/vmath/vmath_common.h"

static_assert(sizeof(Eigen::internal::Packet16f) == sizeof(__m512));

extern "C" __attribute__((visibility("default"))) __m512 coil_vmath_erf_f32x16(__m512 x) noexcept {
  using P = Eigen::internal::Packet16f;
  using namespace coil::vmath;
  const __m512 r = erf_f32_unguarded<P>(P(x));
  const __m512 abs_x = _mm512_abs_ps(x);
  const __mmask16 tiny = _mm512_cmp_ps_mask(abs_x, _mm512_set1_ps(kErfTiny), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(r, tiny, x, _mm512_set1_ps(kTwoOverSqrtPi));
}

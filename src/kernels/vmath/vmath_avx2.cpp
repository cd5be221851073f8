// libcoil_vmath's AVX2 functions (vmath.h). This file alone is compiled with -mavx2 -mfma
// (CMakeLists.txt), so that Eigen selects its 8-lane AVX packets with FMA.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/vmath/vmath.h"
#include "kernels/vmath/vmath_common.h"

static_assert(sizeof(Eigen::internal::Packet8f) == sizeof(__m256));

extern "C" __attribute__((visibility("default"))) __m256 coil_vmath_erf_f32x8(__m256 x) noexcept {
  using P = Eigen::internal::Packet8f;
  using namespace coil::vmath;
  const __m256 r = erf_f32_unguarded<P>(P(x));
  const __m256 abs_x = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 tiny = _mm256_cmp_ps(abs_x, _mm256_set1_ps(kErfTiny), _CMP_LT_OQ);
  return _mm256_blendv_ps(r, _mm256_mul_ps(x, _mm256_set1_ps(kTwoOverSqrtPi)), tiny);
}

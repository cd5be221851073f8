// libcoil_vmath's AVX2 functions (vmath.h). This file alone is compiled with -mavx2 -mfma
// (CMakeLists.txt), so that Eigen selects its 8-lane AVX packets with FMA.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "runtime/vmath/vmath.h"
#include "runtime/vmath/vmath_common.h"

static_assert(sizeof(Eigen::internal::Packet8f) == sizeof(__m256));

extern "C" __attribute__((visibility("default"))) __m256 coil_vmath_erf_f32x8(__m256 x) noexcept {
  using P = Eigen::internal::Packet8f;
  return coil::vmath::erf_f32<P>(P(x));
}

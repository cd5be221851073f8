// The bodies of libcoil_vmath's functions, written once over Eigen's packet operations and
// instantiated for each ISA by vmath_avx512.cpp and vmath_avx2.cpp (include Eigen first).
#pragma once

namespace coil::vmath {

/// erf of a packet of floats: Eigen's generic_fast_erf_float (a rational approximation on
/// [-4, 4], inputs clamped), its result clamped to [-1, 1]: it overshoots to 1.0000001 for x in
/// about [3.69, 4] (and -x). Measured in tests/unit (VecErf).
///
/// The clamp uses Eigen's plain pmin/pmax, one instruction each: like std::min(a, b) they return
/// their first argument when either is NaN, so a NaN result (only from a NaN input) passes
/// through. (pmin<PropagateNaN> is the same answer in five instructions; with the guard below
/// in Eigen's pselect form, the guards cost as much as the polynomial.)
///
/// The caller still owes one guard, written per ISA with a masked multiply: below |x| = 2^-14
/// Eigen computes x * p(x^2) in denormals near FLT_MIN (37 ulp at 2e-38); there erf(x) =
/// 2/sqrt(pi) * x to f32 precision (the next term is x^2/3 relative), see erf_tiny_*.
template <typename P>
inline P erf_f32_unguarded(const P& x) {
  namespace ei = Eigen::internal;
  const P one = ei::pset1<P>(1.0f);
  return ei::pmax(ei::pmin(ei::perf(x), one), ei::pnegate(one));
}

/// Below this magnitude erf(x) is 2/sqrt(pi) * x (see erf_f32_unguarded).
constexpr float kErfTiny = 0x1p-14f;
constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;

}  // namespace coil::vmath

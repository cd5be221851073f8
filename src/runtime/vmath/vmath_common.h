// The bodies of libcoil_vmath's functions, written once over Eigen's packet operations and
// instantiated for each ISA by vmath_avx512.cpp and vmath_avx2.cpp (include Eigen first).
#pragma once

namespace coil::vmath {

/// erf of a packet of floats: Eigen's generic_fast_erf_float (a rational approximation on
/// [-4, 4], inputs clamped), with two guards around it, measured in tests/unit (VecErf):
///   - its result overshoots to 1.0000001 for x in about [3.69, 4] (and -x): clamped to
///     [-1, 1] (NaN propagates through the clamp);
///   - below |x| = 2^-14 it computes x * p(x^2) in denormals near FLT_MIN (37 ulp at 2e-38):
///     there erf(x) = 2/sqrt(pi) * x to f32 precision (the next term is x^2/3 relative), which
///     keeps tiny inputs within 1 ulp.
template <typename P>
inline P erf_f32(const P& x) {
  namespace ei = Eigen::internal;
  P r = ei::perf(x);
  const P one = ei::pset1<P>(1.0f);
  r = ei::pmax<Eigen::PropagateNaN>(ei::pmin<Eigen::PropagateNaN>(r, one), ei::pnegate(one));
  const P tiny = ei::pset1<P>(0x1p-14f);
  const P two_over_sqrt_pi = ei::pset1<P>(1.12837916709551257390f);
  return ei::pselect(ei::pcmp_lt(ei::pabs(x), tiny), ei::pmul(x, two_over_sqrt_pi), r);
}

}  // namespace coil::vmath

// The header generated vector kernels (CppVecKernel) include: explicit SIMD modeled on
// at::vec::Vectorized. Real code, compiled and tested for every ISA by
// tests/unit/kernel_vec_test.cpp, embedded into libcoil like coil_kernel.h.
//
// The implementation is chosen by one macro, which runtime/isa.h's isa_compile_flags() passes
// together with the instruction-set flags:
//   COIL_CPU_AVX512  16 float lanes (coil_vec_avx512.h; -mavx512f -mavx512dq -mavx512vl ...)
//   COIL_CPU_AVX2     8 float lanes (coil_vec_avx2.h; -mavx2 -mfma -mf16c)
//   COIL_CPU_NEON     4 float lanes, portable lane loops for now (coil_vec_generic.h)
//   (none)            1 lane: compiles and runs anywhere, same math as the scalar kernels
// AVX-512 and AVX2 take exp/log/tanh/... from SLEEF (libsleef-dev; link -lsleef) and f32 erf
// from libcoil_vmath (Eigen's, built with coil: src/kernels/vmath/); IsaInfo::link_flags
// carries both. The others use <cmath>.
//
// Types
//   Vectorized<T>       one register of T in {float, double, int32_t, int64_t}; size() lanes.
//   VectorizedN<T, N>   N registers of T with the same interface.
//   Vec<T>              kFloatLanes lanes of T (Vectorized or VectorizedN): with a loop step of
//                       kFloatLanes, every dtype of a kernel moves the same elements per step.
//   bf16/f16/bool/u8/i8 have no vector type: they are loaded into (and stored from) vectors of
//                       their compute type, Vec<float>::loadu(const bfloat16*, count) etc.
//
// Semantics
//   Masks are vectors of the same type whose lanes have every bit set (true) or none (false),
//   as at::vec's comparison results; blendv reads a lane's top bit. A float mask lane is a NaN
//   bit pattern: use masks only with blendv/where/&/|/^/~, mask_cast, and store to bool.
//   loadu(p, count)/store(p, count) touch only the first count elements (masked instructions);
//   loaded lanes past count are zero. count >= size() means the whole vector.
//   maximum/minimum/relu/sign/round/isnan follow coil_kernel.h bit for bit (NaN propagates;
//   round is half-to-even); bf16/f16 conversions match coil_types.h bit for bit.
//   exp, expm1, log, log1p, tanh, erf, sin, cos, pow are within 1 ulp (SLEEF u10) on SIMD ISAs,
//   except f32 erf (Eigen's: within 8 ulp, 4.5e-7 absolute; |erf| <= 1, NaN/inf/0 exact) and,
//   with COIL_USE_LIBMVEC, f32 expm1, log1p, tanh, sin, cos (glibc's libmvec: within 2.4 ulp);
//   sigmoid = 1 / (1 + exp(-x)). Integer + - * wrap; integer x / 0 and x % 0 give 0.
//   Horizontal reductions (reduce_add/mul/max/min) combine lane i with lane i + size()/2,
//   recursively: a fixed order per ISA.
//
// A vectorized loop with a masked tail:
//   for (int64_t x0 = 0; x0 < n; x0 += coil::kFloatLanes) {
//     int64_t tail = n - x0;  // >= kFloatLanes except in the last step
//     auto tmp0 = coil::Vec<float>::loadu(in_ptr0 + x0, tail);
//     auto tmp1 = coil::Vec<float>::loadu(in_ptr1 + x0, tail);  // in_ptr1: const bfloat16*
//     auto tmp2 = coil::maximum(tmp0 * tmp1, coil::Vec<float>(0.0f));
//     tmp2.store(out_ptr0 + x0, tail);                            // out_ptr0: bfloat16*
//   }
#pragma once

// coil_vec_core.h includes the implementation the macro selects.
#include "coil_vec_core.h"
#include "coil_vec_n.h"
#include "coil_vec_reduce.h"

namespace coil {
inline namespace COIL_VEC_ISA {

/// Scalar math that is the vector kernels' math: lane 0 of the Vectorized function on a
/// broadcast value. Scalar loops print these (cpp_printer.cpp), not <cmath>'s, because one
/// value is often computed twice, once in a vector loop and once in a scalar one (a producer
/// inlined into a max kernel and into the sub/sum kernel after it): with two implementations
/// that differ by an ulp, log_softmax of a single element, x - max(x), is not 0 and its sign
/// is wrong (fuzz case seed 400 index 8886). With one implementation the two agree bit for bit.
/// On the scalar ISA (no COIL_CPU_* macro) Vectorized<T> is <cmath> itself.
namespace lane {

template <typename T>
inline T first(const Vectorized<T>& v) {
  T r;
  v.store(&r, 1);
  return r;
}

#define COIL_LANE_UNARY(fn)                      \
  template <typename T>                          \
  inline T fn(T x) {                             \
    if constexpr (std::is_floating_point_v<T>) { \
      return first(Vectorized<T>(x).fn());       \
    } else {                                     \
      return std::fn(x);                         \
    }                                            \
  }
COIL_LANE_UNARY(exp)
COIL_LANE_UNARY(expm1)
COIL_LANE_UNARY(log)
COIL_LANE_UNARY(log1p)
COIL_LANE_UNARY(tanh)
COIL_LANE_UNARY(erf)
COIL_LANE_UNARY(sin)
COIL_LANE_UNARY(cos)
#undef COIL_LANE_UNARY

/// 1 / (1 + exp(-x)), as Vectorized::sigmoid.
template <typename T>
inline T sigmoid(T x) {
  return first(Vectorized<T>(x).sigmoid());
}

template <typename T>
inline T pow(T x, T y) {
  return first(Vectorized<T>(x).pow(Vectorized<T>(y)));
}

}  // namespace lane
}  // namespace COIL_VEC_ISA
}  // namespace coil

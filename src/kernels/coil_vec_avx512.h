// coil_vec.h's primitives on AVX-512 (COIL_CPU_AVX512; compiled with -mavx512f -mavx512dq
// -mavx512vl -mavx512bw -mfma). Tails use masked loads and stores, which never touch memory in
// the masked-off lanes. Transcendentals are SLEEF's 1.0-ulp (u10) functions, except f32 exp
// (inline, Ops<float>::exp), f32 erf (libcoil_vmath) and, with COIL_USE_LIBMVEC, f32
// expm1/log1p/tanh/sin/cos (glibc's libmvec).
#pragma once

// Empty unless selected, so that every runtime header can be included on its own.
#if defined(COIL_CPU_AVX512)

#include <immintrin.h>
#include <sleef.h>

#include "coil_vec_base.h"

// libcoil_vmath (src/kernels/vmath/vmath.h, built with Eigen, linked through
// IsaInfo::link_flags): math that would cost a kernel too much compile time to include.
extern "C" __m512 coil_vmath_erf_f32x16(__m512 x) noexcept __attribute__((const));

#if defined(COIL_USE_LIBMVEC)
// glibc's libmvec (-lmvec, glibc >= 2.35; runtime/isa.cpp adds both where CMake found it):
// f32 expm1, log1p, tanh, sin and cos, 1.8-3.5x faster than SLEEF's on AVX-512 (sin and cos 10x
// for |x| in 125..1e4, 1.5-1.9x slower beyond 2e4) and within 2.4 ulp over every float
// (docs/numerics.md). log stays SLEEF's (libmvec's logf is 3.1 ulp off); exp is inline.
extern "C" {
__m512 _ZGVeN16v_expm1f(__m512 x) noexcept __attribute__((const));
__m512 _ZGVeN16v_log1pf(__m512 x) noexcept __attribute__((const));
__m512 _ZGVeN16v_tanhf(__m512 x) noexcept __attribute__((const));
__m512 _ZGVeN16v_sinf(__m512 x) noexcept __attribute__((const));
__m512 _ZGVeN16v_cosf(__m512 x) noexcept __attribute__((const));
}
// The function a Vectorized<float> op calls: libmvec's where the build found it, else SLEEF's.
#define COIL_MVEC_OR_SLEEF(sleef, mvec) mvec
#else
#define COIL_MVEC_OR_SLEEF(sleef, mvec) sleef
#endif

// gcc 12's AVX-512 intrinsics pass an "undefined" register (`__m512 __Y = __Y;`) as the
// merge source of unmasked operations, which -W(maybe-)uninitialized then reports in every
// caller after inlining (GCC PR 105593). The pragma applies through inlining.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace coil {
inline namespace COIL_VEC_ISA {
namespace vec_detail {

/// The first n lanes (0 <= n <= 16).
inline __mmask16 first16(int64_t n) {
  return static_cast<__mmask16>((uint32_t{1} << n) - 1u);
}
inline __mmask8 first8(int64_t n) {
  return static_cast<__mmask8>((uint32_t{1} << n) - 1u);
}

template <typename T>
struct Ops;

template <>
struct Ops<float> {
  using T = float;
  using value_type = float;
  using reg = __m512;
  using mask = __mmask16;
  static constexpr int lanes = 16;

  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg iota() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static reg loadu_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first16(n), p); }
  static void storeu(float* p, reg a) { _mm512_storeu_ps(p, a); }
  static void storeu_n(float* p, reg a, int64_t n) { _mm512_mask_storeu_ps(p, first16(n), a); }
  /// A non-temporal store where p is 64-byte aligned (vmovntps needs it), else a plain one.
  static void stream(float* p, reg a) {
    if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) {
      _mm512_stream_ps(p, a);
    } else {
      _mm512_storeu_ps(p, a);
    }
  }
  static mask first_n(int64_t n) { return first16(n); }
  /// The even lanes of a then b (a0 a2 .. a14 b0 b2 .. b14): a stride-2 load's deinterleave.
  static reg even_lanes(reg a, reg b) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(a, even, b);
  }

  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg neg(reg a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
  static reg abs(reg a) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), a); }
  static reg bit_and(reg a, reg b) { return _mm512_and_ps(a, b); }
  static reg bit_or(reg a, reg b) { return _mm512_or_ps(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm512_xor_ps(a, b); }

  static mask eq(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
  static mask lt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static mask isnan(reg a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static mask mask_and(mask a, mask b) { return static_cast<mask>(a & b); }
  static mask mask_or(mask a, mask b) { return static_cast<mask>(a | b); }
  static mask mask_not(mask a) { return static_cast<mask>(~a); }
  static reg from_mask(mask m) { return _mm512_castsi512_ps(_mm512_movm_epi32(m)); }
  static mask to_mask(reg a) { return _mm512_movepi32_mask(_mm512_castps_si512(a)); }
  static reg blend(mask m, reg a, reg b) { return _mm512_mask_blend_ps(m, a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }

  static reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  static reg floor(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  static reg ceil(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  }
  static reg round(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg trunc(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  }
  /// e^a inline (no call: a kernel keeps its registers across it): a = n ln2 + r, |r| <= ln2/2,
  /// with ln2 in two parts (Cody-Waite), e^r by Cephes' degree-7 polynomial (1 + r + r^2 p(r)),
  /// scaled by 2^n with one rounding (vscalefps, which also rounds into the subnormals).
  /// Within 1.01 ulp of e^a over every float in [-110, 110] (SLEEF's u10: 0.98), e^+inf = inf,
  /// e^-inf = 0, NaN propagates (max and min return their second operand when either is NaN).
  /// A SiLU or softmax called SLEEF's once per vector: in a convolution's epilogue the call
  /// spilled all 24 accumulators.
  static reg exp(reg a) {
    const reg x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), a));
    const reg n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    reg p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    return _mm512_scalef_ps(_mm512_add_ps(p, _mm512_set1_ps(1.0f)), n);
  }
  static reg log(reg a) { return Sleef_logf16_u10avx512f(a); }
  static reg log1p(reg a) {
#if defined(COIL_USE_LIBMVEC)
    // libmvec's is 1.8x faster, but takes a scalar path (3x slower than SLEEF's) for lanes at
    // or below -1 and NaN lanes. Those lanes go in as 0 and get their results after the call
    // (-inf at -1, NaN below, the NaN itself), so that each lane's result depends on its own
    // input only: choosing SLEEF for a whole vector with such a lane gave a value 1 ulp off
    // the same element's in another grouping (fuzz seed 403 index 212: x < max(x, 0) true).
    mask ok = gt(a, set1(-1.0f));
    if (ok == 0xffff) return _ZGVeN16v_log1pf(a);
    reg r = _ZGVeN16v_log1pf(blend(ok, zero(), a));
    reg special = blend(eq(a, set1(-1.0f)), set1(std::numeric_limits<float>::quiet_NaN()),
                        set1(-std::numeric_limits<float>::infinity()));
    special = blend(isnan(a), special, a);
    return blend(ok, special, r);
#else
    // SLEEF's log1p overflows to inf for huge x; there log(x) is within 0.1 ulp of log1p(x).
    reg r = Sleef_log1pf16_u10avx512f(a);
    mask big = gt(a, set1(0x1p24f));
    return big ? blend(big, r, Sleef_logf16_u10avx512f(a)) : r;
#endif
  }
  static reg expm1(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_expm1f16_u10avx512f, _ZGVeN16v_expm1f)(a);
  }
  static reg tanh(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_tanhf16_u10avx512f, _ZGVeN16v_tanhf)(a);
  }
  static reg sin(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_sinf16_u10avx512f, _ZGVeN16v_sinf)(a);
  }
  static reg cos(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_cosf16_u10avx512f, _ZGVeN16v_cosf)(a);
  }
  // Eigen's erf from libcoil_vmath: 8x faster than SLEEF's, within 8 ulp (docs/numerics.md).
  static reg erf(reg a) {
    return coil_vmath_erf_f32x16(a);
  }
  static reg pow(reg a, reg b) {
    reg r = Sleef_powf16_u10avx512f(a, b);
    mask redo = pow_edge(a, b, r);
    return redo ? blend(redo, r, zip_lanes<Ops>(a, b, [](T x, T y) { return std::pow(x, y); })) : r;
  }
  // Exact in the C library; SLEEF's fmod gives NaN for subnormal divisors.
  static reg fmod(reg a, reg b) {
    return zip_lanes<Ops>(a, b, [](T x, T y) { return std::fmod(x, y); });
  }
  // SLEEF's pow over- and underflows early near the ends of the range (pow(DBL_MAX, 1) is
  // inf): lanes with an infinite or zero result from finite nonzero inputs are redone.
  static mask pow_edge(reg a, reg b, reg r) {
    reg inf = set1(std::numeric_limits<T>::infinity());
    mask finite_in = mask_and(lt(abs(a), inf), lt(abs(b), inf));
    mask extreme = mask_or(eq(abs(r), inf), eq(r, zero()));
    return mask_and(mask_and(finite_in, extreme), ne(a, zero()));
  }
};

template <>
struct Ops<double> {
  using T = double;
  using value_type = double;
  using reg = __m512d;
  using mask = __mmask8;
  static constexpr int lanes = 8;

  static reg zero() { return _mm512_setzero_pd(); }
  static reg set1(double x) { return _mm512_set1_pd(x); }
  static reg iota() { return _mm512_setr_pd(0, 1, 2, 3, 4, 5, 6, 7); }
  static reg loadu(const double* p) { return _mm512_loadu_pd(p); }
  static reg loadu_n(const double* p, int64_t n) { return _mm512_maskz_loadu_pd(first8(n), p); }
  static void storeu(double* p, reg a) { _mm512_storeu_pd(p, a); }
  static void storeu_n(double* p, reg a, int64_t n) { _mm512_mask_storeu_pd(p, first8(n), a); }
  static mask first_n(int64_t n) { return first8(n); }

  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_pd(a, b); }
  static reg neg(reg a) { return _mm512_xor_pd(a, _mm512_set1_pd(-0.0)); }
  static reg abs(reg a) { return _mm512_andnot_pd(_mm512_set1_pd(-0.0), a); }
  static reg bit_and(reg a, reg b) { return _mm512_and_pd(a, b); }
  static reg bit_or(reg a, reg b) { return _mm512_or_pd(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm512_xor_pd(a, b); }

  static mask eq(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_NEQ_UQ); }
  static mask lt(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
  static mask isnan(reg a) { return _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q); }
  static mask mask_and(mask a, mask b) { return static_cast<mask>(a & b); }
  static mask mask_or(mask a, mask b) { return static_cast<mask>(a | b); }
  static mask mask_not(mask a) { return static_cast<mask>(~a); }
  static reg from_mask(mask m) { return _mm512_castsi512_pd(_mm512_movm_epi64(m)); }
  static mask to_mask(reg a) { return _mm512_movepi64_mask(_mm512_castpd_si512(a)); }
  static reg blend(mask m, reg a, reg b) { return _mm512_mask_blend_pd(m, a, b); }
  static reg max(reg a, reg b) { return _mm512_max_pd(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_pd(a, b); }

  static reg sqrt(reg a) { return _mm512_sqrt_pd(a); }
  static reg floor(reg a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  static reg ceil(reg a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  }
  static reg round(reg a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg trunc(reg a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  }
  static reg exp(reg a) { return Sleef_expd8_u10avx512f(a); }
  static reg expm1(reg a) { return Sleef_expm1d8_u10avx512f(a); }
  static reg log(reg a) { return Sleef_logd8_u10avx512f(a); }
  static reg log1p(reg a) {
    // SLEEF's log1p overflows to inf for huge x; there log(x) is within 0.1 ulp of log1p(x).
    reg r = Sleef_log1pd8_u10avx512f(a);
    mask big = gt(a, set1(0x1p53));
    return big ? blend(big, r, Sleef_logd8_u10avx512f(a)) : r;
  }
  static reg tanh(reg a) { return Sleef_tanhd8_u10avx512f(a); }
  static reg erf(reg a) { return Sleef_erfd8_u10avx512f(a); }
  static reg sin(reg a) { return Sleef_sind8_u10avx512f(a); }
  static reg cos(reg a) { return Sleef_cosd8_u10avx512f(a); }
  static reg pow(reg a, reg b) {
    reg r = Sleef_powd8_u10avx512f(a, b);
    mask redo = pow_edge(a, b, r);
    return redo ? blend(redo, r, zip_lanes<Ops>(a, b, [](T x, T y) { return std::pow(x, y); })) : r;
  }
  // Exact in the C library; SLEEF's fmod gives NaN for subnormal divisors.
  static reg fmod(reg a, reg b) {
    return zip_lanes<Ops>(a, b, [](T x, T y) { return std::fmod(x, y); });
  }
  // SLEEF's pow over- and underflows early near the ends of the range (pow(DBL_MAX, 1) is
  // inf): lanes with an infinite or zero result from finite nonzero inputs are redone.
  static mask pow_edge(reg a, reg b, reg r) {
    reg inf = set1(std::numeric_limits<T>::infinity());
    mask finite_in = mask_and(lt(abs(a), inf), lt(abs(b), inf));
    mask extreme = mask_or(eq(abs(r), inf), eq(r, zero()));
    return mask_and(mask_and(finite_in, extreme), ne(a, zero()));
  }
};

template <>
struct Ops<int32_t> {
  using value_type = int32_t;
  using reg = __m512i;
  using mask = __mmask16;
  static constexpr int lanes = 16;

  static reg zero() { return _mm512_setzero_si512(); }
  static reg set1(int32_t x) { return _mm512_set1_epi32(x); }
  static reg iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static reg loadu(const int32_t* p) { return _mm512_loadu_si512(p); }
  static reg loadu_n(const int32_t* p, int64_t n) {
    return _mm512_maskz_loadu_epi32(first16(n), p);
  }
  static void storeu(int32_t* p, reg a) { _mm512_storeu_si512(p, a); }
  static void storeu_n(int32_t* p, reg a, int64_t n) { _mm512_mask_storeu_epi32(p, first16(n), a); }
  static mask first_n(int64_t n) { return first16(n); }

  static reg add(reg a, reg b) { return _mm512_add_epi32(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_epi32(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mullo_epi32(a, b); }
  static reg neg(reg a) { return _mm512_sub_epi32(_mm512_setzero_si512(), a); }
  static reg abs(reg a) { return _mm512_abs_epi32(a); }
  static reg bit_and(reg a, reg b) { return _mm512_and_si512(a, b); }
  static reg bit_or(reg a, reg b) { return _mm512_or_si512(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm512_xor_si512(a, b); }

  static mask eq(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_EQ); }
  static mask ne(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_NE); }
  static mask lt(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_LT); }
  static mask le(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_LE); }
  static mask gt(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_NLE); }
  static mask ge(reg a, reg b) { return _mm512_cmp_epi32_mask(a, b, _MM_CMPINT_NLT); }
  static mask mask_and(mask a, mask b) { return static_cast<mask>(a & b); }
  static mask mask_or(mask a, mask b) { return static_cast<mask>(a | b); }
  static mask mask_not(mask a) { return static_cast<mask>(~a); }
  static reg from_mask(mask m) { return _mm512_movm_epi32(m); }
  static mask to_mask(reg a) { return _mm512_movepi32_mask(a); }
  static reg blend(mask m, reg a, reg b) { return _mm512_mask_blend_epi32(m, a, b); }
  static reg max(reg a, reg b) { return _mm512_max_epi32(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_epi32(a, b); }
};

template <>
struct Ops<int64_t> {
  using value_type = int64_t;
  using reg = __m512i;
  using mask = __mmask8;
  static constexpr int lanes = 8;

  static reg zero() { return _mm512_setzero_si512(); }
  static reg set1(int64_t x) { return _mm512_set1_epi64(x); }
  static reg iota() { return _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7); }
  static reg loadu(const int64_t* p) { return _mm512_loadu_si512(p); }
  static reg loadu_n(const int64_t* p, int64_t n) { return _mm512_maskz_loadu_epi64(first8(n), p); }
  static void storeu(int64_t* p, reg a) { _mm512_storeu_si512(p, a); }
  static void storeu_n(int64_t* p, reg a, int64_t n) { _mm512_mask_storeu_epi64(p, first8(n), a); }
  static mask first_n(int64_t n) { return first8(n); }

  static reg add(reg a, reg b) { return _mm512_add_epi64(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_epi64(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mullo_epi64(a, b); }
  static reg neg(reg a) { return _mm512_sub_epi64(_mm512_setzero_si512(), a); }
  static reg abs(reg a) { return _mm512_abs_epi64(a); }
  static reg bit_and(reg a, reg b) { return _mm512_and_si512(a, b); }
  static reg bit_or(reg a, reg b) { return _mm512_or_si512(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm512_xor_si512(a, b); }

  static mask eq(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_EQ); }
  static mask ne(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_NE); }
  static mask lt(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_LT); }
  static mask le(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_LE); }
  static mask gt(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_NLE); }
  static mask ge(reg a, reg b) { return _mm512_cmp_epi64_mask(a, b, _MM_CMPINT_NLT); }
  static mask mask_and(mask a, mask b) { return static_cast<mask>(a & b); }
  static mask mask_or(mask a, mask b) { return static_cast<mask>(a | b); }
  static mask mask_not(mask a) { return static_cast<mask>(~a); }
  static reg from_mask(mask m) { return _mm512_movm_epi64(m); }
  static mask to_mask(reg a) { return _mm512_movepi64_mask(a); }
  static reg blend(mask m, reg a, reg b) { return _mm512_mask_blend_epi64(m, a, b); }
  static reg max(reg a, reg b) { return _mm512_max_epi64(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_epi64(a, b); }
};

// ---- conversions ------------------------------------------------------------------------

template <>
struct FastCvt<int32_t, float> {
  static constexpr bool available = true;
  static __m512i convert(__m512 a) { return _mm512_cvttps_epi32(a); }
};
template <>
struct FastCvt<float, int32_t> {
  static constexpr bool available = true;
  static __m512 convert(__m512i a) { return _mm512_cvtepi32_ps(a); }
};
template <>
struct FastCvt<int64_t, double> {
  static constexpr bool available = true;
  static __m512i convert(__m512d a) { return _mm512_cvttpd_epi64(a); }
};
template <>
struct FastCvt<double, int64_t> {
  static constexpr bool available = true;
  static __m512d convert(__m512i a) { return _mm512_cvtepi64_pd(a); }
};

inline __m256i load_u16x16(const void* p, int64_t n) {
  return n >= 16 ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                 : _mm256_maskz_loadu_epi16(first16(n), p);
}
inline void store_u16x16(void* p, __m256i h, int64_t n) {
  if (n >= 16) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), h);
  } else {
    _mm256_mask_storeu_epi16(p, first16(n), h);
  }
}

// bfloat16 <-> float, bit for bit as coil::bfloat16: round to nearest even, a NaN keeps its
// sign and upper payload and becomes quiet.
template <>
struct FastIO<float, bfloat16> {
  static constexpr bool available = true;
  static __m512 load(const bfloat16* p, int64_t n) {
    __m512i wide = _mm512_cvtepu16_epi32(load_u16x16(p, n));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void store(bfloat16* p, __m512 v, int64_t n) {
#if defined(__AVX512BF16__)
    // vcvtneps2bf16 rounds and quiets NaNs exactly so, in one instruction instead of the ten
    // below (bf16 gelu 3-4% faster, A/B), but flushes f32 subnormals to signed zero: a vector
    // with a subnormal lane (|bits| - 1 < 0x7fffff, unsigned; zeros excluded) takes the
    // integer path.
    __m512i mag = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
    __mmask16 subnormal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                                                  _mm512_set1_epi32(0x7fffff));
    if (subnormal == 0) {
      store_u16x16(p, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)), n);
      return;
    }
#endif
    store_integer(p, v, n);
  }
  static void store_integer(bfloat16* p, __m512 v, int64_t n) {
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __m512i nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    store_u16x16(p, _mm512_cvtepi32_epi16(r), n);
  }
};

// half <-> float with vcvtph2ps / vcvtps2ph (exact, round to nearest even), plus coil::half's
// NaN rules: a signaling NaN keeps its payload on widening, any NaN narrows to sign | 0x7e00.
template <>
struct FastIO<float, half> {
  static constexpr bool available = true;
  static __m512 load(const half* p, int64_t n) {
    __m256i h = load_u16x16(p, n);
    __m512 f = _mm512_cvtph_ps(h);
    __m512i w = _mm512_cvtepu16_epi32(h);
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff)),
                                               _mm512_set1_epi32(0x7c00));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
    __m512i mant = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
    __m512i nan = _mm512_or_si512(_mm512_or_si512(sign, mant), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_ps(is_nan, f, _mm512_castsi512_ps(nan));
  }
  static void store(half* p, __m512 v, int64_t n) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_castps_si512(v);
    __m512i nan =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                        _mm512_set1_epi32(0x7e00));
    __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    store_u16x16(p, _mm256_mask_blend_epi16(is_nan, h, _mm512_cvtepi32_epi16(nan)), n);
  }
};

// bool <-> float: a load widens the bytes (0 or 1) in one instruction, a store writes 1 for
// every nonzero lane (a NaN too, so a mask's true lanes store 1), as lane_cast does. A masked
// softmax's `where(mask, -inf, x)` reads its mask this way (cpp_vec_ops.h's mask ops).
template <>
struct FastIO<float, bool> {
  static constexpr bool available = true;
  static __m512 load(const bool* p, int64_t n) {
    const __m128i b = n >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                              : _mm_maskz_loadu_epi8(first16(n), p);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
  }
  static void store(bool* p, __m512 v, int64_t n) {
    const __mmask16 nonzero = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const __m128i b = _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(nonzero, 1));
    if (n >= 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
    } else {
      _mm_mask_storeu_epi8(p, first16(n), b);
    }
  }
};

}  // namespace vec_detail

/// Transposes a 16x16 float tile in registers (CppTile2DKernel): dst[j * dst_stride + i] =
/// src[i * src_stride + j] for i, j < 16. Only the first src_rows rows and src_cols columns of
/// src are read (masked loads); the rest of dst's 16x16 tile is zero. src may equal dst with
/// equal strides (every row is loaded before any is stored).
inline void transpose_tile(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t src_rows = 16, int64_t src_cols = 16) {
  __m512 r[16], t[16];
  if (src_rows >= 16 && src_cols >= 16) {
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
  } else {
    const __mmask16 m = vec_detail::first16(src_cols);
    for (int i = 0; i < 16; ++i) {
      r[i] = i < src_rows ? _mm512_maskz_loadu_ps(m, src + i * src_stride) : _mm512_setzero_ps();
    }
  }
  // Pairs of rows interleaved: t[2k] lane l = (a4l, b4l, a4l+1, b4l+1), t[2k+1] the upper half.
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // Quads: r[4k + j]'s 128-bit lane l holds column 4l + j of rows 4k..4k+3.
  for (int k = 0; k < 4; ++k) {
    const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * k + 2]), d = _mm512_castps_pd(t[4 * k + 3]);
    r[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // 128-bit lanes: output row 4l + j gathers lane l of r[j], r[4 + j], r[8 + j], r[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    t[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    t[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * dst_stride, t[i]);
}

}  // namespace COIL_VEC_ISA
}  // namespace coil

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef COIL_MVEC_OR_SLEEF  // only the Ops above choose with it

#endif  // defined(COIL_CPU_AVX512)

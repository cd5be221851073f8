// coil_vec.h's primitives on AVX2 (COIL_CPU_AVX2; compiled with -mavx2 -mfma -mf16c). A mask
// is a register with all-ones lanes. Tails use vmaskmov/vpmaskmov, which never touch memory in
// masked-off lanes; 16-bit tails are copied through a stack buffer. Transcendentals are SLEEF's
// 1.0-ulp (u10) functions, except f32 erf (libcoil_vmath) and, with COIL_USE_LIBMVEC, f32
// expm1/log1p/tanh/sin/cos (glibc's libmvec).
#pragma once

// Empty unless selected (coil_vec.h prefers AVX-512 when both macros are set).
#if defined(COIL_CPU_AVX2) && !defined(COIL_CPU_AVX512)

#include <immintrin.h>
#include <sleef.h>

#include "coil_vec_base.h"

// libcoil_vmath (src/kernels/vmath/vmath.h, built with Eigen, linked through
// IsaInfo::link_flags): math that would cost a kernel too much compile time to include.
extern "C" __m256 coil_vmath_erf_f32x8(__m256 x) noexcept __attribute__((const));

#if defined(COIL_USE_LIBMVEC)
// glibc's libmvec (-lmvec, glibc >= 2.35; runtime/isa.cpp adds both where CMake found it):
// f32 expm1, log1p, tanh, sin and cos, 2-3x faster than SLEEF's on AVX2 and within 2 ulp over
// every float (docs/numerics.md); exp and log stay SLEEF's, as in coil_vec_avx512.h.
extern "C" {
__m256 _ZGVdN8v_expm1f(__m256 x) noexcept __attribute__((const));
__m256 _ZGVdN8v_log1pf(__m256 x) noexcept __attribute__((const));
__m256 _ZGVdN8v_tanhf(__m256 x) noexcept __attribute__((const));
__m256 _ZGVdN8v_sinf(__m256 x) noexcept __attribute__((const));
__m256 _ZGVdN8v_cosf(__m256 x) noexcept __attribute__((const));
}
// The function a Vectorized<float> op calls: libmvec's where the build found it, else SLEEF's.
#define COIL_MVEC_OR_SLEEF(sleef, mvec) mvec
#else
#define COIL_MVEC_OR_SLEEF(sleef, mvec) sleef
#endif

namespace coil {
inline namespace COIL_VEC_ISA {
namespace vec_detail {

/// All-ones in the first n 32-bit (64-bit) lanes, 0 <= n <= 8 (4).
inline __m256i first8_epi32(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i first4_epi64(int64_t n) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

template <typename T>
struct Ops;

template <>
struct Ops<float> {
  using T = float;
  using value_type = float;
  using reg = __m256;
  using mask = __m256;
  static constexpr int lanes = 8;

  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg iota() { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static reg loadu_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, first8_epi32(n)); }
  static void storeu(float* p, reg a) { _mm256_storeu_ps(p, a); }
  /// A non-temporal store where p is 32-byte aligned (vmovntps needs it), else a plain one.
  static void stream(float* p, reg a) {
    if ((reinterpret_cast<uintptr_t>(p) & 31) == 0) {
      _mm256_stream_ps(p, a);
    } else {
      _mm256_storeu_ps(p, a);
    }
  }
  static void storeu_n(float* p, reg a, int64_t n) { _mm256_maskstore_ps(p, first8_epi32(n), a); }
  static mask first_n(int64_t n) { return _mm256_castsi256_ps(first8_epi32(n)); }
  /// The even lanes of a then b (a0 a2 a4 a6 b0 b2 b4 b6): a stride-2 load's deinterleave.
  static reg even_lanes(reg a, reg b) {
    // [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit pairs in the order 0 2 1 3.
    const __m256 mixed = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), 0xD8));
  }

  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg neg(reg a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static reg abs(reg a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static reg bit_and(reg a, reg b) { return _mm256_and_ps(a, b); }
  static reg bit_or(reg a, reg b) { return _mm256_or_ps(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm256_xor_ps(a, b); }

  static mask eq(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
  static mask lt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static mask isnan(reg a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static mask mask_and(mask a, mask b) { return _mm256_and_ps(a, b); }
  static mask mask_or(mask a, mask b) { return _mm256_or_ps(a, b); }
  static mask mask_not(mask a) {
    return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
  }
  static reg from_mask(mask m) { return m; }
  static mask to_mask(reg a) {
    return _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(a), 31));
  }
  static reg blend(mask m, reg a, reg b) { return _mm256_blendv_ps(a, b, m); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }

  static reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static reg floor(reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static reg ceil(reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static reg round(reg a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg trunc(reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static reg exp(reg a) { return Sleef_expf8_u10avx2(a); }
  static reg log(reg a) { return Sleef_logf8_u10avx2(a); }
  static reg log1p(reg a) {
#if defined(COIL_USE_LIBMVEC)
    // As on AVX-512: lanes at or below -1 and NaN lanes go in as 0 (libmvec's scalar path) and
    // get their results after the call, so each lane depends on its own input only.
    mask ok = gt(a, set1(-1.0f));
    if (_mm256_movemask_ps(ok) == 0xff) return _ZGVdN8v_log1pf(a);
    reg r = _ZGVdN8v_log1pf(blend(ok, zero(), a));
    reg special = blend(eq(a, set1(-1.0f)), set1(std::numeric_limits<float>::quiet_NaN()),
                        set1(-std::numeric_limits<float>::infinity()));
    special = blend(isnan(a), special, a);
    return blend(ok, special, r);
#else
    // SLEEF's log1p overflows to inf for huge x; there log(x) is within 0.1 ulp of log1p(x).
    reg r = Sleef_log1pf8_u10avx2(a);
    mask big = gt(a, set1(0x1p24f));
    return any(big) ? blend(big, r, Sleef_logf8_u10avx2(a)) : r;
#endif
  }
  static reg expm1(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_expm1f8_u10avx2, _ZGVdN8v_expm1f)(a);
  }
  static reg tanh(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_tanhf8_u10avx2, _ZGVdN8v_tanhf)(a);
  }
  static reg sin(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_sinf8_u10avx2, _ZGVdN8v_sinf)(a);
  }
  static reg cos(reg a) {
    return COIL_MVEC_OR_SLEEF(Sleef_cosf8_u10avx2, _ZGVdN8v_cosf)(a);
  }
  // Eigen's erf from libcoil_vmath: 8x faster than SLEEF's, within 8 ulp (docs/numerics.md).
  static reg erf(reg a) {
    return coil_vmath_erf_f32x8(a);
  }
  static reg pow(reg a, reg b) {
    reg r = Sleef_powf8_u10avx2(a, b);
    mask redo = pow_edge(a, b, r);
    return any(redo) ? blend(redo, r, zip_lanes<Ops>(a, b, [](T x, T y) { return std::pow(x, y); }))
                     : r;
  }
  // Exact in the C library; SLEEF's fmod gives NaN for subnormal divisors.
  static reg fmod(reg a, reg b) {
    return zip_lanes<Ops>(a, b, [](T x, T y) { return std::fmod(x, y); });
  }
  // SLEEF's pow over- and underflows early near the ends of the range (see coil_vec_avx512.h).
  static mask pow_edge(reg a, reg b, reg r) {
    reg inf = set1(std::numeric_limits<T>::infinity());
    mask finite_in = mask_and(lt(abs(a), inf), lt(abs(b), inf));
    mask extreme = mask_or(eq(abs(r), inf), eq(r, zero()));
    return mask_and(mask_and(finite_in, extreme), ne(a, zero()));
  }
  static bool any(mask m) {
    return _mm256_movemask_ps(m) != 0;
  }
};

template <>
struct Ops<double> {
  using T = double;
  using value_type = double;
  using reg = __m256d;
  using mask = __m256d;
  static constexpr int lanes = 4;

  static reg zero() { return _mm256_setzero_pd(); }
  static reg set1(double x) { return _mm256_set1_pd(x); }
  static reg iota() { return _mm256_setr_pd(0, 1, 2, 3); }
  static reg loadu(const double* p) { return _mm256_loadu_pd(p); }
  static reg loadu_n(const double* p, int64_t n) { return _mm256_maskload_pd(p, first4_epi64(n)); }
  static void storeu(double* p, reg a) { _mm256_storeu_pd(p, a); }
  static void storeu_n(double* p, reg a, int64_t n) { _mm256_maskstore_pd(p, first4_epi64(n), a); }
  static mask first_n(int64_t n) { return _mm256_castsi256_pd(first4_epi64(n)); }

  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_pd(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_pd(a, b); }
  static reg neg(reg a) { return _mm256_xor_pd(a, _mm256_set1_pd(-0.0)); }
  static reg abs(reg a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
  static reg bit_and(reg a, reg b) { return _mm256_and_pd(a, b); }
  static reg bit_or(reg a, reg b) { return _mm256_or_pd(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm256_xor_pd(a, b); }

  static mask eq(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_NEQ_UQ); }
  static mask lt(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
  static mask isnan(reg a) { return _mm256_cmp_pd(a, a, _CMP_UNORD_Q); }
  static mask mask_and(mask a, mask b) { return _mm256_and_pd(a, b); }
  static mask mask_or(mask a, mask b) { return _mm256_or_pd(a, b); }
  static mask mask_not(mask a) {
    return _mm256_xor_pd(a, _mm256_castsi256_pd(_mm256_set1_epi32(-1)));
  }
  static reg from_mask(mask m) { return m; }
  static mask to_mask(reg a) {
    return _mm256_castsi256_pd(_mm256_cmpgt_epi64(_mm256_setzero_si256(), _mm256_castpd_si256(a)));
  }
  static reg blend(mask m, reg a, reg b) { return _mm256_blendv_pd(a, b, m); }
  static reg max(reg a, reg b) { return _mm256_max_pd(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_pd(a, b); }

  static reg sqrt(reg a) { return _mm256_sqrt_pd(a); }
  static reg floor(reg a) { return _mm256_round_pd(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static reg ceil(reg a) { return _mm256_round_pd(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static reg round(reg a) {
    return _mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg trunc(reg a) { return _mm256_round_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static reg exp(reg a) { return Sleef_expd4_u10avx2(a); }
  static reg expm1(reg a) { return Sleef_expm1d4_u10avx2(a); }
  static reg log(reg a) { return Sleef_logd4_u10avx2(a); }
  static reg log1p(reg a) {
    // SLEEF's log1p overflows to inf for huge x; there log(x) is within 0.1 ulp of log1p(x).
    reg r = Sleef_log1pd4_u10avx2(a);
    mask big = gt(a, set1(0x1p53));
    return any(big) ? blend(big, r, Sleef_logd4_u10avx2(a)) : r;
  }
  static reg tanh(reg a) { return Sleef_tanhd4_u10avx2(a); }
  static reg erf(reg a) { return Sleef_erfd4_u10avx2(a); }
  static reg sin(reg a) { return Sleef_sind4_u10avx2(a); }
  static reg cos(reg a) { return Sleef_cosd4_u10avx2(a); }
  static reg pow(reg a, reg b) {
    reg r = Sleef_powd4_u10avx2(a, b);
    mask redo = pow_edge(a, b, r);
    return any(redo) ? blend(redo, r, zip_lanes<Ops>(a, b, [](T x, T y) { return std::pow(x, y); }))
                     : r;
  }
  // Exact in the C library; SLEEF's fmod gives NaN for subnormal divisors.
  static reg fmod(reg a, reg b) {
    return zip_lanes<Ops>(a, b, [](T x, T y) { return std::fmod(x, y); });
  }
  // SLEEF's pow over- and underflows early near the ends of the range (see coil_vec_avx512.h).
  static mask pow_edge(reg a, reg b, reg r) {
    reg inf = set1(std::numeric_limits<T>::infinity());
    mask finite_in = mask_and(lt(abs(a), inf), lt(abs(b), inf));
    mask extreme = mask_or(eq(abs(r), inf), eq(r, zero()));
    return mask_and(mask_and(finite_in, extreme), ne(a, zero()));
  }
  static bool any(mask m) { return _mm256_movemask_pd(m) != 0; }
};

// Integer registers: the comparisons AVX2 lacks are built from == and >.
template <typename T>
struct IntOpsAvx2 {
  using value_type = T;
  using reg = __m256i;
  using mask = __m256i;
  static constexpr bool is64 = sizeof(T) == 8;
  static constexpr int lanes = 32 / sizeof(T);

  static reg zero() { return _mm256_setzero_si256(); }
  static reg set1(T x) {
    if constexpr (is64) {
      return _mm256_set1_epi64x(x);
    } else {
      return _mm256_set1_epi32(x);
    }
  }
  static reg iota() {
    if constexpr (is64) {
      return _mm256_setr_epi64x(0, 1, 2, 3);
    } else {
      return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    }
  }
  static reg loadu(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static mask first_n(int64_t n) { return is64 ? first4_epi64(n) : first8_epi32(n); }
  static reg loadu_n(const T* p, int64_t n) {
    if constexpr (is64) {
      return _mm256_maskload_epi64(reinterpret_cast<const long long*>(p), first_n(n));
    } else {
      return _mm256_maskload_epi32(reinterpret_cast<const int*>(p), first_n(n));
    }
  }
  static void storeu(T* p, reg a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a); }
  static void storeu_n(T* p, reg a, int64_t n) {
    if constexpr (is64) {
      _mm256_maskstore_epi64(reinterpret_cast<long long*>(p), first_n(n), a);
    } else {
      _mm256_maskstore_epi32(reinterpret_cast<int*>(p), first_n(n), a);
    }
  }

  static reg add(reg a, reg b) { return is64 ? _mm256_add_epi64(a, b) : _mm256_add_epi32(a, b); }
  static reg sub(reg a, reg b) { return is64 ? _mm256_sub_epi64(a, b) : _mm256_sub_epi32(a, b); }
  static reg mul(reg a, reg b) {
    if constexpr (is64) {
      // (ah*2^32 + al) * (bh*2^32 + bl) mod 2^64 = al*bl + ((ah*bl + al*bh) << 32)
      __m256i lo = _mm256_mul_epu32(a, b);
      __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                       _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
      return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
    } else {
      return _mm256_mullo_epi32(a, b);
    }
  }
  static reg neg(reg a) { return sub(zero(), a); }
  static reg abs(reg a) {
    if constexpr (is64) {
      return blend(lt(a, zero()), a, neg(a));
    } else {
      return _mm256_abs_epi32(a);
    }
  }
  static reg bit_and(reg a, reg b) { return _mm256_and_si256(a, b); }
  static reg bit_or(reg a, reg b) { return _mm256_or_si256(a, b); }
  static reg bit_xor(reg a, reg b) { return _mm256_xor_si256(a, b); }

  static mask eq(reg a, reg b) {
    return is64 ? _mm256_cmpeq_epi64(a, b) : _mm256_cmpeq_epi32(a, b);
  }
  static mask gt(reg a, reg b) {
    return is64 ? _mm256_cmpgt_epi64(a, b) : _mm256_cmpgt_epi32(a, b);
  }
  static mask lt(reg a, reg b) { return gt(b, a); }
  static mask ne(reg a, reg b) { return mask_not(eq(a, b)); }
  static mask le(reg a, reg b) { return mask_not(gt(a, b)); }
  static mask ge(reg a, reg b) { return mask_not(gt(b, a)); }
  static mask mask_and(mask a, mask b) { return _mm256_and_si256(a, b); }
  static mask mask_or(mask a, mask b) { return _mm256_or_si256(a, b); }
  static mask mask_not(mask a) { return _mm256_xor_si256(a, _mm256_set1_epi32(-1)); }
  static reg from_mask(mask m) { return m; }
  static mask to_mask(reg a) {
    return is64 ? _mm256_cmpgt_epi64(zero(), a) : _mm256_srai_epi32(a, 31);
  }
  static reg blend(mask m, reg a, reg b) { return _mm256_blendv_epi8(a, b, m); }
  static reg max(reg a, reg b) {
    if constexpr (is64) {
      return blend(gt(a, b), b, a);
    } else {
      return _mm256_max_epi32(a, b);
    }
  }
  static reg min(reg a, reg b) {
    if constexpr (is64) {
      return blend(lt(a, b), b, a);
    } else {
      return _mm256_min_epi32(a, b);
    }
  }
};

template <>
struct Ops<int32_t> : IntOpsAvx2<int32_t> {};
template <>
struct Ops<int64_t> : IntOpsAvx2<int64_t> {};

// ---- conversions ------------------------------------------------------------------------

template <>
struct FastCvt<int32_t, float> {
  static constexpr bool available = true;
  static __m256i convert(__m256 a) { return _mm256_cvttps_epi32(a); }
};
template <>
struct FastCvt<float, int32_t> {
  static constexpr bool available = true;
  static __m256 convert(__m256i a) { return _mm256_cvtepi32_ps(a); }
};

inline __m128i load_u16x8(const void* p, int64_t n) {
  if (n >= 8) return _mm_loadu_si128(static_cast<const __m128i*>(p));
  __m128i r = _mm_setzero_si128();
  std::memcpy(&r, p, static_cast<size_t>(n) * 2);
  return r;
}
inline void store_u16x8(void* p, __m128i h, int64_t n) {
  if (n >= 8) {
    _mm_storeu_si128(static_cast<__m128i*>(p), h);
  } else {
    std::memcpy(p, &h, static_cast<size_t>(n) * 2);
  }
}
/// Eight 32-bit lanes holding values below 2^16 (or all-ones/zero masks) as 16-bit lanes.
inline __m128i narrow_u32_to_u16(__m256i a) {
  return _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}
inline __m128i narrow_mask_to_u16(__m256i a) {
  return _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

// bfloat16 <-> float with integer arithmetic, bit for bit as coil::bfloat16.
template <>
struct FastIO<float, bfloat16> {
  static constexpr bool available = true;
  static __m256 load(const bfloat16* p, int64_t n) {
    __m256i wide = _mm256_cvtepu16_epi32(load_u16x8(p, n));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static void store(bfloat16* p, __m256 v, int64_t n) {
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i bias =
        _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    store_u16x8(p, narrow_u32_to_u16(_mm256_blendv_epi8(rounded, nan, is_nan)), n);
  }
};

// half <-> float with F16C plus coil::half's NaN rules (see coil_vec_avx512.h).
template <>
struct FastIO<float, half> {
  static constexpr bool available = true;
  static __m256 load(const half* p, int64_t n) {
    __m128i h = load_u16x8(p, n);
    __m256 f = _mm256_cvtph_ps(h);
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7fff)),
                                        _mm256_set1_epi32(0x7c00));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16);
    __m256i mant = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13);
    __m256i nan = _mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_ps(f, _mm256_castsi256_ps(nan), _mm256_castsi256_ps(is_nan));
  }
  static void store(half* p, __m256 v, int64_t n) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i u = _mm256_castps_si256(v);
    __m256i nan =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                        _mm256_set1_epi32(0x7e00));
    __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    h = _mm_blendv_epi8(h, narrow_u32_to_u16(nan), narrow_mask_to_u16(is_nan));
    store_u16x8(p, h, n);
  }
};

// bool <-> float, as coil_vec_avx512.h's: 0/1 bytes widened; a store writes 1 for nonzero lanes.
template <>
struct FastIO<float, bool> {
  static constexpr bool available = true;
  static __m256 load(const bool* p, int64_t n) {
    int64_t bytes = 0;
    std::memcpy(&bytes, p, static_cast<size_t>(n >= 8 ? 8 : n));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes)));
  }
  static void store(bool* p, __m256 v, int64_t n) {
    const int nonzero = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ));
    for (int64_t i = 0; i < (n >= 8 ? 8 : n); ++i) p[i] = ((nonzero >> i) & 1) != 0;
  }
};

}  // namespace vec_detail

/// Transposes an 8x8 float tile in registers (CppTile2DKernel): dst[j * dst_stride + i] =
/// src[i * src_stride + j] for i, j < 8. Only the first src_rows rows and src_cols columns of
/// src are read (masked loads); the rest of dst's 8x8 tile is zero. src may equal dst with
/// equal strides (every row is loaded before any is stored).
inline void transpose_tile(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t src_rows = 8, int64_t src_cols = 8) {
  __m256 r[8], t[8];
  if (src_rows >= 8 && src_cols >= 8) {
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  } else {
    const __m256i m = vec_detail::first8_epi32(src_cols);
    for (int i = 0; i < 8; ++i) {
      r[i] = i < src_rows ? _mm256_maskload_ps(src + i * src_stride, m) : _mm256_setzero_ps();
    }
  }
  // Pairs of rows interleaved, then quads: r[4k + j]'s 128-bit lane l holds column 4l + j of
  // rows 4k..4k+3.
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {
    r[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    r[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    r[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    r[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
    t[4 + j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dst_stride, t[i]);
}

}  // namespace COIL_VEC_ISA
}  // namespace coil

#undef COIL_MVEC_OR_SLEEF  // only the Ops above choose with it

#endif  // defined(COIL_CPU_AVX2) && !defined(COIL_CPU_AVX512)

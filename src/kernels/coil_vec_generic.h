// The portable implementation of coil_vec.h's primitives: plain arrays and lane loops (the
// compiler may vectorize them). With no COIL_CPU_* macro a "vector" has one lane, so generated
// vector code compiles and runs on any CPU; with COIL_CPU_NEON it has 128 bits of lanes (NEON
// intrinsics are future work: the loops are left to the compiler). Math is the C library's, the
// same calls the scalar kernels make, so a one-lane vector kernel computes what CppKernel does.
#pragma once

// Empty when a SIMD implementation is selected.
#if !defined(COIL_CPU_AVX512) && !defined(COIL_CPU_AVX2)

#include "coil_vec_base.h"

namespace coil {
inline namespace COIL_VEC_ISA {
namespace vec_detail {

#if defined(COIL_CPU_NEON)
inline constexpr int kGenericBytes = 16;
#else
inline constexpr int kGenericBytes = 0;  // one lane of every type
#endif

template <typename T>
struct Ops {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>,
                "coil::Vectorized<T> supports float, double, int32_t and int64_t");
  using value_type = T;
  static constexpr int lanes = kGenericBytes == 0 ? 1 : kGenericBytes / static_cast<int>(sizeof(T));
  static constexpr bool is_float = std::is_floating_point_v<T>;
  struct reg {
    T v[lanes];
  };
  struct mask {
    bool m[lanes];
  };

  template <typename F>
  static reg map(const reg& a, F f) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = f(a.v[i]);
    return r;
  }
  template <typename F>
  static reg zip(const reg& a, const reg& b, F f) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = f(a.v[i], b.v[i]);
    return r;
  }
  template <typename F>
  static mask cmp(const reg& a, const reg& b, F f) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = f(a.v[i], b.v[i]);
    return r;
  }

  static reg zero() { return reg{}; }
  static reg set1(T x) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = x;
    return r;
  }
  static reg iota() {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = static_cast<T>(i);
    return r;
  }
  static reg loadu(const T* p) {
    reg r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static reg loadu_n(const T* p, int64_t n) {
    reg r{};
    std::memcpy(r.v, p, static_cast<size_t>(n) * sizeof(T));
    return r;
  }
  static void storeu(T* p, const reg& a) { std::memcpy(p, a.v, sizeof a.v); }
  static void storeu_n(T* p, const reg& a, int64_t n) {
    std::memcpy(p, a.v, static_cast<size_t>(n) * sizeof(T));
  }
  static mask first_n(int64_t n) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = i < n;
    return r;
  }
  /// The even lanes of a then b: a stride-2 load's deinterleave.
  static reg even_lanes(const reg& a, const reg& b) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = 2 * i < lanes ? a.v[2 * i] : b.v[2 * i - lanes];
    return r;
  }

  static reg add(const reg& a, const reg& b) {
    if constexpr (is_float) {
      return zip(a, b, [](T x, T y) { return x + y; });
    } else {
      return zip(a, b, wrap_add<T>);
    }
  }
  static reg sub(const reg& a, const reg& b) {
    if constexpr (is_float) {
      return zip(a, b, [](T x, T y) { return x - y; });
    } else {
      return zip(a, b, wrap_sub<T>);
    }
  }
  static reg mul(const reg& a, const reg& b) {
    if constexpr (is_float) {
      return zip(a, b, [](T x, T y) { return x * y; });
    } else {
      return zip(a, b, wrap_mul<T>);
    }
  }
  static reg div(const reg& a, const reg& b) {
    if constexpr (is_float) {
      return zip(a, b, [](T x, T y) { return x / y; });
    } else {
      return zip(a, b, safe_div<T>);
    }
  }
  static reg neg(const reg& a) {
    if constexpr (is_float) {
      return map(a, [](T x) { return -x; });
    } else {
      return map(a, [](T x) { return wrap_sub(T(0), x); });
    }
  }
  static reg abs(const reg& a) {
    if constexpr (is_float) {
      return map(a, [](T x) { return std::fabs(x); });
    } else {
      return map(a, [](T x) { return x < 0 ? wrap_sub(T(0), x) : x; });
    }
  }
  static reg bit_and(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return from_bits<T>(to_bits(x) & to_bits(y)); });
  }
  static reg bit_or(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return from_bits<T>(to_bits(x) | to_bits(y)); });
  }
  static reg bit_xor(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return from_bits<T>(to_bits(x) ^ to_bits(y)); });
  }

  static mask eq(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x == y; });
  }
  static mask ne(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x != y; });
  }
  static mask lt(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x < y; });
  }
  static mask le(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x <= y; });
  }
  static mask gt(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x > y; });
  }
  static mask ge(const reg& a, const reg& b) {
    return cmp(a, b, [](T x, T y) { return x >= y; });
  }
  static mask isnan(const reg& a) {
    return cmp(a, a, [](T x, T) { return x != x; });
  }
  static mask mask_and(const mask& a, const mask& b) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = a.m[i] && b.m[i];
    return r;
  }
  static mask mask_or(const mask& a, const mask& b) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = a.m[i] || b.m[i];
    return r;
  }
  static mask mask_not(const mask& a) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = !a.m[i];
    return r;
  }
  static reg from_mask(const mask& m) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = m.m[i] ? true_lane<T>() : T(0);
    return r;
  }
  static mask to_mask(const reg& a) {
    mask r;
    for (int i = 0; i < lanes; ++i) r.m[i] = lane_is_true(a.v[i]);
    return r;
  }
  /// m ? b : a, per lane.
  static reg blend(const mask& m, const reg& a, const reg& b) {
    reg r;
    for (int i = 0; i < lanes; ++i) r.v[i] = m.m[i] ? b.v[i] : a.v[i];
    return r;
  }
  /// a > b ? a : b and a < b ? a : b (the x86 max/min rule; callers add NaN handling).
  static reg max(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return x > y ? x : y; });
  }
  static reg min(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return x < y ? x : y; });
  }

  static reg sqrt(const reg& a) {
    return map(a, [](T x) { return std::sqrt(x); });
  }
  static reg floor(const reg& a) {
    return map(a, [](T x) { return std::floor(x); });
  }
  static reg ceil(const reg& a) {
    return map(a, [](T x) { return std::ceil(x); });
  }
  static reg round(const reg& a) {
    return map(a, [](T x) { return std::nearbyint(x); });
  }
  static reg trunc(const reg& a) {
    return map(a, [](T x) { return std::trunc(x); });
  }
  static reg exp(const reg& a) {
    return map(a, [](T x) { return std::exp(x); });
  }
  static reg expm1(const reg& a) {
    return map(a, [](T x) { return std::expm1(x); });
  }
  static reg log(const reg& a) {
    return map(a, [](T x) { return std::log(x); });
  }
  static reg log1p(const reg& a) {
    return map(a, [](T x) { return std::log1p(x); });
  }
  static reg tanh(const reg& a) {
    return map(a, [](T x) { return std::tanh(x); });
  }
  static reg erf(const reg& a) {
    return map(a, [](T x) { return std::erf(x); });
  }
  static reg sin(const reg& a) {
    return map(a, [](T x) { return std::sin(x); });
  }
  static reg cos(const reg& a) {
    return map(a, [](T x) { return std::cos(x); });
  }
  static reg pow(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return std::pow(x, y); });
  }
  static reg fmod(const reg& a, const reg& b) {
    return zip(a, b, [](T x, T y) { return std::fmod(x, y); });
  }
};

}  // namespace vec_detail

/// Transposes an L x L float tile, L the float lane count (CppTile2DKernel; the SIMD headers do
/// it in registers): dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < L. Only the
/// first src_rows rows and src_cols columns of src are read; the rest of dst's tile is zero.
/// src may equal dst with equal strides.
inline void transpose_tile(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t src_rows = vec_detail::Ops<float>::lanes,
                           int64_t src_cols = vec_detail::Ops<float>::lanes) {
  constexpr int L = vec_detail::Ops<float>::lanes;
  float t[L][L];
  for (int i = 0; i < L; ++i) {
    for (int j = 0; j < L; ++j) {
      t[j][i] = i < src_rows && j < src_cols ? src[i * src_stride + j] : 0.0f;
    }
  }
  for (int j = 0; j < L; ++j) {
    for (int i = 0; i < L; ++i) dst[j * dst_stride + i] = t[j][i];
  }
}

}  // namespace COIL_VEC_ISA
}  // namespace coil

#endif  // !defined(COIL_CPU_AVX512) && !defined(COIL_CPU_AVX2)

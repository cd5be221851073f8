// Pieces of coil_vec.h shared by every ISA: declarations of the vector types, lane-level helpers
// (bit patterns, conversions with C++ semantics) and the portable implementations of
// converting loads/stores, gathers and scatters. Included by coil_vec.h only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "coil_kernel.h"
#include "coil_types.h"

// Everything of the vector headers lives in an inline namespace named after the ISA
// (coil::vec_avx512::Vectorized, written coil::Vectorized as before). One library may link
// kernels of several ISAs (libcoil_vmath: the avx512 and avx2 attention and GEMM instances),
// and an inline function that one translation unit emits out of line is a weak symbol the
// linker merges with another ISA's copy of the same name: the avx2 attention kernel once got
// the avx512 transpose_tile (16 lanes for its 8) and overran its buffers. Distinct names keep
// each ISA's copies apart.
#if defined(COIL_CPU_AVX512)
#define COIL_VEC_ISA vec_avx512
#elif defined(COIL_CPU_AVX2)
#define COIL_VEC_ISA vec_avx2
#elif defined(COIL_CPU_NEON)
#define COIL_VEC_ISA vec_neon
#else
#define COIL_VEC_ISA vec_scalar
#endif

namespace coil {
inline namespace COIL_VEC_ISA {

/// One SIMD register of T, T in {float, double, int32_t, int64_t} (coil_vec_core.h).
template <typename T>
class Vectorized;

/// N registers of T side by side, so that every dtype can have the lanes of a float vector
/// (coil_vec_n.h). Same interface as Vectorized.
template <typename T, int N>
class VectorizedN;

template <typename V>
struct is_vec : std::false_type {};
template <typename T>
struct is_vec<Vectorized<T>> : std::true_type {};
template <typename T, int N>
struct is_vec<VectorizedN<T, N>> : std::true_type {};
template <typename V>
inline constexpr bool is_vec_v = is_vec<V>::value;

/// Alignment of the stack buffers used by lane loops (one AVX-512 register).
inline constexpr int kVecAlign = 64;

namespace vec_detail {

/// Whether an ISA's Ops<T> has a non-temporal `stream(p, reg)` (AVX-512/AVX2 float).
template <typename O, typename = void>
struct has_stream : std::false_type {};
template <typename O>
struct has_stream<O, std::void_t<decltype(O::stream(std::declval<typename O::T*>(),
                                                    std::declval<typename O::reg>()))>>
    : std::true_type {};

/// The unsigned integer with the size of T (bit patterns of lanes).
template <typename T>
using bits_t = std::conditional_t<sizeof(T) == 8, uint64_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;

template <typename T>
inline bits_t<T> to_bits(T x) {
  bits_t<T> b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
template <typename T>
inline T from_bits(bits_t<T> b) {
  T x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

/// A true mask lane: every bit set.
template <typename T>
inline T true_lane() {
  return from_bits<T>(static_cast<bits_t<T>>(~bits_t<T>(0)));
}

/// Mask lanes are read by their top bit (as x86 blendv does); comparisons set every bit.
template <typename T>
inline bool lane_is_true(T x) {
  return (to_bits(x) >> (8 * sizeof(T) - 1)) != 0;
}

template <typename T>
using unsigned_of = std::make_unsigned_t<T>;

/// Integer + - * that wrap modulo 2^bits (as SIMD instructions do), without C++'s UB.
template <typename T>
inline T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<unsigned_of<T>>(a) + static_cast<unsigned_of<T>>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<unsigned_of<T>>(a) - static_cast<unsigned_of<T>>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<unsigned_of<T>>(a) * static_cast<unsigned_of<T>>(b));
}

/// Integer division as generated scalar code would do it, minus the traps: x / 0 gives 0
/// (PyTorch raises there; a kernel cannot) and INT_MIN / -1 wraps to INT_MIN.
template <typename T>
inline T safe_div(T a, T b) {
  if (b == 0) return T(0);
  if (b == T(-1)) return wrap_sub(T(0), a);
  return static_cast<T>(a / b);
}

/// static_cast between lane types, with bool meaning "nonzero" (NaN is true, as in torch).
/// bfloat16/half convert through float (their constructors round to nearest even).
template <typename To, typename From>
inline To lane_cast(From x) {
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<From, half>) {
      return static_cast<float>(x) != 0.0f;
    } else {
      return x != From(0);  // true for NaN
    }
  } else if constexpr (std::is_same_v<To, bfloat16> || std::is_same_v<To, half>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<From, half>) {
    return static_cast<To>(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

inline int64_t clamp_count(int64_t count, int lanes) {
  return count < 0 ? 0 : (count > lanes ? lanes : count);
}

/// A conversion of whole registers between types with the same lane count (cvt instructions),
/// specialized by ISA headers; otherwise convert<>() converts lane by lane.
template <typename To, typename From>
struct FastCvt {
  static constexpr bool available = false;
};

/// Loads of U into a register of T and stores back (n lanes, 0 <= n <= lanes), specialized by
/// ISA headers for the hot pairs; otherwise ConvertIO's lane loop is used.
template <typename T, typename U>
struct FastIO {
  static constexpr bool available = false;
};

/// f applied lane by lane to two registers of the ISA's Ops (for what has no instruction:
/// integer division, integer pow and fmod).
template <typename O, typename F>
inline typename O::reg zip_lanes(const typename O::reg& a, const typename O::reg& b, F f) {
  using T = typename O::value_type;
  alignas(kVecAlign) T x[O::lanes];
  alignas(kVecAlign) T y[O::lanes];
  O::storeu(x, a);
  O::storeu(y, b);
  for (int i = 0; i < O::lanes; ++i) x[i] = f(x[i], y[i]);
  return O::loadu(x);
}

}  // namespace vec_detail

/// Converting loads and stores of a vector of T from/to arrays of another element type U
/// (bfloat16, half, uint8_t, int8_t, bool, or another arithmetic type), one lane at a time.
/// ISA headers specialize the hot pairs (bfloat16 and half with float).
template <typename V, typename U>
struct ConvertIO {
  using T = typename V::value_type;
  static V load(const U* p, int64_t count) {
    alignas(kVecAlign) T buf[V::size()];
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < V::size(); ++i) {
      buf[i] = i < n ? vec_detail::lane_cast<T>(p[i]) : T(0);
    }
    return V::loadu(buf);
  }
  static void store(const V& v, U* p, int64_t count) {
    alignas(kVecAlign) T buf[V::size()];
    v.store(buf);
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < n; ++i) p[i] = vec_detail::lane_cast<U>(buf[i]);
  }
};

/// Members shared by Vectorized and VectorizedN (V is the derived class, T its lane type):
/// converting loadu/store, gather and scatter. Lanes at or past `count` are zero on loads and
/// untouched on stores; memory past `count` elements is never read or written.
template <typename V, typename T>
struct VecMembers {
  /// Loads V::size() elements of U (count elements for a tail) and converts them to T.
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  static V loadu(const U* p, int64_t count = V::size()) {
    return ConvertIO<V, U>::load(p, count);
  }
  /// Converts to U and stores (bool stores 1 for nonzero lanes, including mask lanes).
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  void store(U* p, int64_t count = V::size()) const {
    ConvertIO<V, U>::store(static_cast<const V&>(*this), p, count);
  }

  /// lane i = base[i * stride] for i < count, else 0.
  template <typename U>
  static V gather(const U* base, int64_t stride, int64_t count = V::size()) {
    alignas(kVecAlign) T buf[V::size()];
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < V::size(); ++i) {
      buf[i] = i < n ? vec_detail::lane_cast<T>(base[i * stride]) : T(0);
    }
    return V::loadu(buf);
  }
  /// lane i = base[index[i]] for i < count, else 0. `index` is a vector of int32_t or
  /// int64_t with as many lanes as V.
  template <typename U, typename IV, std::enable_if_t<is_vec_v<IV>, int> = 0>
  static V gather(const U* base, const IV& index, int64_t count = V::size()) {
    static_assert(IV::size() == V::size(), "gather: the index vector needs one lane per lane");
    using I = typename IV::value_type;
    alignas(kVecAlign) I idx[V::size()];
    index.store(idx);
    alignas(kVecAlign) T buf[V::size()];
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < V::size(); ++i) {
      buf[i] = i < n ? vec_detail::lane_cast<T>(base[idx[i]]) : T(0);
    }
    return V::loadu(buf);
  }
  /// base[i * stride] = lane i for i < count, in lane order.
  template <typename U>
  void scatter(U* base, int64_t stride, int64_t count = V::size()) const {
    alignas(kVecAlign) T buf[V::size()];
    static_cast<const V&>(*this).store(buf);
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < n; ++i) base[i * stride] = vec_detail::lane_cast<U>(buf[i]);
  }
  /// base[index[i]] = lane i for i < count, in lane order (the last lane wins on duplicates).
  template <typename U, typename IV, std::enable_if_t<is_vec_v<IV>, int> = 0>
  void scatter(U* base, const IV& index, int64_t count = V::size()) const {
    static_assert(IV::size() == V::size(), "scatter: the index vector needs one lane per lane");
    using I = typename IV::value_type;
    alignas(kVecAlign) I idx[V::size()];
    index.store(idx);
    alignas(kVecAlign) T buf[V::size()];
    static_cast<const V&>(*this).store(buf);
    int64_t n = vec_detail::clamp_count(count, V::size());
    for (int64_t i = 0; i < n; ++i) base[idx[i]] = vec_detail::lane_cast<U>(buf[i]);
  }

  /// Lane i (a store and a load: for tests and scalar fallbacks, not inner loops).
  T operator[](int i) const {
    alignas(kVecAlign) T buf[V::size()];
    static_cast<const V&>(*this).store(buf);
    return buf[i];
  }
};

}  // namespace COIL_VEC_ISA
}  // namespace coil

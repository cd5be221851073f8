// coil::Vectorized<T>: one register of T, written once over the primitives of the selected ISA
// (vec_detail::Ops<T> from coil_vec_avx512.h, coil_vec_avx2.h or coil_vec_generic.h). This is
// where the NaN rules live, so every ISA shares them. Included by coil_vec.h only.
#pragma once

#include "coil_vec_base.h"

// Exactly one of these defines vec_detail::Ops (each is empty unless its macro selects it).
#include "coil_vec_avx2.h"
#include "coil_vec_avx512.h"
#include "coil_vec_generic.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace coil {
inline namespace COIL_VEC_ISA {

/// Orders this thread's non-temporal stores (Vectorized::store_stream) before its later
/// stores. Other threads see them after an OpenMP barrier or fork, whose locked instructions
/// drain the write-combining buffers too.
inline void stream_fence() {
#if defined(__SSE__)
  _mm_sfence();
#endif
}

/// v, hidden from the optimizer (an empty asm that may have changed it): a 2-D tile's row index
/// where rows are a size apart. GCC then computes each row's offsets from it instead of
/// strength-reducing them into a pointer per row and operand, live across the tiles, which
/// GCC 13 spills (a size-generic transpose-add ran 13-21% slower than the specialized one).
inline int64_t opaque_index(int64_t v) {
#if defined(__GNUC__)
  asm("" : "+r"(v));
#endif
  return v;
}

/// Asks for the cache line `elements` elements past p (a row the kernel reads a few rows from
/// now) without waiting for it. The address is computed on integers: for the last rows it lies
/// past the tensor, where a prefetch does nothing but pointer arithmetic would be undefined.
template <typename T>
inline void prefetch_ahead(const T* p, int64_t elements) {
  const uintptr_t at =
      reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(elements) * sizeof(T);
  __builtin_prefetch(reinterpret_cast<const void*>(at), /*rw=*/0, /*locality=*/3);
}

template <typename T>
class Vectorized : public VecMembers<Vectorized<T>, T> {
  using Ops = vec_detail::Ops<T>;
  using Members = VecMembers<Vectorized<T>, T>;
  static constexpr bool kFloat = std::is_floating_point_v<T>;

 public:
  using value_type = T;
  using reg_type = typename Ops::reg;

  /// Lanes per register: 16 floats on AVX-512, 8 on AVX2, 1 without a SIMD ISA.
  static constexpr int size() { return Ops::lanes; }

  /// All lanes zero.
  Vectorized() : v_(Ops::zero()) {}
  /// Broadcast (implicit, as at::vec::Vectorized: `v + 1.0f` works).
  Vectorized(T x) : v_(Ops::set1(x)) {}  // NOLINT(google-explicit-constructor)
  Vectorized(reg_type r) : v_(r) {}      // NOLINT(google-explicit-constructor)
  reg_type reg() const { return v_; }

  // ---- memory -----------------------------------------------------------------------------

  static Vectorized loadu(const T* p) { return Ops::loadu(p); }
  /// The first `count` lanes from p, the rest zero; never reads p[count] or beyond.
  static Vectorized loadu(const T* p, int64_t count) {
    if (count >= size()) return Ops::loadu(p);
    return Ops::loadu_n(p, count < 0 ? 0 : count);
  }
  /// Loads elements of another type U and converts them (bfloat16/half round-trip exactly;
  /// bool/uint8_t/int8_t become 0/1 or their value).
  /// lane i = p[2 * i] for i < count, the rest zero: two loads and a deinterleave, reading
  /// only p[0] .. p[2 * count - 2] (the lane past the last element is masked off, so the row's
  /// end may be the buffer's). A stride-2 pooling window's taps.
  static Vectorized loadu_stride2(const T* p, int64_t count = size()) {
    const int64_t n = 2 * vec_detail::clamp_count(count, size()) - 1;  // elements read
    if (n <= 0) return Vectorized();
    const reg_type lo = n >= size() ? Ops::loadu(p) : Ops::loadu_n(p, n);
    const reg_type hi = n > size() ? Ops::loadu_n(p + size(), n - size()) : Ops::zero();
    return Ops::even_lanes(lo, hi);
  }
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  static Vectorized loadu(const U* p, int64_t count = size()) {
    int64_t n = vec_detail::clamp_count(count, size());
    if constexpr (vec_detail::FastIO<T, U>::available) {
      return vec_detail::FastIO<T, U>::load(p, n);
    } else {
      return ConvertIO<Vectorized, U>::load(p, n);
    }
  }
  void store(T* p) const { Ops::storeu(p, v_); }
  /// A full-vector store that bypasses the caches where the ISA has one (a large output that
  /// nothing reads soon: no read-for-ownership of its lines, ~1.3-1.6x the bandwidth of plain
  /// stores here); a plain store otherwise. Call stream_fence() before other threads read.
  void store_stream(T* p) const {
    if constexpr (vec_detail::has_stream<Ops>::value) {
      Ops::stream(p, v_);
    } else {
      Ops::storeu(p, v_);
    }
  }
  /// store_stream(p) when all lanes are stored, else store(p, count): the stores of a vector
  /// step printed once for whole and partial vectors.
  void store_stream(T* p, int64_t count) const {
    if (count >= size()) {
      store_stream(p);
    } else {
      store(p, count);
    }
  }
  /// Stores the first `count` lanes; never writes p[count] or beyond.
  void store(T* p, int64_t count) const {
    if (count >= size()) {
      Ops::storeu(p, v_);
    } else if (count > 0) {
      Ops::storeu_n(p, v_, count);
    }
  }
  /// Converts to U and stores: bfloat16/half round to nearest even (bit for bit as
  /// coil_types.h), bool stores 1 for nonzero lanes (and for true mask lanes).
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  void store(U* p, int64_t count = size()) const {
    int64_t n = vec_detail::clamp_count(count, size());
    if constexpr (vec_detail::FastIO<T, U>::available) {
      vec_detail::FastIO<T, U>::store(p, v_, n);
    } else {
      ConvertIO<Vectorized, U>::store(*this, p, n);
    }
  }
  using Members::gather;
  using Members::scatter;

  // ---- construction -----------------------------------------------------------------------

  /// lane i = base + i * step.
  static Vectorized arange(T base = T(0), T step = T(1)) {
    return Vectorized(base) + Vectorized(Ops::iota()) * Vectorized(step);
  }
  /// The mask of lanes i < count.
  static Vectorized tail_mask(int64_t count) {
    return Ops::from_mask(Ops::first_n(vec_detail::clamp_count(count, size())));
  }
  /// mask ? b : a per lane (a mask lane is true when its top bit is set).
  static Vectorized blendv(const Vectorized& a, const Vectorized& b, const Vectorized& mask) {
    return Ops::blend(Ops::to_mask(mask.v_), a.v_, b.v_);
  }
  /// c ? a : b in every lane (a condition the same for all lanes), without a branch: g++
  /// may turn a branch between vectors into masked loads of the operands (coil_kernel.h,
  /// select).
  static Vectorized select(bool c, const Vectorized& a, const Vectorized& b) {
    return Ops::blend(Ops::first_n(c ? size() : 0), b.v_, a.v_);
  }
  /// Lanes i < count from b, the others from a. A whole count returns b without a blend, so a
  /// vector step printed once for whole and partial vectors (cpp_vec_kernel.cpp) costs nothing
  /// in its whole calls, where count is the constant lane count.
  static Vectorized set(const Vectorized& a, const Vectorized& b, int64_t count) {
    if (count >= size()) return b;
    return Ops::blend(Ops::first_n(vec_detail::clamp_count(count, size())), a.v_, b.v_);
  }

  // ---- arithmetic; integers wrap, integer x / 0 is 0 ----------------------------------------

  friend Vectorized operator+(const Vectorized& a, const Vectorized& b) {
    return Ops::add(a.v_, b.v_);
  }
  friend Vectorized operator-(const Vectorized& a, const Vectorized& b) {
    return Ops::sub(a.v_, b.v_);
  }
  friend Vectorized operator*(const Vectorized& a, const Vectorized& b) {
    return Ops::mul(a.v_, b.v_);
  }
  friend Vectorized operator/(const Vectorized& a, const Vectorized& b) {
    if constexpr (kFloat) {
      return Ops::div(a.v_, b.v_);
    } else {
      return vec_detail::zip_lanes<Ops>(a.v_, b.v_, vec_detail::safe_div<T>);
    }
  }
  friend Vectorized operator-(const Vectorized& a) { return Ops::neg(a.v_); }
  // Bitwise, on the lanes' bits: mostly for masks.
  friend Vectorized operator&(const Vectorized& a, const Vectorized& b) {
    return Ops::bit_and(a.v_, b.v_);
  }
  friend Vectorized operator|(const Vectorized& a, const Vectorized& b) {
    return Ops::bit_or(a.v_, b.v_);
  }
  friend Vectorized operator^(const Vectorized& a, const Vectorized& b) {
    return Ops::bit_xor(a.v_, b.v_);
  }
  friend Vectorized operator~(const Vectorized& a) {
    return Ops::bit_xor(a.v_, Ops::set1(vec_detail::true_lane<T>()));
  }

  // ---- comparisons: masks (all bits set where true); != is true for NaN ---------------------

  friend Vectorized operator==(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::eq(a.v_, b.v_));
  }
  friend Vectorized operator!=(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::ne(a.v_, b.v_));
  }
  friend Vectorized operator<(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::lt(a.v_, b.v_));
  }
  friend Vectorized operator<=(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::le(a.v_, b.v_));
  }
  friend Vectorized operator>(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::gt(a.v_, b.v_));
  }
  friend Vectorized operator>=(const Vectorized& a, const Vectorized& b) {
    return Ops::from_mask(Ops::ge(a.v_, b.v_));
  }

  // ---- unary math (the names of the loop ops) -----------------------------------------------

  Vectorized abs() const { return Ops::abs(v_); }
  Vectorized neg() const { return Ops::neg(v_); }
  /// Mask of NaN lanes (all false for integers).
  Vectorized isnan() const {
    if constexpr (kFloat) {
      return Ops::from_mask(Ops::isnan(v_));
    } else {
      return Vectorized();
    }
  }
  // Rounding: integers are already whole.
  Vectorized floor() const {
    if constexpr (kFloat) {
      return Ops::floor(v_);
    } else {
      return *this;
    }
  }
  Vectorized ceil() const {
    if constexpr (kFloat) {
      return Ops::ceil(v_);
    } else {
      return *this;
    }
  }
  /// Half to even, as torch.round and std::nearbyint.
  Vectorized round() const {
    if constexpr (kFloat) {
      return Ops::round(v_);
    } else {
      return *this;
    }
  }
  /// Each lane rounded to the nearest bfloat16 / half and widened back: what a store to and a
  /// load from such a buffer give (the IR's round_to_bf16 / round_to_f16).
  Vectorized round_to_bf16() const { return rounded_to<bfloat16>(); }
  Vectorized round_to_f16() const { return rounded_to<half>(); }
  template <typename U>
  Vectorized rounded_to() const {
    alignas(kVecAlign) U buf[size()];
    this->store(buf);
    return loadu(buf);
  }
  Vectorized trunc() const {
    if constexpr (kFloat) {
      return Ops::trunc(v_);
    } else {
      return *this;
    }
  }
  /// maximum(0, x): NaN and -0 stay (as coil::relu).
  Vectorized relu() const { return Vectorized().maximum(*this); }
  /// -1, 0 or 1; NaN stays NaN; ±0 gives +0 (as coil::sign).
  Vectorized sign() const {
    reg_type one = Ops::set1(T(1));
    reg_type pos = Ops::blend(Ops::gt(v_, Ops::zero()), Ops::zero(), one);
    reg_type neg = Ops::blend(Ops::lt(v_, Ops::zero()), Ops::zero(), one);
    reg_type r = Ops::sub(pos, neg);
    if constexpr (kFloat) r = Ops::blend(Ops::isnan(v_), r, v_);
    return r;
  }
  // Float-only math (a compile error for integer lanes).
  Vectorized sqrt() const { return float_op(Ops::sqrt(v_)); }
  /// 1 / sqrt(x), correctly rounded twice (no rsqrt approximation).
  Vectorized rsqrt() const { return Vectorized(T(1)) / sqrt(); }
  Vectorized reciprocal() const { return Vectorized(T(1)) / *this; }
  Vectorized exp() const { return float_op(Ops::exp(v_)); }
  Vectorized expm1() const { return float_op(Ops::expm1(v_)); }
  Vectorized log() const { return float_op(Ops::log(v_)); }
  Vectorized log1p() const { return float_op(Ops::log1p(v_)); }
  Vectorized tanh() const { return float_op(Ops::tanh(v_)); }
  Vectorized erf() const { return float_op(Ops::erf(v_)); }
  Vectorized sin() const { return float_op(Ops::sin(v_)); }
  Vectorized cos() const { return float_op(Ops::cos(v_)); }
  /// 1 / (1 + exp(-x)), as coil::sigmoid.
  Vectorized sigmoid() const {
    Vectorized one(T(1));
    return one / (one + float_op(Ops::exp(Ops::neg(v_))));
  }

  // ---- binary math ------------------------------------------------------------------------

  /// NaN-propagating max with coil::maximum's rule: a NaN a wins, then a NaN b, then
  /// a > b ? a : b.
  Vectorized maximum(const Vectorized& b) const {
    reg_type r = Ops::max(v_, b.v_);  // a > b ? a : b, so b when either is NaN
    if constexpr (kFloat) r = Ops::blend(Ops::isnan(v_), r, v_);
    return r;
  }
  Vectorized minimum(const Vectorized& b) const {
    reg_type r = Ops::min(v_, b.v_);  // a < b ? a : b, b when either is NaN
    if constexpr (kFloat) r = Ops::blend(Ops::isnan(v_), r, v_);
    return r;
  }
  /// std::pow for floats, coil::ipow for integers.
  Vectorized pow(const Vectorized& b) const {
    if constexpr (kFloat) {
      return Ops::pow(v_, b.v_);
    } else {
      return vec_detail::zip_lanes<Ops>(v_, b.v_, [](T x, T y) { return ::coil::ipow<T>(x, y); });
    }
  }
  /// std::fmod for floats; C's % for integers, with x % 0 = 0 and x % -1 = 0 (no trap).
  Vectorized fmod(const Vectorized& b) const {
    if constexpr (kFloat) {
      return Ops::fmod(v_, b.v_);
    } else {
      return vec_detail::zip_lanes<Ops>(
          v_, b.v_, [](T x, T y) { return (y == 0 || y == T(-1)) ? T(0) : static_cast<T>(x % y); });
    }
  }

  // ---- horizontal reductions: lane i meets lane i + size()/2, then recursively --------------

  T reduce_add() const {
    return reduce_tree([](T a, T b) {
      if constexpr (kFloat) {
        return a + b;
      } else {
        return vec_detail::wrap_add(a, b);
      }
    });
  }
  T reduce_mul() const {
    return reduce_tree([](T a, T b) {
      if constexpr (kFloat) {
        return a * b;
      } else {
        return vec_detail::wrap_mul(a, b);
      }
    });
  }
  /// NaN if any lane is NaN.
  T reduce_max() const { return reduce_tree(::coil::maximum<T>); }
  T reduce_min() const { return reduce_tree(::coil::minimum<T>); }

 private:
  // Keeps integer lanes from reaching a float-only primitive with a readable message.
  static Vectorized float_op(reg_type r) {
    static_assert(kFloat, "this op needs float or double lanes");
    return r;
  }
  template <typename F>
  T reduce_tree(F op) const {
    alignas(kVecAlign) T buf[size()];
    Ops::storeu(buf, v_);
    for (int width = size() / 2; width >= 1; width /= 2) {
      for (int i = 0; i < width; ++i) buf[i] = op(buf[i], buf[i + width]);
    }
    return buf[0];
  }

  reg_type v_;
};

/// How many of the n elements from p come before the first address where a whole vector is
/// aligned for store_stream's non-temporal store (64 bytes on AVX-512): a loop peels these with
/// a masked store so that its whole vectors all stream (rows of 1000 floats start at every
/// other 32 bytes, and a misaligned vector falls back to a plain store that reads the line).
template <typename T>
int64_t stream_head(const T* p, int64_t n) {
  constexpr uintptr_t kBytes = sizeof(T) * Vectorized<T>::size();
  const uintptr_t misaligned = reinterpret_cast<uintptr_t>(p) % kBytes;
  const int64_t head =
      misaligned == 0 ? 0 : static_cast<int64_t>((kBytes - misaligned) / sizeof(T));
  return head < n ? head : n;
}

/// transpose_tile of a bfloat16 or half source (the ISA headers' takes f32): each source row is
/// widened to f32 with Vectorized's converting load, then the f32 tile is transposed.
template <typename U, std::enable_if_t<!std::is_same_v<U, float>, int> = 0>
inline void transpose_tile(const U* src, int64_t src_stride, float* dst, int64_t dst_stride,
                           int64_t src_rows, int64_t src_cols) {
  constexpr int64_t kLanes = Vectorized<float>::size();
  alignas(kVecAlign) float wide[kLanes * kLanes];
  for (int64_t i = 0; i < kLanes; ++i) {
    Vectorized<float> row = i < src_rows ? Vectorized<float>::loadu(src + i * src_stride, src_cols)
                                         : Vectorized<float>();
    row.store(wide + i * kLanes);
  }
  transpose_tile(wide, kLanes, dst, dst_stride, kLanes, kLanes);
}

}  // namespace COIL_VEC_ISA
}  // namespace coil

// coil::VectorizedN<T, N> (N registers of T, so that a 64-bit dtype can have as many lanes as a
// float vector), the lane-count aliases Vec<T> / VecLanes<T, L>, conversions between lane types
// and the free functions generated code calls. Included by coil_vec.h only.
#pragma once

#include "coil_vec_core.h"

namespace coil {
inline namespace COIL_VEC_ISA {

// One list of the vector ops that exist as members and as free functions (coil::exp(v) is
// v.exp()). Unary ops return a vector, binary ops take a second vector, reductions a scalar.
// clang-format off
#define COIL_VEC_UNARY_OPS(X) \
  X(abs)                      \
  X(neg)                      \
  X(isnan)                    \
  X(floor)                    \
  X(ceil)                     \
  X(round)                    \
  X(trunc)                    \
  X(relu)                     \
  X(sign)                     \
  X(sqrt)                     \
  X(rsqrt)                    \
  X(reciprocal)               \
  X(exp)                      \
  X(expm1)                    \
  X(log)                      \
  X(log1p)                    \
  X(tanh)                     \
  X(erf)                      \
  X(sin)                      \
  X(cos)                      \
  X(sigmoid)
// clang-format on
#define COIL_VEC_BINARY_OPS(X) X(maximum) X(minimum) X(pow) X(fmod)
#define COIL_VEC_REDUCE_OPS(X) X(reduce_add) X(reduce_mul) X(reduce_max) X(reduce_min)

template <typename T, int N>
class VectorizedN : public VecMembers<VectorizedN<T, N>, T> {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "VectorizedN needs a power-of-two count");
  using Part = Vectorized<T>;
  using Members = VecMembers<VectorizedN<T, N>, T>;
  static constexpr int kPart = Part::size();

 public:
  using value_type = T;
  static constexpr int size() { return N * kPart; }
  static constexpr int parts() { return N; }

  VectorizedN() = default;
  VectorizedN(T x) {  // NOLINT(google-explicit-constructor): broadcast
    for (Part& p : v_) p = Part(x);
  }
  /// Register i (lanes i * Vectorized<T>::size() ...).
  const Part& part(int i) const { return v_[i]; }
  Part& part(int i) { return v_[i]; }

  static VectorizedN loadu(const T* p, int64_t count = size()) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = Part::loadu(p + i * kPart, count - i * kPart);
    return r;
  }
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  static VectorizedN loadu(const U* p, int64_t count = size()) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = Part::loadu(p + i * kPart, count - i * kPart);
    return r;
  }
  void store(T* p, int64_t count = size()) const {
    for (int i = 0; i < N; ++i) v_[i].store(p + i * kPart, count - i * kPart);
  }
  template <typename U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0>
  void store(U* p, int64_t count = size()) const {
    for (int i = 0; i < N; ++i) {
      if (count - i * kPart > 0) v_[i].store(p + i * kPart, count - i * kPart);
    }
  }
  using Members::gather;
  using Members::scatter;

  static VectorizedN arange(T base = T(0), T step = T(1)) {
    VectorizedN r;
    // lane k = base + k * step, exactly as Vectorized::arange computes it.
    for (int i = 0; i < N; ++i) {
      r.v_[i] = Part(base) + Part::arange(static_cast<T>(i * kPart), T(1)) * Part(step);
    }
    return r;
  }
  static VectorizedN tail_mask(int64_t count) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = Part::tail_mask(count - i * kPart);
    return r;
  }
  static VectorizedN blendv(const VectorizedN& a, const VectorizedN& b, const VectorizedN& m) {
    return zip3(a, b, m,
                [](const Part& x, const Part& y, const Part& z) { return Part::blendv(x, y, z); });
  }
  static VectorizedN set(const VectorizedN& a, const VectorizedN& b, int64_t count) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = Part::set(a.v_[i], b.v_[i], count - i * kPart);
    return r;
  }

#define COIL_VECN_BINARY_OPERATOR(op)                                          \
  friend VectorizedN operator op(const VectorizedN& a, const VectorizedN& b) { \
    VectorizedN r;                                                             \
    for (int i = 0; i < N; ++i) r.v_[i] = a.v_[i] op b.v_[i];                  \
    return r;                                                                  \
  }
  COIL_VECN_BINARY_OPERATOR(+)
  COIL_VECN_BINARY_OPERATOR(-)
  COIL_VECN_BINARY_OPERATOR(*)
  COIL_VECN_BINARY_OPERATOR(/)
  COIL_VECN_BINARY_OPERATOR(&)
  COIL_VECN_BINARY_OPERATOR(|)
  COIL_VECN_BINARY_OPERATOR(^)
  COIL_VECN_BINARY_OPERATOR(==)
  COIL_VECN_BINARY_OPERATOR(!=)
  COIL_VECN_BINARY_OPERATOR(<)
  COIL_VECN_BINARY_OPERATOR(<=)
  COIL_VECN_BINARY_OPERATOR(>)
  COIL_VECN_BINARY_OPERATOR(>=)
#undef COIL_VECN_BINARY_OPERATOR
  friend VectorizedN operator-(const VectorizedN& a) {
    return a.neg();
  }
  friend VectorizedN operator~(const VectorizedN& a) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = ~a.v_[i];
    return r;
  }

#define COIL_VECN_UNARY(name)                           \
  VectorizedN name() const {                            \
    VectorizedN r;                                      \
    for (int i = 0; i < N; ++i) r.v_[i] = v_[i].name(); \
    return r;                                           \
  }
  COIL_VEC_UNARY_OPS(COIL_VECN_UNARY)
#undef COIL_VECN_UNARY
#define COIL_VECN_BINARY(name)                                 \
  VectorizedN name(const VectorizedN& b) const {               \
    VectorizedN r;                                             \
    for (int i = 0; i < N; ++i) r.v_[i] = v_[i].name(b.v_[i]); \
    return r;                                                  \
  }
  COIL_VEC_BINARY_OPS(COIL_VECN_BINARY)
#undef COIL_VECN_BINARY

  // Horizontal reductions in the same order as Vectorized's: lane i meets lane i + size()/2.
  T reduce_add() const {
    return fold_parts([](const Part& a, const Part& b) { return a + b; }).reduce_add();
  }
  T reduce_mul() const {
    return fold_parts([](const Part& a, const Part& b) { return a * b; }).reduce_mul();
  }
  T reduce_max() const {
    return fold_parts([](const Part& a, const Part& b) { return a.maximum(b); }).reduce_max();
  }
  T reduce_min() const {
    return fold_parts([](const Part& a, const Part& b) { return a.minimum(b); }).reduce_min();
  }

 private:
  template <typename F>
  static VectorizedN zip3(const VectorizedN& a, const VectorizedN& b, const VectorizedN& c, F f) {
    VectorizedN r;
    for (int i = 0; i < N; ++i) r.v_[i] = f(a.v_[i], b.v_[i], c.v_[i]);
    return r;
  }
  template <typename F>
  Part fold_parts(F f) const {
    Part buf[N];
    for (int i = 0; i < N; ++i) buf[i] = v_[i];
    for (int width = N / 2; width >= 1; width /= 2) {
      for (int i = 0; i < width; ++i) buf[i] = f(buf[i], buf[i + width]);
    }
    return buf[0];
  }

  Part v_[N];
};

/// The vector type with L lanes of T: Vectorized<T> when one register has L lanes, else
/// VectorizedN<T, L / Vectorized<T>::size()>.
template <typename T, int L>
using VecLanes = std::conditional_t<L == Vectorized<T>::size(), Vectorized<T>,
                                    VectorizedN<T, L / Vectorized<T>::size()>>;

/// Lanes of a float register: the tiling factor of vectorized loops (16 on AVX-512, 8 on AVX2,
/// 1 without SIMD). Vec<T> has this many lanes for every T, so one loop step handles the same
/// elements in every dtype (Vec<double> and Vec<int64_t> are two registers on AVX-512/AVX2).
inline constexpr int kFloatLanes = Vectorized<float>::size();
template <typename T>
using Vec = VecLanes<T, kFloatLanes>;

/// Converts the n elements of a bf16/f16 array to f32 (exactly). A kernel whose rows all read
/// one small 16-bit operand (a bias or a scale) widens it once per call into a stack array and
/// loads floats from that, instead of converting the same elements again in every row.
template <typename U>
inline void widen(const U* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kFloatLanes <= n; i += kFloatLanes) Vec<float>::loadu(src + i).store(dst + i);
  if (i < n) Vec<float>::loadu(src + i, n - i).store(dst + i, n - i);
}

// ---- free functions -----------------------------------------------------------------------

#define COIL_VEC_FREE_UNARY(name)                             \
  template <typename T>                                       \
  inline Vectorized<T> name(const Vectorized<T>& x) {         \
    return x.name();                                          \
  }                                                           \
  template <typename T, int N>                                \
  inline VectorizedN<T, N> name(const VectorizedN<T, N>& x) { \
    return x.name();                                          \
  }
COIL_VEC_UNARY_OPS(COIL_VEC_FREE_UNARY)
#undef COIL_VEC_FREE_UNARY

#define COIL_VEC_FREE_BINARY(name)                                                        \
  template <typename T>                                                                   \
  inline Vectorized<T> name(const Vectorized<T>& a, const Vectorized<T>& b) {             \
    return a.name(b);                                                                     \
  }                                                                                       \
  template <typename T, int N>                                                            \
  inline VectorizedN<T, N> name(const VectorizedN<T, N>& a, const VectorizedN<T, N>& b) { \
    return a.name(b);                                                                     \
  }
COIL_VEC_BINARY_OPS(COIL_VEC_FREE_BINARY)
#undef COIL_VEC_FREE_BINARY

#define COIL_VEC_FREE_REDUCE(name)            \
  template <typename T>                       \
  inline T name(const Vectorized<T>& x) {     \
    return x.name();                          \
  }                                           \
  template <typename T, int N>                \
  inline T name(const VectorizedN<T, N>& x) { \
    return x.name();                          \
  }
COIL_VEC_REDUCE_OPS(COIL_VEC_FREE_REDUCE)
#undef COIL_VEC_FREE_REDUCE

/// The mask of NaN lanes (the vector form of coil_kernel.h's scalar coil::isnan_).
template <typename T>
inline Vectorized<T> isnan_(const Vectorized<T>& x) {
  return x.isnan();
}
template <typename T, int N>
inline VectorizedN<T, N> isnan_(const VectorizedN<T, N>& x) {
  return x.isnan();
}

/// Reinterprets the lanes' bits as another type of the same size (float <-> int32_t,
/// double <-> int64_t): for masks.
template <typename To, typename V, std::enable_if_t<is_vec_v<V>, int> = 0>
inline VecLanes<To, V::size()> bit_cast(const V& v) {
  using From = typename V::value_type;
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs lanes of the same size");
  alignas(kVecAlign) From in[V::size()];
  alignas(kVecAlign) To out[V::size()];
  v.store(in);
  std::memcpy(out, in, sizeof in);
  return VecLanes<To, V::size()>::loadu(out);
}

/// Converts each lane with static_cast (float -> integer truncates), keeping the lane count:
/// convert<double>(Vec<float>) is a Vec<double>.
template <typename To, typename V, std::enable_if_t<is_vec_v<V>, int> = 0>
inline VecLanes<To, V::size()> convert(const V& v) {
  using From = typename V::value_type;
  using R = VecLanes<To, V::size()>;
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<V, Vectorized<From>> && std::is_same_v<R, Vectorized<To>> &&
                       vec_detail::FastCvt<To, From>::available) {
    return R(vec_detail::FastCvt<To, From>::convert(v.reg()));
  } else {
    alignas(kVecAlign) From in[V::size()];
    alignas(kVecAlign) To out[V::size()];
    v.store(in);
    for (int i = 0; i < V::size(); ++i) out[i] = static_cast<To>(in[i]);
    return R::loadu(out);
  }
}

/// A mask with the same lanes in another type (e.g. a float comparison selecting int64 lanes).
template <typename To, typename V, std::enable_if_t<is_vec_v<V>, int> = 0>
inline VecLanes<To, V::size()> mask_cast(const V& m) {
  using From = typename V::value_type;
  if constexpr (sizeof(To) == sizeof(From)) {
    return bit_cast<To>(m);
  } else {
    alignas(kVecAlign) From in[V::size()];
    alignas(kVecAlign) To out[V::size()];
    m.store(in);
    for (int i = 0; i < V::size(); ++i) {
      out[i] = vec_detail::lane_is_true(in[i]) ? vec_detail::true_lane<To>() : To(0);
    }
    return VecLanes<To, V::size()>::loadu(out);
  }
}

/// cond ? a : b per lane; `cond` is a mask of any lane type with the same lane count.
template <typename M, typename V, std::enable_if_t<is_vec_v<M> && is_vec_v<V>, int> = 0>
inline V where(const M& cond, const V& a, const V& b) {
  static_assert(M::size() == V::size(), "where: mask and values need the same lanes");
  if constexpr (std::is_same_v<M, V>) {
    return V::blendv(b, a, cond);
  } else {
    return V::blendv(b, a, mask_cast<typename V::value_type>(cond));
  }
}
/// mask ? b : a per lane (at::vec's argument order).
template <typename V, std::enable_if_t<is_vec_v<V>, int> = 0>
inline V blendv(const V& a, const V& b, const V& mask) {
  return V::blendv(a, b, mask);
}

/// A mask from an array of bool (true lanes where p[i] != 0), count lanes at most.
template <typename V>
inline V load_mask(const bool* p, int64_t count = V::size()) {
  return V::loadu(p, count) != V(typename V::value_type(0));
}

}  // namespace COIL_VEC_ISA
}  // namespace coil

// Vector reductions for generated code: masked tail combines, Welford (mean/variance), argmax
// and argmin with eager PyTorch's rules, and a cascade sum for long reductions. Every helper is
// deterministic: the order of floating-point operations depends only on the inputs and the ISA.
// Included by coil_vec.h only.
#pragma once

#include "coil_vec_n.h"

namespace coil {
inline namespace COIL_VEC_ISA {

// ---- tails: combine only lanes i < count ---------------------------------------------------

template <typename V>
inline V sum_masked_reduce(const V& acc, const V& x, int64_t count) {
  return V::set(acc, acc + x, count);
}
template <typename V>
inline V prod_masked_reduce(const V& acc, const V& x, int64_t count) {
  return V::set(acc, acc * x, count);
}
template <typename V>
inline V max_masked_reduce(const V& acc, const V& x, int64_t count) {
  return V::set(acc, acc.maximum(x), count);
}
template <typename V>
inline V min_masked_reduce(const V& acc, const V& x, int64_t count) {
  return V::set(acc, acc.minimum(x), count);
}

// ---- Welford ------------------------------------------------------------------------------

/// Running mean, sum of squared deviations (m2) and count (weight, in T like Inductor's
/// Welford) of a sequence; variance = m2 / weight (biased) or m2 / (weight - 1). T is a float
/// type or a vector of one; a vector keeps one independent state per lane.
template <typename T>
struct Welford {
  T mean = T(0);
  T m2 = T(0);
  T weight = T(0);
};

/// Adds one value (per lane for vectors).
template <typename T>
inline void welford_combine(Welford<T>& acc, const T& x) {
  T new_weight = acc.weight + T(1);
  T delta = x - acc.mean;
  T new_mean = acc.mean + delta / new_weight;
  acc.m2 = acc.m2 + delta * (x - new_mean);
  acc.mean = new_mean;
  acc.weight = new_weight;
}
/// Adds x in lanes i < count only (the tail of a masked loop).
template <typename V, std::enable_if_t<is_vec_v<V>, int> = 0>
inline void welford_combine(Welford<V>& acc, const V& x, int64_t count) {
  Welford<V> next = acc;
  welford_combine(next, x);
  acc.mean = V::set(acc.mean, next.mean, count);
  acc.m2 = V::set(acc.m2, next.m2, count);
  acc.weight = V::set(acc.weight, next.weight, count);
}

/// Merges b into a (Chan et al.); an empty side leaves the other unchanged.
template <typename T>
inline void welford_combine(Welford<T>& a, const Welford<T>& b) {
  T new_weight = a.weight + b.weight;
  T wb_over_w;
  if constexpr (is_vec_v<T>) {
    // Lanes where both sides are empty would divide 0 by 0.
    wb_over_w = T::blendv(b.weight / new_weight, T(0), new_weight == T(0));
  } else {
    if (b.weight == T(0)) return;
    if (a.weight == T(0)) {
      a = b;
      return;
    }
    wb_over_w = b.weight / new_weight;
  }
  T delta = b.mean - a.mean;
  a.mean = a.mean + delta * wb_over_w;
  a.m2 = a.m2 + b.m2 + delta * delta * a.weight * wb_over_w;
  a.weight = new_weight;
}

/// The lanes of a vector Welford merged into one (lane i with lane i + size/2, recursively).
template <typename V>
inline Welford<typename V::value_type> welford_reduce_all(const Welford<V>& acc) {
  using T = typename V::value_type;
  alignas(kVecAlign) T mean[V::size()];
  alignas(kVecAlign) T m2[V::size()];
  alignas(kVecAlign) T weight[V::size()];
  acc.mean.store(mean);
  acc.m2.store(m2);
  acc.weight.store(weight);
  Welford<T> lanes[V::size()];
  for (int i = 0; i < V::size(); ++i) lanes[i] = Welford<T>{mean[i], m2[i], weight[i]};
  for (int width = V::size() / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) welford_combine(lanes[i], lanes[i + width]);
  }
  return lanes[0];
}

// ---- argmax / argmin ----------------------------------------------------------------------

/// Per-lane best value and its index (-1 while a lane has seen nothing). Within a lane indices
/// arrive in increasing order, so a tie never replaces; NaN beats everything and the first
/// NaN stays. argmax_reduce_all then applies coil::argmax_combine's rules across lanes.
template <typename V>
struct IndexValueVec {
  using T = typename V::value_type;
  using IndexV = VecLanes<int64_t, V::size()>;
  V value;
  IndexV index{int64_t{-1}};
};

namespace vec_detail {
template <bool kMax, typename V>
inline void arg_combine_vec(IndexValueVec<V>& acc, const V& v,
                            const typename IndexValueVec<V>::IndexV& index, int64_t count) {
  using T = typename V::value_type;
  using IndexV = typename IndexValueVec<V>::IndexV;
  V empty = mask_cast<T>(acc.index < IndexV(int64_t{0}));
  V wins = kMax ? (v > acc.value) : (v < acc.value);
  V take = empty | (~acc.value.isnan() & (v.isnan() | wins));
  if (count < V::size()) take = take & V::tail_mask(count);
  acc.value = V::blendv(acc.value, v, take);
  acc.index = IndexV::blendv(acc.index, index, mask_cast<int64_t>(take));
}
template <bool kMax, typename V>
inline IndexValue<typename V::value_type> arg_reduce_all(const IndexValueVec<V>& acc) {
  using T = typename V::value_type;
  alignas(kVecAlign) T value[V::size()];
  alignas(kVecAlign) int64_t index[V::size()];
  acc.value.store(value);
  acc.index.store(index);
  IndexValue<T> best{T(0), -1};
  for (int i = 0; i < V::size(); ++i) {
    IndexValue<T> lane{value[i], index[i]};
    if constexpr (kMax) {
      argmax_combine(best, lane);
    } else {
      argmin_combine(best, lane);
    }
  }
  return best;
}
}  // namespace vec_detail

/// Lane i sees value v[i] at index index[i] (lanes i >= count are ignored).
template <typename V>
inline void argmax_combine_vec(IndexValueVec<V>& acc, const V& v,
                               const typename IndexValueVec<V>::IndexV& index,
                               int64_t count = V::size()) {
  vec_detail::arg_combine_vec<true>(acc, v, index, count);
}
template <typename V>
inline void argmin_combine_vec(IndexValueVec<V>& acc, const V& v,
                               const typename IndexValueVec<V>::IndexV& index,
                               int64_t count = V::size()) {
  vec_detail::arg_combine_vec<false>(acc, v, index, count);
}
/// Contiguous indices: lane i is at index_begin + i.
template <typename V>
inline void argmax_combine_vec(IndexValueVec<V>& acc, const V& v, int64_t index_begin,
                               int64_t count = V::size()) {
  using IndexV = typename IndexValueVec<V>::IndexV;
  vec_detail::arg_combine_vec<true>(acc, v, IndexV::arange(index_begin, 1), count);
}
template <typename V>
inline void argmin_combine_vec(IndexValueVec<V>& acc, const V& v, int64_t index_begin,
                               int64_t count = V::size()) {
  using IndexV = typename IndexValueVec<V>::IndexV;
  vec_detail::arg_combine_vec<false>(acc, v, IndexV::arange(index_begin, 1), count);
}
/// The winner over all lanes: the first index of the max (a NaN counts as the max).
template <typename V>
inline IndexValue<typename V::value_type> argmax_reduce_all(const IndexValueVec<V>& acc) {
  return vec_detail::arg_reduce_all<true>(acc);
}
template <typename V>
inline IndexValue<typename V::value_type> argmin_reduce_all(const IndexValueVec<V>& acc) {
  return vec_detail::arg_reduce_all<false>(acc);
}

// ---- cascade summation --------------------------------------------------------------------

/// A sum whose rounding error grows with log(n) rather than n: values are added into a chunk
/// accumulator; every kChunk additions it is added into the next level, like a counter in base
/// kChunk. The order is fixed, so results are deterministic. V is a float type or a vector.
///   CascadeSum<Vectorized<float>> s; for (...) s.add(Vectorized<float>::loadu(p + i));
///   float total = s.result().reduce_add();
template <typename V, int64_t kChunk = 1024, int kLevels = 4>
class CascadeSum {
 public:
  void add(const V& x) {
    acc_[0] = acc_[0] + x;
    if (++count_[0] == kChunk) carry();
  }
  /// The sum so far, from the lowest level up.
  V result() const {
    V r = acc_[0];
    for (int l = 1; l < kLevels; ++l) r = acc_[l] + r;
    return r;
  }

 private:
  void carry() {
    for (int l = 0; l + 1 < kLevels; ++l) {
      acc_[l + 1] = acc_[l + 1] + acc_[l];
      acc_[l] = V(0);
      count_[l] = 0;
      if (++count_[l + 1] < kChunk) return;
    }
  }

  V acc_[kLevels]{};
  int64_t count_[kLevels]{};
};

}  // namespace COIL_VEC_ISA
}  // namespace coil

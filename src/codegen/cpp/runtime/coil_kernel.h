// The header every generated CPU kernel includes (Inductor's cpp_prefix.h). Real code: it is
// compiled by tests/unit/kernel_header_test.cpp, and its text is embedded into libcoil so the
// code cache can write it next to generated sources. Self-contained: only the standard
// library and coil_types.h.
//
// Numerics follow PyTorch eager: max/min propagate NaN, argmax/argmin pick the first index on
// ties and treat NaN as the extreme value, round() is half-to-even.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "coil_types.h"

namespace coil {

// ---- scalar math -------------------------------------------------------------------------

template <typename T>
inline T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a > b ? a : b;
}

template <typename T>
inline T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? a : b;
}

template <typename T>
inline T relu(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x) ? x : (x > T(0) ? x : T(0));
  } else {
    return x > T(0) ? x : T(0);
  }
}

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
inline T sign(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return x;
  }
  return static_cast<T>((T(0) < x) - (x < T(0)));
}

template <typename T>
inline bool isnan_(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else {
    return false;
  }
}

/// Integer power by squaring (exponent >= 0; negative exponents give 0 except for |base| = 1).
template <typename T>
inline T ipow(T base, T exp) {
  if (exp < 0) {
    if (base == T(1)) return T(1);
    if (base == T(-1)) return (exp % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = static_cast<T>(result * base);
    exp >>= 1;
    base = static_cast<T>(base * base);
  }
  return result;
}

/// Integer fmod (C's truncating %). A zero divisor gives 0 instead of trapping (SIGFPE):
/// PyTorch raises an error there; generated code cannot, so docs/numerics.md lists this.
template <typename T>
inline T int_fmod(T a, T b) {
  return b == 0 ? T(0) : static_cast<T>(a % b);
}

/// Python-style floor division and modulo for index arithmetic that may be negative.
inline int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t floormod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// ---- reductions --------------------------------------------------------------------------

template <typename T>
inline T lowest() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                              : std::numeric_limits<T>::lowest();
}
template <typename T>
inline T highest() {
  return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                              : std::numeric_limits<T>::max();
}

/// Running arg-reduction state: best value and its index (-1 until the first element).
template <typename T>
struct IndexValue {
  T value;
  int64_t index;
};

/// True when candidate (v, i) should replace best (b, j) for argmax: NaN beats everything
/// (the first NaN wins), a larger value wins, and on ties the lower index wins.
template <typename T>
inline bool argmax_better(T v, int64_t i, T b, int64_t j) {
  if (j < 0) return true;
  if (isnan_(b)) return isnan_(v) && i < j;
  if (isnan_(v)) return true;
  return v > b || (v == b && i < j);
}
template <typename T>
inline bool argmin_better(T v, int64_t i, T b, int64_t j) {
  if (j < 0) return true;
  if (isnan_(b)) return isnan_(v) && i < j;
  if (isnan_(v)) return true;
  return v < b || (v == b && i < j);
}

template <typename T>
inline void argmax_combine(IndexValue<T>& acc, T v, int64_t i) {
  if (argmax_better(v, i, acc.value, acc.index)) acc = {v, i};
}
template <typename T>
inline void argmin_combine(IndexValue<T>& acc, T v, int64_t i) {
  if (argmin_better(v, i, acc.value, acc.index)) acc = {v, i};
}
template <typename T>
inline void argmax_combine(IndexValue<T>& acc, const IndexValue<T>& o) {
  if (o.index >= 0) argmax_combine(acc, o.value, o.index);
}
template <typename T>
inline void argmin_combine(IndexValue<T>& acc, const IndexValue<T>& o) {
  if (o.index >= 0) argmin_combine(acc, o.value, o.index);
}

// ---- scratch memory ----------------------------------------------------------------------

/// A kernel's scratch array on the heap (a column reduction's partial rows, row buffers too big
/// for the stack), 64-byte aligned: a vector of it never straddles two cache lines. operator
/// new[] alone gives 16 bytes, and a 256 KiB block lands 16 bytes past a page boundary: the
/// column sum e0's partial-row stores then overlap, in the low 12 address bits, the next input
/// load's line (4K aliasing) and the load waits for them. e0's generated kernel, A/B in one
/// process with a same-code control within 2-12%: 2.9-3.2 -> 2.1-2.2 ms at one thread (the read
/// ceiling's speed), equal at two (1.6-1.8 ms, both at the memory bandwidth then).
template <typename T>
class ScratchArray {
 public:
  explicit ScratchArray(int64_t n)
      : storage_(new T[static_cast<size_t>(n > 0 ? n : 0) + 64 / sizeof(T)]) {
    const auto p = reinterpret_cast<uintptr_t>(storage_.get());
    data_ = reinterpret_cast<T*>((p + 63) & ~uintptr_t{63});
  }
  T* get() const { return data_; }
  T& operator[](int64_t i) const { return data_[i]; }

 private:
  std::unique_ptr<T[]> storage_;
  T* data_;
};

}  // namespace coil

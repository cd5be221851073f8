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
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <type_traits>

#include "coil_types.h"

/// On a lambda that generated code calls from several places (a vector loop's step, called for
/// whole vectors and for the masked tail): always inlined, so each call is specialized for its
/// arguments (a constant whole-vector count makes every masked access a plain one), as if the
/// body had been printed at each call.
#define COIL_INLINE __attribute__((always_inline))

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

// x below 0 gives 0; NaN and -0 stay as they are (torch's relu, which is clamp_min(x, 0)).
template <typename T>
inline T relu(T x) {
  return x < T(0) ? T(0) : x;
}

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

/// An integer converted to a floating type (the to_dtype op). g++ 12 with -fno-trapping-math
/// and SSE4.1 folds (float)(int)x into trunc(x) (match.pd, in forwprop), which keeps the sign
/// of zero: x in (-1, -0] gives -0.0, where C++ and torch give +0.0. Adding +0.0 turns -0.0
/// into +0.0 and changes no other value (an integer never converts to -0.0); it must be a
/// statement of its own: in one expression g++ drops it (a converted integer is never -0.0)
/// before the trunc fold. One add (vaddps) per element, vectorized.
template <typename To, typename From>
inline To int_to_float(From x) {
  To r = static_cast<To>(x);
  r += To(0);
  return r;
}

/// where(c, a, b) of scalar code, without a branch. `c ? a : b` is a branch in g++'s IR: a load
/// used only by one arm can be moved into that arm, the loop vectorizer then if-converts it into
/// a masked load, and g++ 12 and 13 give a vectorized group of masked loads the mask of the first
/// vector, so lanes of the others read 0 (g++ 13.3: coil_fuzz seed 402 graph 3070,
/// tests/toolchain/gcc13_masked_load.cpp; g++ 12 through tree-sink, gcc12_masked_load.cpp).
/// Here both operands are plain values and the choice is a bitwise blend, which the vectorizer
/// turns into a blend instruction: no arm to move a load into.
template <typename T>
inline T select(bool c, T a, T b) {
  static_assert(std::is_arithmetic_v<T>, "select of a scalar type");
  if constexpr (std::is_same_v<T, bool>) {
    return (c & a) | (!c & b);
  } else {
    using U = std::conditional_t<
        sizeof(T) == 1, uint8_t,
        std::conditional_t<sizeof(T) == 2, uint16_t,
                           std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    static_assert(sizeof(U) == sizeof(T), "select of a 1, 2, 4 or 8 byte type");
    const U mask = static_cast<U>(U(0) - static_cast<U>(c));
    U ua, ub;
    std::memcpy(&ua, &a, sizeof a);
    std::memcpy(&ub, &b, sizeof b);
    const U r = static_cast<U>((ua & mask) | (ub & static_cast<U>(~mask)));
    T out;
    std::memcpy(&out, &r, sizeof out);
    return out;
  }
}

/// double -> float (the to_dtype op). g++ 12.2's SLP vectorizer drops a double -> float ->
/// double round trip in a small unrolled loop: the value comes back with all its double bits
/// (tests/toolchain/gcc12_f64_f32_round_trip.cpp). The empty asm makes the float opaque, so the
/// pair cannot be folded; it costs the vectorization of loops that narrow f64 to f32.
inline float f64_to_f32(double x) {
  float f = static_cast<float>(x);
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(f));
#else
  __asm__("" : "+r"(f));
#endif
  return f;
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
/// An overflowing power wraps (two's complement), as in PyTorch and the reference interpreter.
template <typename T>
inline T ipow(T base, T exp) {
  if (exp < 0) {
    if (base == T(1)) return T(1);
    if (base == T(-1)) return (exp % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  // The products in an unsigned type: a signed int32/int64 product that overflows is undefined
  // behaviour (UBSan found one: 390625 * 390625 in int, in a last squaring whose result is not
  // even used), an unsigned one wraps. U is T after integer promotion (bool and 8-bit types
  // become int), made unsigned; converting back to T is modular (gcc and clang).
  using U = std::make_unsigned_t<decltype(+T())>;
  T result = 1;
  while (exp) {
    if (exp & 1) result = static_cast<T>(static_cast<U>(result) * static_cast<U>(base));
    exp >>= 1;
    base = static_cast<T>(static_cast<U>(base) * static_cast<U>(base));
  }
  return result;
}

/// The first failed run-time check of a run (IrProgram::run_checks: a gather index out of
/// range, an integer fmod by zero, an integer power with a negative exponent). Each run of a
/// module with checks has one (`coil_run_error`, a local of coil_graph_run passed to every
/// kernel, so concurrent runs never share it); the checked_* helpers record into it (the first
/// failure wins) and return a harmless value, and coil_graph_run_error hands it to
/// CompiledModel::run on the same thread, which raises it as a coil::Error.
struct RunError {
  std::atomic<int> site{-1};  // the IrProgram::run_checks entry; -1: every check passed
  int64_t value = 0, limit = 0;

  void record(int at, int64_t v, int64_t l) {
    int none = -1;
    if (site.compare_exchange_strong(none, at)) {
      value = v;
      limit = l;
    }
  }
};

/// `v` as an index into a dim of `size`: a negative v wraps once (numpy/ONNX); an index still
/// out of range is recorded and clamped, so nothing is read out of bounds.
inline int64_t checked_index(int64_t v, int64_t size, RunError& error, int site) {
  const int64_t w = v < 0 ? v + size : v;
  if (__builtin_expect(w >= 0 && w < size, 1)) return w;
  error.record(site, v, size);
  return w < 0 ? 0 : size - 1;
}

/// Integer fmod (C's truncating %). A zero divisor gives 0 instead of trapping (SIGFPE), and so
/// does -1 (INT_MIN % -1 traps on x86, and every x % -1 is 0).
template <typename T>
inline T int_fmod(T a, T b) {
  if constexpr (std::is_unsigned_v<T>) {  // T(-1) is the largest value, a real divisor
    return b == 0 ? T(0) : static_cast<T>(a % b);
  } else {
    return b == 0 || b == T(-1) ? T(0) : static_cast<T>(a % b);
  }
}

/// int_fmod that records a zero divisor as the run's error (torch raises there).
template <typename T>
inline T checked_int_fmod(T a, T b, RunError& error, int site) {
  if (__builtin_expect(b == 0, 0)) error.record(site, static_cast<int64_t>(a), 0);
  return int_fmod(a, b);
}

/// ipow that records a negative exponent as the run's error (torch raises there).
template <typename T>
inline T checked_ipow(T base, T exp, RunError& error, int site) {
  if (__builtin_expect(exp < 0, 0))
    error.record(site, static_cast<int64_t>(exp), static_cast<int64_t>(base));
  return ipow<T>(base, exp);
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
/// for the stack), 64-byte aligned: a vector of it never straddles two cache lines.
///
/// An array that a loop reads and writes in step with others (`streams`: a column sum's partial
/// rows next to the input rows) is also placed at the offset within a 4 KiB page farthest from
/// theirs. A load whose address matches a pending store's in the low 12 bits waits for it (4K
/// aliasing): with the partial row 64 bytes past the input's page offset, each iteration's input
/// load waits for the previous iteration's partial store. Where operator new[] puts a block
/// depends on the heap's history (a first 256 KiB block is mmap'ed, 16 bytes past a page), so
/// two compiled copies of e0's column sum ran 1.8 and 2.2 ms at one thread in one process;
/// placed this way, three copies run within 3% of each other (1.85-1.98 ms). Page offsets 0 to
/// 3584 from the input all ran within 1.90-1.98 ms; 64 bytes ran 2.29 ms.
template <typename T>
class ScratchArray {
 public:
  explicit ScratchArray(int64_t n) : storage_(new T[elements(n) + 64 / sizeof(T)]) {
    data_ = reinterpret_cast<T*>(aligned(storage_.get()));
  }

  ScratchArray(int64_t n, std::initializer_list<const void*> streams)
      : storage_(new T[elements(n) + (kPage + 64) / sizeof(T)]) {
    const uintptr_t base = aligned(storage_.get());
    uintptr_t best = base % kPage, best_gap = 0;
    for (uintptr_t offset = 0; offset < kPage; offset += 64) {
      uintptr_t gap = kPage;
      for (const void* s : streams) {
        const uintptr_t d = (offset - reinterpret_cast<uintptr_t>(s)) % kPage;
        gap = std::min(gap, std::min(d, kPage - d));
      }
      if (gap > best_gap) {
        best_gap = gap;
        best = offset;
      }
    }
    data_ = reinterpret_cast<T*>(base + (best - base) % kPage);
  }

  T* get() const { return data_; }
  T& operator[](int64_t i) const { return data_[i]; }

 private:
  static constexpr uintptr_t kPage = 4096;
  static size_t elements(int64_t n) { return static_cast<size_t>(n > 0 ? n : 0); }
  static uintptr_t aligned(const T* p) {
    return (reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63};
  }

  std::unique_ptr<T[]> storage_;
  T* data_;
};

}  // namespace coil

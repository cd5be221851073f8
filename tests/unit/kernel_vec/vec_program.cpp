// Compiled at test time, once per ISA, by tests/unit/kernel_vec_test.cpp (through the code cache
// with isa_compile_flags): extern "C" entry points that run coil_vec.h over arrays the way
// generated kernels do (full vectors, then a masked tail), so the tests can compare every lane
// with a scalar reference. Not part of the test binary itself (tests/CMakeLists.txt globs
// tests/unit/*.cpp only).
#include "coil_vec.h"

using namespace coil;

namespace {

// Type codes shared with the tests.
enum TypeCode { kF32 = 0, kF64 = 1, kI32 = 2, kI64 = 3 };

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

// Op lists: the float list is the header's own; integers have the ops that are defined for them.
#define TEST_INT_UNARY_OPS(X) \
  X(abs) X(neg) X(isnan) X(floor) X(ceil) X(round) X(trunc) X(relu) X(sign)

template <typename T>
const char* unary_name(int op) {
  int i = 0;
#define NAME(name) \
  if (op == i++) return #name;
  if constexpr (kIsFloat<T>) {
    COIL_VEC_UNARY_OPS(NAME)
  } else {
    TEST_INT_UNARY_OPS(NAME)
  }
#undef NAME
  return nullptr;
}

template <typename V>
V unary(int op, const V& x) {
  int i = 0;
#define APPLY(name) \
  if (op == i++) return coil::name(x);
  if constexpr (kIsFloat<typename V::value_type>) {
    COIL_VEC_UNARY_OPS(APPLY)
  } else {
    TEST_INT_UNARY_OPS(APPLY)
  }
#undef APPLY
  return x;
}

// clang-format off
#define TEST_BINARY_OPS(X)             \
  X(add, a + b)                        \
  X(sub, a - b)                        \
  X(mul, a * b)                        \
  X(div, a / b)                        \
  X(maximum, coil::maximum(a, b))      \
  X(minimum, coil::minimum(a, b))      \
  X(pow, coil::pow(a, b))              \
  X(fmod, coil::fmod(a, b))            \
  X(eq, a == b)                        \
  X(ne, a != b)                        \
  X(lt, a < b)                         \
  X(le, a <= b)                        \
  X(gt, a > b)                         \
  X(ge, a >= b)                        \
  X(bit_and, a & b)                    \
  X(bit_or, a | b)                     \
  X(bit_xor, a ^ b)                    \
  X(bit_not, ~a)                       \
  X(where_lt, where(a < b, a, b))      \
  X(blendv_gt, V::blendv(a, b, a > b)) \
  X(set3, V::set(a, b, 3))
// clang-format on

const char* binary_name(int op) {
  int i = 0;
#define NAME(name, expr) \
  if (op == i++) return #name;
  TEST_BINARY_OPS(NAME)
#undef NAME
  return nullptr;
}

template <typename V>
V binary(int op, const V& a, const V& b) {
  int i = 0;
#define APPLY(name, expr) \
  if (op == i++) return expr;
  TEST_BINARY_OPS(APPLY)
#undef APPLY
  return a;
}

template <typename T>
void unary_loop(int op, const T* in, T* out, int64_t n) {
  using V = Vec<T>;
  for (int64_t x = 0; x < n; x += V::size()) {
    unary(op, V::loadu(in + x, n - x)).store(out + x, n - x);
  }
}

template <typename T>
void binary_loop(int op, const T* a, const T* b, T* out, int64_t n) {
  using V = Vec<T>;
  for (int64_t x = 0; x < n; x += V::size()) {
    binary(op, V::loadu(a + x, n - x), V::loadu(b + x, n - x)).store(out + x, n - x);
  }
}

// Loads count elements of U into V (with conversion when U is not V's type), stores them back
// to dst with the same count, and all lanes (as V's type) to `full`.
template <typename V, typename U>
void masked_copy(const void* src, void* dst, void* full, int64_t count) {
  V v = V::loadu(static_cast<const U*>(src), count);
  v.store(static_cast<U*>(dst), count);
  v.store(static_cast<typename V::value_type*>(full));
}

template <typename T>
void reduce_loop(int op, const T* in, int64_t n, T* out) {
  using V = Vec<T>;
  T init = op == 0 ? T(0) : op == 1 ? T(1) : op == 2 ? lowest<T>() : highest<T>();
  V acc(init);
  for (int64_t x = 0; x < n; x += V::size()) {
    V v = V::loadu(in + x, n - x);
    if (n - x >= V::size()) {
      acc = op == 0 ? acc + v : op == 1 ? acc * v : op == 2 ? acc.maximum(v) : acc.minimum(v);
    } else {
      acc = op == 0   ? sum_masked_reduce(acc, v, n - x)
            : op == 1 ? prod_masked_reduce(acc, v, n - x)
            : op == 2 ? max_masked_reduce(acc, v, n - x)
                      : min_masked_reduce(acc, v, n - x);
    }
  }
  *out = op == 0   ? acc.reduce_add()
         : op == 1 ? acc.reduce_mul()
         : op == 2 ? acc.reduce_max()
                   : acc.reduce_min();
}

template <typename T>
void arg_loop(int is_min, const T* in, int64_t n, int64_t* index, T* value) {
  using V = Vec<T>;
  IndexValueVec<V> acc;
  for (int64_t x = 0; x < n; x += V::size()) {
    V v = V::loadu(in + x, n - x);
    if (is_min) {
      argmin_combine_vec(acc, v, x, n - x);
    } else {
      argmax_combine_vec(acc, v, x, n - x);
    }
  }
  IndexValue<T> r = is_min ? argmin_reduce_all(acc) : argmax_reduce_all(acc);
  *index = r.index;
  *value = r.value;
}

template <typename T>
void welford_loop(const T* in, int64_t n, int64_t split, T* out) {
  using V = Vec<T>;
  // Two accumulators over [0, split) and [split, n), merged: covers both combine forms.
  Welford<V> parts[2];
  for (int p = 0; p < 2; ++p) {
    int64_t begin = p == 0 ? 0 : split, end = p == 0 ? split : n;
    for (int64_t x = begin; x < end; x += V::size()) {
      V v = V::loadu(in + x, end - x);
      if (end - x >= V::size()) {
        welford_combine(parts[p], v);
      } else {
        welford_combine(parts[p], v, end - x);
      }
    }
  }
  welford_combine(parts[0], parts[1]);
  Welford<T> r = welford_reduce_all(parts[0]);
  out[0] = r.mean;
  out[1] = r.m2;
  out[2] = r.weight;
}

template <typename From, typename To>
void convert_loop(const void* in, void* out, int64_t n) {
  using V = Vec<From>;
  const From* src = static_cast<const From*>(in);
  To* dst = static_cast<To*>(out);
  for (int64_t x = 0; x < n; x += V::size()) {
    convert<To>(V::loadu(src + x, n - x)).store(dst + x, n - x);
  }
}

template <typename T>
void convert_dispatch(int to, const void* in, void* out, int64_t n) {
  switch (to) {
    case kF32:
      return convert_loop<T, float>(in, out, n);
    case kF64:
      return convert_loop<T, double>(in, out, n);
    case kI32:
      return convert_loop<T, int32_t>(in, out, n);
    default:
      return convert_loop<T, int64_t>(in, out, n);
  }
}

// mode 0: constant stride; 1: Vec<int64_t> indices; 2: Vec<int32_t> indices.
template <typename T>
void gather_one(int mode, const T* base, int64_t stride, const int64_t* index, int64_t count,
                T* out) {
  using V = Vec<T>;
  V v = mode == 0   ? V::gather(base, stride, count)
        : mode == 1 ? V::gather(base, Vec<int64_t>::loadu(index), count)
                    : V::gather(base, convert<int32_t>(Vec<int64_t>::loadu(index)), count);
  v.store(out);
}

template <typename T>
void scatter_one(const T* in, T* base, int64_t stride, const int64_t* index, int64_t count) {
  using V = Vec<T>;
  V v = V::loadu(in);
  if (stride != 0) {
    v.scatter(base, stride, count);
  } else {
    v.scatter(base, Vec<int64_t>::loadu(index), count);
  }
}

}  // namespace

#define TYPED_ENTRY(name, body)                                           \
  extern "C" void name##_f32 body(float) extern "C" void name##_f64 body( \
      double) extern "C" void name##_i32                                  \
  body(int32_t) extern "C" void name##_i64                                \
  body(int64_t)

extern "C" int vec_lanes(int type) {
  switch (type) {
    case kF32:
      return Vectorized<float>::size();
    case kF64:
      return Vectorized<double>::size();
    case kI32:
      return Vectorized<int32_t>::size();
    case kI64:
      return Vectorized<int64_t>::size();
    default:
      return kFloatLanes;
  }
}

extern "C" const char* unary_op_name(int type, int op) {
  switch (type) {
    case kF32:
      return unary_name<float>(op);
    case kF64:
      return unary_name<double>(op);
    case kI32:
      return unary_name<int32_t>(op);
    default:
      return unary_name<int64_t>(op);
  }
}
extern "C" const char* binary_op_name(int op) {
  return binary_name(op);
}

#define UNARY_BODY(T)                              \
  (int op, const void* in, void* out, int64_t n) { \
    unary_loop(op, (const T*)in, (T*)out, n);      \
  }
TYPED_ENTRY(unary, UNARY_BODY)
#define BINARY_BODY(T)                                           \
  (int op, const void* a, const void* b, void* out, int64_t n) { \
    binary_loop(op, (const T*)a, (const T*)b, (T*)out, n);       \
  }
TYPED_ENTRY(binary, BINARY_BODY)
#define REDUCE_BODY(T)                             \
  (int op, const void* in, int64_t n, void* out) { \
    reduce_loop(op, (const T*)in, n, (T*)out);     \
  }
TYPED_ENTRY(reduce, REDUCE_BODY)
#define ARG_BODY(T)                                                      \
  (int is_min, const void* in, int64_t n, int64_t* index, void* value) { \
    arg_loop(is_min, (const T*)in, n, index, (T*)value);                 \
  }
TYPED_ENTRY(arg, ARG_BODY)
#define CONVERT_BODY(T)                            \
  (int to, const void* in, void* out, int64_t n) { \
    convert_dispatch<T>(to, in, out, n);           \
  }
TYPED_ENTRY(convert, CONVERT_BODY)
#define GATHER_BODY(T)                                                                           \
  (int mode, const void* base, int64_t stride, const int64_t* index, int64_t count, void* out) { \
    gather_one(mode, (const T*)base, stride, index, count, (T*)out);                             \
  }
TYPED_ENTRY(gather, GATHER_BODY)
#define SCATTER_BODY(T)                                                               \
  (const void* in, void* base, int64_t stride, const int64_t* index, int64_t count) { \
    scatter_one((const T*)in, (T*)base, stride, index, count);                        \
  }
TYPED_ENTRY(scatter, SCATTER_BODY)
#define ARANGE_BODY(T)                               \
  (double base, double step, void* out) {            \
    Vec<T>::arange(T(base), T(step)).store((T*)out); \
  }
TYPED_ENTRY(arange, ARANGE_BODY)

extern "C" void welford_f32(const float* in, int64_t n, int64_t split, float* out) {
  welford_loop(in, n, split, out);
}
extern "C" void welford_f64(const double* in, int64_t n, int64_t split, double* out) {
  welford_loop(in, n, split, out);
}

// coil::transpose_tile (CppTile2DKernel's in-register transpose): a kFloatLanes square, reading
// rows x cols of src (the masked form) or all of it (the default arguments, when both are -1).
extern "C" void transpose_tile_f32(const float* src, int64_t src_stride, float* dst,
                                   int64_t dst_stride, int64_t rows, int64_t cols) {
  if (rows < 0 && cols < 0) {
    coil::transpose_tile(src, src_stride, dst, dst_stride);
  } else {
    coil::transpose_tile(src, src_stride, dst, dst_stride, rows, cols);
  }
}

// Vec<float>::loadu_stride2 (a stride-2 pooling window's taps): every other element from p,
// count lanes (count < 0: the unmasked form).
extern "C" void load_stride2_f32(const float* p, int64_t count, float* out) {
  (count < 0 ? Vec<float>::loadu_stride2(p) : Vec<float>::loadu_stride2(p, count)).store(out);
}

// Vec<float>::select: c ? a : b in every lane.
extern "C" void select_f32(int c, const float* a, const float* b, float* out) {
  Vec<float>::select(c != 0, Vec<float>::loadu(a), Vec<float>::loadu(b)).store(out);
}

// Masked copies through Vec<T>, for every storage type a kernel loads.
#define COPY_ENTRY(name, V, U)                                              \
  extern "C" void copy_##name(const void* s, void* d, void* f, int64_t c) { \
    masked_copy<V, U>(s, d, f, c);                                          \
  }
COPY_ENTRY(f32, Vectorized<float>, float)
COPY_ENTRY(f64, Vectorized<double>, double)
COPY_ENTRY(i32, Vectorized<int32_t>, int32_t)
COPY_ENTRY(i64, Vectorized<int64_t>, int64_t)
COPY_ENTRY(vec_f64, Vec<double>, double)
COPY_ENTRY(vec_i64, Vec<int64_t>, int64_t)
COPY_ENTRY(bf16, Vec<float>, bfloat16)
COPY_ENTRY(f16, Vec<float>, half)
COPY_ENTRY(u8_f32, Vec<float>, uint8_t)
COPY_ENTRY(i8_i32, Vec<int32_t>, int8_t)
COPY_ENTRY(bool_f32, Vec<float>, bool)
COPY_ENTRY(u8_i64, Vec<int64_t>, uint8_t)

// Whole-array conversions through Vec<float> (bit-exactness tests).
extern "C" void narrow_bf16(const float* in, bfloat16* out, int64_t n) {
  for (int64_t x = 0; x < n; x += kFloatLanes)
    Vec<float>::loadu(in + x, n - x).store(out + x, n - x);
}
extern "C" void widen_bf16(const bfloat16* in, float* out, int64_t n) {
  for (int64_t x = 0; x < n; x += kFloatLanes)
    Vec<float>::loadu(in + x, n - x).store(out + x, n - x);
}
extern "C" void narrow_f16(const float* in, half* out, int64_t n) {
  for (int64_t x = 0; x < n; x += kFloatLanes)
    Vec<float>::loadu(in + x, n - x).store(out + x, n - x);
}
extern "C" void widen_f16(const half* in, float* out, int64_t n) {
  for (int64_t x = 0; x < n; x += kFloatLanes)
    Vec<float>::loadu(in + x, n - x).store(out + x, n - x);
}

// A float comparison selecting int64 lanes (mask_cast inside where), and masks stored as bool.
extern "C" void where_mixed(const float* a, const float* b, const int64_t* x, const int64_t* y,
                            int64_t* out, bool* mask_out, int64_t n) {
  for (int64_t i = 0; i < n; i += kFloatLanes) {
    Vec<float> m = Vec<float>::loadu(a + i, n - i) < Vec<float>::loadu(b + i, n - i);
    where(m, Vec<int64_t>::loadu(x + i, n - i), Vec<int64_t>::loadu(y + i, n - i))
        .store(out + i, n - i);
    m.store(mask_out + i, n - i);
  }
}

extern "C" float cascade_sum_f32(const float* in, int64_t n) {
  CascadeSum<Vec<float>> sum;
  for (int64_t x = 0; x < n; x += kFloatLanes) sum.add(Vec<float>::loadu(in + x, n - x));
  return sum.result().reduce_add();
}
extern "C" float naive_sum_f32(const float* in, int64_t n) {
  Vec<float> acc;
  for (int64_t x = 0; x < n; x += kFloatLanes) acc = acc + Vec<float>::loadu(in + x, n - x);
  return acc.reduce_add();
}

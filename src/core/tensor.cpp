#include "coil/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/coil_types.h"
#include "support/check.h"

namespace coil {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorRef::numel() const {
  return shape_numel(shape);
}

bool TensorRef::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

double load_as_double(DType dtype, const void* p) {
  switch (dtype) {
    case DType::Bool:
      return *static_cast<const bool*>(p) ? 1.0 : 0.0;
    case DType::U8:
      return *static_cast<const uint8_t*>(p);
    case DType::I8:
      return *static_cast<const int8_t*>(p);
    case DType::I32:
      return *static_cast<const int32_t*>(p);
    case DType::I64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::I16:
      return *static_cast<const int16_t*>(p);
    case DType::U16:
      return *static_cast<const uint16_t*>(p);
    case DType::U32:
      return *static_cast<const uint32_t*>(p);
    case DType::U64:
      return static_cast<double>(*static_cast<const uint64_t*>(p));
    case DType::F16:
      return static_cast<float>(*static_cast<const half*>(p));
    case DType::BF16:
      return static_cast<float>(*static_cast<const bfloat16*>(p));
    case DType::F32:
      return *static_cast<const float*>(p);
    case DType::F64:
      return *static_cast<const double*>(p);
  }
  COIL_UNREACHABLE("bad dtype");
}

// Integer stores follow C++ conversion of a double that is in range; out-of-range and NaN
// values are wrapped through int64 (documented in docs/numerics.md) rather than being UB.
static int64_t to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

void store_from_double(DType dtype, void* p, double v) {
  switch (dtype) {
    case DType::Bool:
      *static_cast<bool*>(p) = v != 0.0;
      return;
    case DType::U8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(to_int64(v));
      return;
    case DType::I8:
      *static_cast<int8_t*>(p) = static_cast<int8_t>(to_int64(v));
      return;
    case DType::I32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(to_int64(v));
      return;
    case DType::I64:
      *static_cast<int64_t*>(p) = to_int64(v);
      return;
    case DType::I16:
      *static_cast<int16_t*>(p) = static_cast<int16_t>(to_int64(v));
      return;
    case DType::U16:
      *static_cast<uint16_t*>(p) = static_cast<uint16_t>(to_int64(v));
      return;
    case DType::U32:
      *static_cast<uint32_t*>(p) = static_cast<uint32_t>(to_int64(v));
      return;
    case DType::U64:
      // [2^63, 2^64) is in range for u64 but not through int64; below, negatives wrap modulo
      // 2^64 (-1.0 -> 2^64 - 1, as numpy and torch give on x86-64).
      *static_cast<uint64_t*>(p) = v >= 9.2233720368547758e18 && v < 1.8446744073709552e19
                                       ? static_cast<uint64_t>(v)
                                       : static_cast<uint64_t>(to_int64(v));
      return;
    case DType::F16:
      *static_cast<half*>(p) = half(static_cast<float>(v));
      return;
    case DType::BF16:
      *static_cast<bfloat16*>(p) = bfloat16(static_cast<float>(v));
      return;
    case DType::F32:
      *static_cast<float*>(p) = static_cast<float>(v);
      return;
    case DType::F64:
      *static_cast<double*>(p) = v;
      return;
  }
  COIL_UNREACHABLE("bad dtype");
}

namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr int64_t kHugePageMinBytes = int64_t{4} << 20;
}  // namespace

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  for (int64_t s : shape) COIL_USER_CHECK(s >= 0, "tensor size {} is negative", shape_str(shape));
  // The strides multiply the sizes with zeros counted as ones: a 0-element shape such as
  // [0, 2^62, 4] passed the element count below but overflowed them (found by
  // tests/fuzz/parsers/onnx_parser_fuzzer, through ONNX's ConstantOfShape).
  int64_t stride_product = 1;
  for (int64_t s : shape)
    COIL_USER_CHECK(
        !__builtin_mul_overflow(stride_product, std::max<int64_t>(s, 1), &stride_product),
        "cannot allocate a {} tensor of shape {}: its strides overflow int64", dtype_name(dtype),
        shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  // At least one element so that data() is never null (0-size tensors still get a pointer).
  int64_t elements = 1;
  bool overflow = false;
  for (int64_t s : t.shape_) overflow = overflow || __builtin_mul_overflow(elements, s, &elements);
  overflow = overflow || __builtin_mul_overflow(std::max<int64_t>(elements, 1),
                                                int64_t{dtype_size(dtype)}, &t.storage_bytes_);
  COIL_USER_CHECK(!overflow, "cannot allocate a {} tensor of shape {}: its size overflows int64",
                  dtype_name(dtype), shape_str(t.shape_));
  // Large tensors are 2 MiB aligned and asked to be backed by transparent huge pages: a kernel
  // streaming through 4 KiB pages restarts the hardware prefetcher at every page and misses the
  // TLB every 64 lines (a 64 MiB row sum at one thread: 2.6 ms on 4 KiB pages, 1.5 ms on 2 MiB
  // pages, this Zen 4). The kernel only honours the advice where THP is `madvise` or `always`.
  const bool huge = t.storage_bytes_ >= kHugePageMinBytes;
  const size_t align = huge ? kHugePageBytes : 64;
  size_t bytes = static_cast<size_t>((t.storage_bytes_ + 63) / 64 * 64);
  if (huge) bytes = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // The nothrow form, checked for null: the same as catching std::bad_alloc, except under
  // AddressSanitizer, whose throwing operator new aborts the process on a failed allocation
  // instead of throwing (gcc 12's libasan, even with allocator_may_return_null=1), so that the
  // sanitizer lane (scripts/sanitize.sh) tests this error too.
  std::byte* raw =
      static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(align), std::nothrow));
  if (raw == nullptr) {
    user_error("cannot allocate {} bytes for a {} tensor of shape {}", t.storage_bytes_,
               dtype_name(dtype), shape_str(t.shape_));
  }
  if (huge) ::madvise(raw, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
  t.storage_ = std::shared_ptr<std::byte[]>(
      raw, [align](std::byte* q) { ::operator delete[](q, std::align_val_t(align)); });
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.storage_.get(), 0, static_cast<size_t>(t.storage_bytes_));
  return t;
}

namespace {

/// A strided `ref` into the contiguous `dst`, in 64x64 tiles of its last two dims: a transposed
/// source (a weight read as W.t() by a backward graph) is then read a cache line at a time
/// instead of one element per line. Element by element, a 4096 x 1024 f32 transpose took about
/// 30 ms of a 44 ms MLP backward call through the torch bridge (docs/torch.md).
template <typename T>
void copy_strided(const TensorRef& ref, void* dst_bytes) {
  const size_t rank = ref.shape.size();
  const T* src = static_cast<const T*>(ref.data);
  T* dst = static_cast<T*>(dst_bytes);
  const int64_t rows = rank >= 2 ? ref.shape[rank - 2] : 1, cols = ref.shape[rank - 1];
  const int64_t rs = rank >= 2 ? ref.strides[rank - 2] : 0, cs = ref.strides[rank - 1];
  const int64_t plane = rows * cols;
  const size_t outer_rank = rank >= 2 ? rank - 2 : 0;
  std::vector<int64_t> idx(outer_rank, 0);
  constexpr int64_t kTile = 64;
  for (int64_t done = 0; done < ref.numel(); done += plane) {
    int64_t base = 0;
    for (size_t d = 0; d < outer_rank; ++d) base += idx[d] * ref.strides[d];
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c0 = 0; c0 < cols; c0 += kTile)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
            dst[done + r * cols + c] = src[base + r * rs + c * cs];
    for (size_t d = outer_rank; d-- > 0;) {
      if (++idx[d] < ref.shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor Tensor::copy_of(const TensorRef& ref) {
  COIL_USER_CHECK(ref.shape.size() == ref.strides.size(), "tensor has {} sizes but {} strides",
                  ref.shape.size(), ref.strides.size());
  Tensor t = empty(ref.dtype, ref.shape);
  int64_t n = t.numel();
  if (n == 0) return t;
  int esize = dtype_size(ref.dtype);
  if (ref.is_contiguous()) {
    std::memcpy(t.data(), ref.data, static_cast<size_t>(n * esize));
    return t;
  }
  if (ref.shape.empty()) {  // a scalar: its one element
    std::memcpy(t.data(), ref.data, static_cast<size_t>(esize));
    return t;
  }
  switch (esize) {
    case 1:
      copy_strided<uint8_t>(ref, t.data());
      break;
    case 2:
      copy_strided<uint16_t>(ref, t.data());
      break;
    case 4:
      copy_strided<uint32_t>(ref, t.data());
      break;
    case 8:
      copy_strided<uint64_t>(ref, t.data());
      break;
    default:
      COIL_ASSERT(false, "no element type of {} bytes", esize);
  }
  return t;
}

Tensor Tensor::strided(std::vector<int64_t> shape, std::vector<int64_t> strides,
                       int64_t offset_elems) const {
  COIL_ASSERT(shape.size() == strides.size(), "{} sizes vs {} strides", shape.size(),
              strides.size());
  Tensor v = *this;
  v.shape_ = std::move(shape);
  v.strides_ = std::move(strides);
  v.offset_bytes_ = offset_bytes_ + offset_elems * dtype_size(dtype_);
  return v;
}

static int64_t linear_to_offset(const Tensor& t, int64_t linear) {
  int64_t off = 0;
  for (size_t d = t.shape().size(); d-- > 0;) {
    int64_t s = t.shape()[d];
    off += (linear % s) * t.strides()[d];
    linear /= s;
  }
  return off;
}

double Tensor::item_as_double(int64_t linear_index) const {
  int64_t off = linear_to_offset(*this, linear_index);
  return load_as_double(dtype_, static_cast<const std::byte*>(data()) + off * dtype_size(dtype_));
}

void Tensor::set_from_double(int64_t linear_index, double value) {
  int64_t off = linear_to_offset(*this, linear_index);
  store_from_double(dtype_, static_cast<std::byte*>(data()) + off * dtype_size(dtype_), value);
}

}  // namespace coil

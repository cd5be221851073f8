// Host tensors: what the C++ API, the CLI and the tests pass to a compiled model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coil/dtype.h"

namespace coil {

/// A non-owning view: data pointer, dtype, shape and strides (in elements, may be 0 for
/// broadcast or negative). What CompiledModel::run accepts.
struct TensorRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  int64_t numel() const;
  bool is_contiguous() const;
};

/// Row-major (C order) strides for a shape, in elements.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
/// Product of the sizes (1 for a scalar).
int64_t shape_numel(const std::vector<int64_t>& shape);
/// "[2, 3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);

/// An owning host tensor over a 64-byte aligned buffer. Copies share the buffer (like
/// torch.Tensor); use clone() for a deep copy. Views (strided()) share it too.
class Tensor {
 public:
  Tensor() = default;
  /// Uninitialized contiguous tensor.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  /// Zero-filled contiguous tensor.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  /// Contiguous copy of the elements at `ref` (any strides).
  static Tensor copy_of(const TensorRef& ref);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  bool defined() const { return storage_ != nullptr; }
  bool is_contiguous() const { return ref().is_contiguous(); }

  /// Pointer to element [0, 0, ...] (which may sit inside the buffer for views).
  void* data() const { return storage_.get() + offset_bytes_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }

  TensorRef ref() const { return TensorRef{data(), dtype_, shape_, strides_}; }
  /// A view of the same buffer with other shape/strides/offset (elements). Not bounds-checked
  /// beyond a debug assertion: the caller picks strides inside the buffer.
  Tensor strided(std::vector<int64_t> shape, std::vector<int64_t> strides,
                 int64_t offset_elems = 0) const;
  /// Contiguous deep copy.
  Tensor clone() const { return copy_of(ref()); }

  /// Element at a linear (row-major) position, converted to double. For tests and printing.
  double item_as_double(int64_t linear_index) const;
  /// Sets the element at a linear position from a double (rounded/cast to the dtype).
  void set_from_double(int64_t linear_index, double value);

 private:
  std::shared_ptr<std::byte[]> storage_;
  int64_t storage_bytes_ = 0;
  int64_t offset_bytes_ = 0;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
};

/// Reads one element of type `dtype` at `p` as double; writes one.
double load_as_double(DType dtype, const void* p);
void store_from_double(DType dtype, void* p, double v);

}  // namespace coil

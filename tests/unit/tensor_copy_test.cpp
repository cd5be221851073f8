// Tensor::copy_of over strided views: the copy a compiled model makes of an input that is not
// contiguous (model_runner.cpp), against an element-by-element reference, for transposes,
// permutations, broadcasts (stride 0), slices with steps and scalars, in every element size.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "coil/tensor.h"

namespace coil {
namespace {

// The element at each index of the view, in row-major order of its shape.
template <typename T>
std::vector<T> reference(const std::vector<T>& base, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<T> out;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    out.push_back(base[static_cast<size_t>(off)]);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <typename T>
void check_views(DType dtype) {
  struct View {
    std::vector<int64_t> shape, strides;
  };
  const std::vector<View> views = {
      {{130, 70}, {1, 130}},               // a transpose, edges not a multiple of the tile
      {{64, 64}, {1, 64}},                 // exactly one tile
      {{3, 70, 65}, {1, 3, 210}},          // a 3-D permutation
      {{2, 5, 67, 3}, {1005, 201, 3, 1}},  // contiguous inner dims under a permuted outer
      {{4, 100}, {0, 1}},                  // a broadcast row
      {{100}, {3}},                        // every third element
      {{7, 1, 130}, {2, 999, 14}},         // a size-1 dim with an odd stride
      {{}, {}},                            // a scalar
  };
  for (const View& v : views) {
    SCOPED_TRACE(::testing::Message() << "shape of rank " << v.shape.size() << " first dim "
                                      << (v.shape.empty() ? 0 : v.shape[0]));
    int64_t extent = 1;
    for (size_t d = 0; d < v.shape.size(); ++d) extent += (v.shape[d] - 1) * v.strides[d];
    std::vector<T> base(static_cast<size_t>(extent));
    std::iota(base.begin(), base.end(), T{1});
    TensorRef ref;
    ref.data = base.data();
    ref.dtype = dtype;
    ref.shape = v.shape;
    ref.strides = v.strides;
    Tensor t = Tensor::copy_of(ref);
    const std::vector<T> want = reference(base, v.shape, v.strides);
    ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(std::memcmp(t.data(), want.data(), want.size() * sizeof(T)), 0);
  }
}

TEST(TensorCopy, StridedViewsCopyInRowMajorOrderForEveryElementSize) {
  check_views<uint8_t>(DType::U8);
  check_views<int16_t>(DType::I16);
  check_views<int32_t>(DType::I32);
  check_views<int64_t>(DType::I64);
}

}  // namespace
}  // namespace coil

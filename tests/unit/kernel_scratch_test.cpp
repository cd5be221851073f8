// coil::ScratchArray (coil_kernel.h, the runtime header of generated kernels): 64-byte aligned,
// and, given the arrays a loop walks in step with it, placed at the page offset farthest from
// theirs (4K aliasing), whatever offset operator new[] returned.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/coil_kernel.h"

namespace coil {
namespace {

uintptr_t page_distance(const void* a, const void* b) {
  uintptr_t d = (reinterpret_cast<uintptr_t>(a) - reinterpret_cast<uintptr_t>(b)) % 4096;
  return d < 4096 - d ? d : 4096 - d;
}

TEST(ScratchArray, IsAlignedAndWritableToTheEnd) {
  for (int64_t n : {0, 1, 3, 17, 1000, 65536}) {
    ScratchArray<float> a(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u) << n;
    for (int64_t i = 0; i < n; ++i) a[i] = static_cast<float>(i);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], static_cast<float>(i));
  }
}

TEST(ScratchArray, KeepsAwayFromTheArraysItStreamsWith) {
  std::vector<float> input(3 * 1024 + 64);
  // Inputs at every 64-byte page offset, and at one that is not a multiple of 64.
  for (int64_t shift = 0; shift <= 1024; shift += 16) {
    const float* in = input.data() + shift;
    ScratchArray<float> part(65536, {in});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(part.get()) % 64, 0u);
    EXPECT_GE(page_distance(part.get(), in), 2048u - 64) << shift;
    for (int64_t i = 0; i < 65536; ++i) part[i] = 1.0f;  // the whole array is usable
    // A second partial array keeps away from both.
    ScratchArray<float> second(1024, {in, part.get()});
    EXPECT_GE(page_distance(second.get(), in), 1024u - 64) << shift;
    EXPECT_GE(page_distance(second.get(), part.get()), 1024u - 64) << shift;
    for (int64_t i = 0; i < 1024; ++i) second[i] = 2.0f;
  }
}

}  // namespace
}  // namespace coil

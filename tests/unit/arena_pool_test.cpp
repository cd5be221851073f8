// ArenaPool (runtime/model_runner.h): the arenas that a model's runners share. A size-generic
// model's variants (one per size: a decode step makes one per token) take their arena from
// one pool, so a new size reuses memory that earlier calls touched instead of allocating its
// own; arenas in use at once are distinct.
#include <gtest/gtest.h>

#include "runtime/model_runner.h"

namespace coil {
namespace {

TEST(ArenaPool, ReusesAFreeArenaLargeEnough) {
  ArenaPool pool;
  Tensor a = pool.take(1000);
  const void* first = a.data();
  EXPECT_GE(a.numel(), 1000);
  pool.give_back(std::move(a));
  Tensor b = pool.take(600);  // smaller: the same memory
  EXPECT_EQ(b.data(), first);
  pool.give_back(std::move(b));
  Tensor c = pool.take(1000);
  EXPECT_EQ(c.data(), first);
  pool.give_back(std::move(c));
}

TEST(ArenaPool, GrowingSizesReallocateWithHeadroom) {
  ArenaPool pool;
  pool.give_back(pool.take(1000));
  // One byte more than the free arena holds: it is replaced by one with 25% headroom, which
  // then serves the next sizes as a KV cache grows.
  Tensor a = pool.take(1001);
  EXPECT_EQ(a.numel(), 1251);
  const void* grown = a.data();
  pool.give_back(std::move(a));
  int reallocations = 0;
  for (int64_t bytes = 1002; bytes <= 100000; bytes += 7) {
    Tensor t = pool.take(bytes);
    ASSERT_GE(t.numel(), bytes);
    if (t.data() != grown) ++reallocations, grown = t.data();
    pool.give_back(std::move(t));
  }
  // 1251 -> 100000 bytes in steps of 25%: about 20 reallocations, not one per call (14,143).
  EXPECT_LE(reallocations, 25);
  EXPECT_GE(reallocations, 15);
}

TEST(ArenaPool, ArenasInUseAtOnceAreDistinct) {
  ArenaPool pool;
  Tensor a = pool.take(256), b = pool.take(256), c = pool.take(128);
  EXPECT_NE(a.data(), b.data());
  EXPECT_NE(a.data(), c.data());
  EXPECT_NE(b.data(), c.data());
  const void* pa = a.data();
  pool.give_back(std::move(a));
  pool.give_back(std::move(b));
  Tensor d = pool.take(200), e = pool.take(200);
  EXPECT_NE(d.data(), e.data());
  EXPECT_TRUE(d.data() == pa || e.data() == pa);
  pool.give_back(std::move(c));
  pool.give_back(std::move(d));
  pool.give_back(std::move(e));
}

}  // namespace
}  // namespace coil

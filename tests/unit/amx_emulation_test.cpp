// The emulated AMX tiles of src/kernels/coil_amx.h (COIL_AMX_EMULATE), on which
// gemm_runtime_test.cpp runs coil_gemm.h's AMX kernel on CPUs without AMX: TDPBF16PS's
// arithmetic as the Intel SDM's pseudo-code defines it (even and odd products of the pairs in
// two f32 lanes, then both added to C), subnormal inputs read as zero and subnormal results
// flushed, and the tile configuration's rows / bytes per row limiting loads and stores.
#define COIL_AMX_EMULATE 1
#include "kernels/coil_amx.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/coil_types.h"

namespace coil {
namespace {

uint16_t bf16_bits(float f) {
  return bfloat16(f).bits;
}

float f32_of(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A: 16 x 32 bf16 (row m: pairs k = 0..15), B: 16 pair rows x 16 columns (row k: column n's
// pair at 2n, 2n + 1), C: 16 x 16 f32. Runs tile 0 += tile 4 . tile 6.
struct Tiles {
  uint16_t a[16][32] = {};
  uint16_t b[16][32] = {};
  float c[16][16] = {};

  void run() {
    amx::load_config(amx::full_config());
    amx::load<0>(c, 64);
    amx::load<4>(a, 64);
    amx::load<6>(b, 64);
    amx::dpbf16ps<0, 4, 6>();
    amx::store<0>(c, 64);
    amx::release();
  }
};

TEST(AmxEmulation, SmallIntegersAreExact) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(-8, 8);
  Tiles t;
  for (auto& row : t.a) {
    for (uint16_t& x : row) x = bf16_bits(static_cast<float>(small(rng)));
  }
  for (auto& row : t.b) {
    for (uint16_t& x : row) x = bf16_bits(static_cast<float>(small(rng)));
  }
  for (auto& row : t.c) {
    for (float& x : row) x = static_cast<float>(small(rng));
  }
  Tiles before = t;
  t.run();
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      double want = before.c[m][n];
      for (int k = 0; k < 16; ++k) {
        want += static_cast<double>(f32_of(before.a[m][2 * k])) * f32_of(before.b[k][2 * n]);
        want +=
            static_cast<double>(f32_of(before.a[m][2 * k + 1])) * f32_of(before.b[k][2 * n + 1]);
      }
      ASSERT_EQ(t.c[m][n], want) << "C[" << m << "][" << n << "]";
    }
  }
}

// C = 2^24 and one pair (1, 1): the SDM sums the pair's products in their lanes first
// (1 + 1 = 2, then 2^24 + 2 exactly); adding each product to C in turn would round
// 2^24 + 1 back to 2^24 twice.
TEST(AmxEmulation, ThePairIsSummedBeforeItMeetsTheAccumulator) {
  Tiles t;
  t.c[0][0] = 16777216.0f;
  t.a[0][0] = t.a[0][1] = bf16_bits(1.0f);
  t.b[0][0] = t.b[0][1] = bf16_bits(1.0f);
  t.run();
  EXPECT_EQ(t.c[0][0], 16777218.0f);
  // The even lane runs over all 16 pairs before the odd one joins: 2^24 + 1 + ... in one lane
  // rounds at each step (RNE: 2^24 + 1 -> 2^24), 15 ones in the other lane do not.
  Tiles u;
  u.a[1][0] = bf16_bits(16777216.0f);
  u.b[0][2] = bf16_bits(1.0f);  // column 1, even lane
  for (int k = 1; k < 16; ++k) {
    u.a[1][2 * k] = bf16_bits(1.0f);
    u.a[1][2 * k + 1] = bf16_bits(1.0f);
    u.b[k][2] = bf16_bits(1.0f);
    u.b[k][3] = bf16_bits(1.0f);
  }
  u.run();
  // Even lane: 2^24 then 15 x (+1), each rounding back to 2^24. Odd lane: 15. Sum 2^24 + 15,
  // rounded to even: 2^24 + 16.
  EXPECT_EQ(u.c[1][1], 16777232.0f);
}

TEST(AmxEmulation, SubnormalInputsAreZeroAndSubnormalResultsFlush) {
  Tiles t;
  // A subnormal bf16 (2^-133) times 2^100 would be 2^-33; read as zero it adds nothing.
  t.a[0][0] = 0x0001;
  t.b[0][0] = bf16_bits(std::ldexp(1.0f, 100));
  // 2^-70 * 2^-70 = 2^-140, subnormal in f32: flushed to zero.
  t.a[1][0] = bf16_bits(std::ldexp(1.0f, -70));
  t.b[0][2] = bf16_bits(std::ldexp(1.0f, -70));
  // A subnormal accumulator reads as zero: C = 2^-130 + 1 * 1 = 1 exactly.
  t.c[2][0] = std::ldexp(1.0f, -130);
  t.a[2][0] = bf16_bits(1.0f);
  t.b[0][0] = bf16_bits(std::ldexp(1.0f, 100));
  t.run();
  EXPECT_EQ(t.c[0][0], 0.0f);
  EXPECT_EQ(t.c[1][1], 0.0f);
  EXPECT_EQ(t.c[2][0], std::ldexp(1.0f, 100));
  // Normal values still work next to them: 2^-60 * 2^-60 = 2^-120 is normal.
  Tiles u;
  u.a[0][0] = bf16_bits(std::ldexp(1.0f, -60));
  u.b[0][0] = bf16_bits(std::ldexp(1.0f, -60));
  u.run();
  EXPECT_EQ(u.c[0][0], std::ldexp(1.0f, -120));
}

TEST(AmxEmulation, ConfiguredRowsAndBytesLimitLoadsAndStores) {
  amx::TileConfig cfg = amx::full_config();
  cfg.rows[0] = 3;
  cfg.colsb[0] = 8;  // 2 floats
  amx::load_config(cfg);
  std::vector<float> src(16 * 16, 5.0f), dst(16 * 16, -1.0f);
  amx::load<0>(src.data(), 64);
  amx::store<0>(dst.data(), 64);
  amx::release();
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      EXPECT_EQ(dst[r * 16 + c], r < 3 && c < 2 ? 5.0f : -1.0f) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace coil

// A thin layer over Intel AMX tiles for coil_gemm.h's bf16 micro-kernel (coil_gemm_kernels.h,
// PathAmx in coil_gemm_driver.h): the tile configuration, load, store, zero, TDPBF16PS and
// release, plus the Linux permission request that must precede the first tile use.
//
// Two implementations of the same interface:
//   - the real instructions (gcc/clang intrinsics; needs -mamx-tile -mamx-bf16), and
//   - with COIL_AMX_EMULATE, a scalar emulation with the instruction's documented semantics, so
//     that the micro-kernel, its packing and blocking are tested on CPUs without AMX (the
//     development machines are AMD Zen 4). The emulated tiles are thread_local, like the real
//     tile registers, and using them before load_config aborts, as TILELOADD would fault.
//
// TDPBF16PS as the Intel SDM's pseudo-code defines it (emulated exactly that way): for each
// row m and column n of the destination, two f32 lanes start at zero; over the K/2 pairs of the
// instruction, lane 0 accumulates the products of the even elements of the pairs and lane 1 the
// odd ones (each step an f32 FMA; bf16 x bf16 products are exact in f32, so one rounding per
// step), then dst += (lane0 + lane1), each add rounded to nearest even. Subnormal inputs
// (A, B and the destination) are read as zero and subnormal results are flushed to zero
// (DAZ = FTZ = 1 whatever MXCSR says). Whether the silicon's internal order matches the
// pseudo-code bit for bit is not documented; tests compare both with a rounding bound, not
// bitwise (tests/unit/gemm_runtime_test.cpp, amx_emulation_test.cpp).
// C++17 (generated code is built with -std=c++17).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(COIL_AMX_EMULATE)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#else
#include <immintrin.h>
#endif

namespace coil::amx {

/// Tile geometry used by coil: every tile is 16 rows of 64 bytes (16 f32, or 32 bf16 as 16
/// pairs), the largest palette-1 shape.
constexpr int kRows = 16;
constexpr int kRowBytes = 64;

/// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

/// Tiles 0..7 all 16 x 64 bytes.
inline TileConfig full_config() {
  TileConfig c;
  std::memset(&c, 0, sizeof c);
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kRowBytes;
    c.rows[t] = kRows;
  }
  return c;
}

// Linux keeps the 8 KiB of tile data out of a process's signal frames until it asks:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Without it the first tile instruction
// raises SIGILL. Process-wide and sticky, so asking once per module is enough.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

/// Asks the kernel for tile data permission (once per process; later calls return the first
/// answer). False when the kernel refuses (no AMX, an old kernel, or a seccomp policy). Always
/// true when emulating.
inline bool request_permission() {
#if defined(COIL_AMX_EMULATE)
  return true;
#elif defined(__linux__) && defined(SYS_arch_prctl)
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
#else
  return false;
#endif
}

#if defined(COIL_AMX_EMULATE)

namespace emulated {

struct State {
  TileConfig cfg{};
  bool configured = false;
  alignas(64) unsigned char tile[8][kRows][kRowBytes];
};

inline State& state() {
  thread_local State s;
  return s;
}

inline State& configured_state(const char* what) {
  State& s = state();
  if (!s.configured) {
    std::fprintf(stderr, "coil::amx (emulated): %s before load_config\n", what);
    std::abort();
  }
  return s;
}

// DAZ / FTZ: a subnormal reads or leaves as a zero of its sign.
inline float flush(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

inline float bf16_at(const unsigned char* row, int i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return flush(f);
}

}  // namespace emulated

inline void load_config(const TileConfig& c) {
  emulated::State& s = emulated::state();
  s.cfg = c;
  s.configured = true;
  std::memset(s.tile, 0, sizeof s.tile);  // LDTILECFG zeroes the tiles
}

inline void release() {
  emulated::State& s = emulated::state();
  s.configured = false;
  std::memset(s.tile, 0, sizeof s.tile);
}

template <int T>
inline void zero() {
  std::memset(emulated::configured_state("tile zero").tile[T], 0, kRows * kRowBytes);
}

/// Tile T's configured rows of colsb bytes from p, rows `stride` bytes apart; the rest zero.
template <int T>
inline void load(const void* p, int64_t stride) {
  emulated::State& s = emulated::configured_state("tile load");
  std::memset(s.tile[T], 0, kRows * kRowBytes);
  for (int r = 0; r < s.cfg.rows[T]; ++r) {
    std::memcpy(s.tile[T][r], static_cast<const char*>(p) + r * stride, s.cfg.colsb[T]);
  }
}

template <int T>
inline void store(void* p, int64_t stride) {
  emulated::State& s = emulated::configured_state("tile store");
  for (int r = 0; r < s.cfg.rows[T]; ++r) {
    std::memcpy(static_cast<char*>(p) + r * stride, s.tile[T][r], s.cfg.colsb[T]);
  }
}

/// TDPBF16PS tile C += A (rows x K pairs) . B (K pair rows x columns), per the SDM (top).
template <int C, int A, int B>
inline void dpbf16ps() {
  using emulated::bf16_at;
  using emulated::flush;
  emulated::State& s = emulated::configured_state("tdpbf16ps");
  const int rows = s.cfg.rows[C], cols = s.cfg.colsb[C] / 4, pairs = s.cfg.colsb[A] / 4;
  for (int m = 0; m < rows; ++m) {
    for (int n = 0; n < cols; ++n) {
      float lane0 = 0.0f, lane1 = 0.0f;
      for (int k = 0; k < pairs; ++k) {
        // Exact products: 8-bit significands multiply into 16 bits.
        float p0 = bf16_at(s.tile[A][m], 2 * k) * bf16_at(s.tile[B][k], 2 * n);
        float p1 = bf16_at(s.tile[A][m], 2 * k + 1) * bf16_at(s.tile[B][k], 2 * n + 1);
        lane0 = flush(lane0 + flush(p0));
        lane1 = flush(lane1 + flush(p1));
      }
      float c;
      std::memcpy(&c, s.tile[C][m] + 4 * n, 4);
      c = flush(flush(c) + flush(lane0 + lane1));
      std::memcpy(s.tile[C][m] + 4 * n, &c, 4);
    }
  }
}

#else  // the real instructions

inline void load_config(const TileConfig& c) {
  _tile_loadconfig(&c);
}
inline void release() {
  _tile_release();
}

// gcc's _tile_* macros paste the tile number into the assembly text, so each tile (and each
// dot-product triple) the kernel uses gets its own specialization.
template <int T>
void zero();
template <int T>
void load(const void* p, int64_t stride);
template <int T>
void store(void* p, int64_t stride);
template <int C, int A, int B>
void dpbf16ps();

#define COIL_AMX_TILE(T)                               \
  template <>                                          \
  inline void zero<T>() {                              \
    _tile_zero(T);                                     \
  }                                                    \
  template <>                                          \
  inline void load<T>(const void* p, int64_t stride) { \
    _tile_loadd(T, p, stride);                         \
  }                                                    \
  template <>                                          \
  inline void store<T>(void* p, int64_t stride) {      \
    _tile_stored(T, p, stride);                        \
  }
COIL_AMX_TILE(0)
COIL_AMX_TILE(1)
COIL_AMX_TILE(2)
COIL_AMX_TILE(3)
COIL_AMX_TILE(4)
COIL_AMX_TILE(5)
COIL_AMX_TILE(6)
COIL_AMX_TILE(7)
#undef COIL_AMX_TILE

// The 2 x 2 blocking of coil_gemm_kernels.h: C tiles 0-3, A tiles 4-5, B tiles 6-7.
#define COIL_AMX_DP(C, A, B)        \
  template <>                       \
  inline void dpbf16ps<C, A, B>() { \
    _tile_dpbf16ps(C, A, B);        \
  }
COIL_AMX_DP(0, 4, 6)
COIL_AMX_DP(1, 4, 7)
COIL_AMX_DP(2, 5, 6)
COIL_AMX_DP(3, 5, 7)
#undef COIL_AMX_DP

#endif

}  // namespace coil::amx

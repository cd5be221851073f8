// Register-blocked micro-kernels of coil_gemm.h, one set per ISA (chosen by the same macros as
// coil_vec.h: COIL_CPU_AVX512, COIL_CPU_AVX2, none = portable C++), and the A packing they read.
// Included by coil_gemm.h only.
//
// A micro-kernel computes one R x W tile of C (R <= kMR rows, W = NV * kLanes <= kNR columns;
// W < kNR only for the last column panel of B, so that N = 256 does not pay for 288 columns):
//   c[r * ldc + j] (+)= sum_k a[k * kMR + r] * b[k * W + j]     (r < R, j < W)
// a: one packed A panel (kMR rows interleaved per k; only the first R rows are read);
// b: one packed B panel (W columns per k, zero-padded past N); c: the accumulator block
// (the padding columns receive the products of the zero padding).
// With `accumulate` false the tile starts from zero, else from c. Every element of C is one
// chain of fused multiply-adds in increasing k (kc blocks continue the chain through c exactly),
// so the result does not depend on the blocking, the tile position or the thread count.
//
// bf16 (AVX512-BF16 only): k is taken in pairs. vdpbf16ps multiplies 32 bf16 lanes (16 pairs)
// and adds both products of a pair into one f32 lane, so A is packed as 32-bit (k, k+1) pairs
// broadcast to every lane, and B as kNR columns of (k, k+1) pairs per pair row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(COIL_CPU_AVX512) || defined(COIL_CPU_AVX2)
#include <immintrin.h>
#endif

#include "coil_types.h"

#if defined(__GNUC__) && !defined(__clang__)
#define COIL_GEMM_UNROLL _Pragma("GCC unroll 32")
#elif defined(__clang__)
#define COIL_GEMM_UNROLL _Pragma("unroll")
#else
#define COIL_GEMM_UNROLL
#endif

#if defined(COIL_CPU_AVX512) && defined(__AVX512BF16__)
#define COIL_GEMM_HAS_BF16_KERNEL 1
#else
#define COIL_GEMM_HAS_BF16_KERNEL 0
#endif

// AMX (Intel Sapphire Rapids and later): bf16 matmuls run on TDPBF16PS tiles instead
// (coil_amx.h; PathAmx in coil_gemm_driver.h). COIL_AMX_EMULATE runs the same kernel on an
// emulation of the tiles, for tests on CPUs without AMX.
#if defined(COIL_CPU_AVX512) && \
    ((defined(__AMX_TILE__) && defined(__AMX_BF16__)) || defined(COIL_AMX_EMULATE))
#define COIL_GEMM_HAS_AMX_KERNEL 1
#include "coil_amx.h"
#else
#define COIL_GEMM_HAS_AMX_KERNEL 0
#endif
// bf16 B packed as (k, k + 1) pairs (both bf16 kernels read that layout).
#define COIL_GEMM_BF16_PAIRS (COIL_GEMM_HAS_BF16_KERNEL || COIL_GEMM_HAS_AMX_KERNEL)

// The detail namespace's code differs per ISA, so it lives in an inline namespace named after
// it: libcoil_vmath holds run_matmul compiled for each (src/kernels/vmath/gemm_*.cpp), side by
// side without clashing, and a module links the one of its own ISA (COIL_GEMM_PRECOMPILED).
#if defined(COIL_CPU_AVX512) && COIL_GEMM_HAS_AMX_KERNEL && defined(COIL_AMX_EMULATE)
#define COIL_GEMM_ABI avx512_amx_emulated
#elif defined(COIL_CPU_AVX512) && COIL_GEMM_HAS_AMX_KERNEL
#define COIL_GEMM_ABI avx512_amx
#elif defined(COIL_CPU_AVX512) && COIL_GEMM_HAS_BF16_KERNEL
#define COIL_GEMM_ABI avx512_bf16
#elif defined(COIL_CPU_AVX512)
#define COIL_GEMM_ABI avx512
#elif defined(COIL_CPU_AVX2)
#define COIL_GEMM_ABI avx2
#else
#define COIL_GEMM_ABI portable
#endif

namespace coil::gemm::detail {
inline namespace COIL_GEMM_ABI {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// ---- tile shapes --------------------------------------------------------------------------
// AVX-512 (Zen4: one 512-bit FMA per cycle, latency 4; 32 zmm registers): 8 x 48 keeps 24
// accumulators + 3 B vectors + 1 broadcast in registers; per k it issues 3 vector loads and 8
// broadcasts for 24 FMAs, so the loads stay well under the FMA rate, and 24 independent
// chains hide the FMA latency. With A and B in L1/L2 it runs at 97-99% of the FMA peak.
// Measured against it (one thread, 1024^3 / 2048^3, fraction of oneDNN's sgemm): 8 x 48
// 0.97 / 0.96, 6 x 64 0.90 / 0.83, 12 x 32 0.92 / 0.76, 14 x 32 0.76 / 0.90 (8 rows also
// make A packing an 8x8 transpose). COIL_GEMM_AVX512_MR / _NV override it for experiments.
// AVX2 (16 ymm): 6 x 16 = 12 accumulators + 2 B vectors + 1 broadcast (~100 GFLOP/s per Zen4
// core, which runs 256-bit FMAs at the same flop rate).
// Portable: 4 x 16 plain arrays, `omp simd` over the 16 columns so that compilers vectorize
// them for whatever the target has (with -march=native on Zen4: ~90 GFLOP/s, unfused).
// kLanes: floats per vector register, the granularity of the last panel's width.
#if defined(COIL_CPU_AVX512)
#ifndef COIL_GEMM_AVX512_MR
#define COIL_GEMM_AVX512_MR 8
#endif
#ifndef COIL_GEMM_AVX512_NV
#define COIL_GEMM_AVX512_NV 3
#endif
constexpr int kMR = COIL_GEMM_AVX512_MR;
constexpr int kLanes = 16;
constexpr int kNR = kLanes * COIL_GEMM_AVX512_NV;
#elif defined(COIL_CPU_AVX2)
constexpr int kMR = 6;
constexpr int kLanes = 8;
constexpr int kNR = 16;
#else
constexpr int kMR = 4;
constexpr int kLanes = 16;  // one "vector" of 16 plain floats
constexpr int kNR = 16;
#endif
constexpr int kNV = kNR / kLanes;

// Columns of packed B panel q of n_panels (ceil(N / NR)): NR, but the last panel only rounds
// its columns up to whole vectors of `Lanes` (AMX: whole tiles of 16 columns).
template <int NR, int Lanes>
inline int64_t panel_width_of(int64_t q, int64_t N) {
  int64_t rest = N - q * NR;
  return rest >= NR ? NR : round_up(rest, Lanes);
}
inline int64_t panel_width(int64_t q, int64_t N) {
  return panel_width_of<kNR, kLanes>(q, N);
}

// ---- f32 micro-kernels ----------------------------------------------------------------------

#if defined(COIL_CPU_AVX512)

template <int R, int NV>
inline void ukernel_f32(int64_t kc, const float* __restrict a, const float* __restrict b,
                        float* __restrict c, int64_t ldc, bool accumulate) {
  __m512 acc[R][NV];
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r]);
      COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    a += kMR;
    b += 16 * NV;
  }
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

#elif defined(COIL_CPU_AVX2)

template <int R, int NV>
inline void ukernel_f32(int64_t kc, const float* __restrict a, const float* __restrict b,
                        float* __restrict c, int64_t ldc, bool accumulate) {
  __m256 acc[R][NV];
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 bv[NV];
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
    COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      __m256 av = _mm256_broadcast_ss(a + r);
      COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
    a += kMR;
    b += 8 * NV;
  }
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
  }
}

#else

// Portable: a multiply and an add per step (generated code is built with -ffp-contract=off, so
// these round twice; the order is still one fixed chain per element).
template <int R, int NV>
inline void ukernel_f32(int64_t kc, const float* __restrict a, const float* __restrict b,
                        float* __restrict c, int64_t ldc, bool accumulate) {
  constexpr int W = NV * kLanes;
  float acc[R][W];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < W; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  }
  for (int64_t k = 0; k < kc; ++k) {
    COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      const float av = a[r];
#pragma omp simd
      for (int j = 0; j < W; ++j) acc[r][j] += av * b[j];
    }
    a += kMR;
    b += W;
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < W; ++j) c[r * ldc + j] = acc[r][j];
  }
}

#endif

// ---- bf16 micro-kernel (AVX512-BF16) ------------------------------------------------------

#if COIL_GEMM_HAS_BF16_KERNEL

// kp pair rows; a: kMR 32-bit (k, k+1) pairs per pair row; b: 16 * NV column pairs
// (32 * NV bf16) per pair row.
template <int R, int NV>
inline void ukernel_bf16(int64_t kp, const uint32_t* __restrict a, const uint16_t* __restrict b,
                         float* __restrict c, int64_t ldc, bool accumulate) {
  __m512 acc[R][NV];
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kp; ++k) {
    __m512bh bv[NV];
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
      bv[v] = (__m512bh)_mm512_loadu_si512(b + 32 * v);
    }
    COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
      COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
      }
    }
    a += kMR;
    b += 32 * NV;
  }
  COIL_GEMM_UNROLL for (int r = 0; r < R; ++r) {
    COIL_GEMM_UNROLL for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

#endif

// ---- dispatch on the tile shape (kMR x kNR except at the bottom of M and the right of N) ----

template <int NV, int R = kMR>
inline void ukernel_f32_rows(int rows, int64_t kc, const float* a, const float* b, float* c,
                             int64_t ldc, bool accumulate) {
  if constexpr (R > 1) {
    if (rows < R) return ukernel_f32_rows<NV, R - 1>(rows, kc, a, b, c, ldc, accumulate);
  }
  ukernel_f32<R, NV>(kc, a, b, c, ldc, accumulate);
}

template <int NV = kNV>
inline void ukernel_f32_tile(int rows, int nv, int64_t kc, const float* a, const float* b, float* c,
                             int64_t ldc, bool accumulate) {
  if constexpr (NV > 1) {
    if (nv < NV) return ukernel_f32_tile<NV - 1>(rows, nv, kc, a, b, c, ldc, accumulate);
  }
  ukernel_f32_rows<NV>(rows, kc, a, b, c, ldc, accumulate);
}

#if COIL_GEMM_HAS_BF16_KERNEL
template <int NV, int R = kMR>
inline void ukernel_bf16_rows(int rows, int64_t kp, const uint32_t* a, const uint16_t* b, float* c,
                              int64_t ldc, bool accumulate) {
  if constexpr (R > 1) {
    if (rows < R) return ukernel_bf16_rows<NV, R - 1>(rows, kp, a, b, c, ldc, accumulate);
  }
  ukernel_bf16<R, NV>(kp, a, b, c, ldc, accumulate);
}

template <int NV = kNV>
inline void ukernel_bf16_tile(int rows, int nv, int64_t kp, const uint32_t* a, const uint16_t* b,
                              float* c, int64_t ldc, bool accumulate) {
  if constexpr (NV > 1) {
    if (nv < NV) return ukernel_bf16_tile<NV - 1>(rows, nv, kp, a, b, c, ldc, accumulate);
  }
  ukernel_bf16_rows<NV>(rows, kp, a, b, c, ldc, accumulate);
}
#endif

// ---- packing A --------------------------------------------------------------------------
// One panel: `rows` (<= kMR) rows of A starting at `a` (element (i, k) at a[i * rs + k * cs]),
// columns [0, kc), written as out[k * kMR + r]. Rows past `rows` are left unwritten: the
// kernels for short tiles never read them.

inline float bf16_to_float(uint16_t bits) {
  return bits_float(static_cast<uint32_t>(bits) << 16);
}

template <class T>
inline float to_f32(T x) {
  return static_cast<float>(x);
}

#if defined(COIL_CPU_AVX512) || defined(COIL_CPU_AVX2)
#define COIL_GEMM_HAS_TRANSPOSE8 1
// 8 rows of 32-bit elements (row r at src + r * row_bytes), columns [0, n & ~7):
// out[k * out_stride + r] = row r [k], by 8x8 transposes in ymm registers (bit moves only: NaN
// payloads and bf16 pairs pass unchanged). Returns the columns done.
inline int64_t transpose_rows8(const char* src, int64_t row_bytes, int64_t n, float* out,
                               int64_t out_stride = 8) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const char* p = src + 4 * k;
    __m256 r0 = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    __m256 r1 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + row_bytes));
    __m256 r2 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 2 * row_bytes));
    __m256 r3 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 3 * row_bytes));
    __m256 r4 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * row_bytes));
    __m256 r5 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 5 * row_bytes));
    __m256 r6 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 6 * row_bytes));
    __m256 r7 = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 7 * row_bytes));
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float* o = out + k * out_stride;
    const int64_t d = out_stride;
    _mm256_storeu_ps(o + 0 * d, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(o + 1 * d, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(o + 2 * d, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(o + 3 * d, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(o + 4 * d, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(o + 5 * d, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(o + 6 * d, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(o + 7 * d, _mm256_permute2f128_ps(s3, s7, 0x31));
  }
  return k;
}
#endif

// Element types: float -> float, bfloat16 -> float (for the f32 kernel).
template <class T>
inline void pack_a_panel_f32(const T* a, int64_t rs, int64_t cs, int rows, int64_t kc,
                             float* __restrict out) {
  if (rows == kMR && cs == 1) {
    int64_t k0 = 0;
#ifdef COIL_GEMM_HAS_TRANSPOSE8
    if constexpr (std::is_same_v<T, float> && kMR == 8) {
      k0 = transpose_rows8(reinterpret_cast<const char*>(a), rs * 4, kc, out);
    }
#endif
    for (int r = 0; r < kMR; ++r) {
      const T* row = a + r * rs;
      for (int64_t k = k0; k < kc; ++k) out[k * kMR + r] = to_f32(row[k]);
    }
    return;
  }
  if (rs == 1) {  // transposed A: each k is `rows` contiguous elements
    for (int64_t k = 0; k < kc; ++k) {
      const T* col = a + k * cs;
      for (int r = 0; r < rows; ++r) out[k * kMR + r] = to_f32(col[r]);
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const T* row = a + r * rs;
    for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = to_f32(row[k * cs]);
  }
}

// Asks for the cache lines of the next A panel (rows x kc from a), so that packing it does not
// wait on memory: the panels of a block are packed one at a time between kernel sweeps.
template <class T>
inline void prefetch_a_panel(const T* a, int64_t rs, int64_t cs, int rows, int64_t kc) {
#if defined(COIL_CPU_AVX512) || defined(COIL_CPU_AVX2)
  constexpr int64_t kPerLine = 64 / sizeof(T);
  if (cs == 1) {
    for (int r = 0; r < rows; ++r) {
      const char* row = reinterpret_cast<const char*>(a + r * rs);
      for (int64_t k = 0; k < kc; k += kPerLine) _mm_prefetch(row + k * sizeof(T), _MM_HINT_T1);
      _mm_prefetch(row + (kc - 1) * sizeof(T), _MM_HINT_T1);
    }
  } else if (rs == 1) {
    for (int64_t k = 0; k < kc; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(a + k * cs), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(a + k * cs + rows - 1), _MM_HINT_T1);
    }
  }
#else
  (void)a, (void)rs, (void)cs, (void)rows, (void)kc;
#endif
}

// bf16 pairs for ukernel_bf16: out[p * kMR + r] = (a(r, 2p) | a(r, 2p + 1) << 16), a(r, kc) = 0
// when kc is odd.
inline void pack_a_panel_bf16_pairs(const bfloat16* a, int64_t rs, int64_t cs, int rows, int64_t kc,
                                    uint32_t* __restrict out) {
  const int64_t kp = kc / 2;
  int64_t p0 = 0;
#ifdef COIL_GEMM_HAS_TRANSPOSE8
  if (cs == 1 && rows == 8 && kMR == 8) {
    // Each row is a run of 32-bit pairs: the f32 transpose moves them as they are.
    p0 = transpose_rows8(reinterpret_cast<const char*>(a), rs * 2, kp,
                         reinterpret_cast<float*>(out));
  }
#endif
  for (int r = 0; r < rows; ++r) {
    const bfloat16* row = a + r * rs;
    if (cs == 1) {
      for (int64_t p = p0; p < kp; ++p) {
        uint32_t pair;
        std::memcpy(&pair, row + 2 * p, 4);  // little endian: k in the low half
        out[p * kMR + r] = pair;
      }
    } else {
      for (int64_t p = p0; p < kp; ++p) {
        out[p * kMR + r] = static_cast<uint32_t>(row[2 * p * cs].bits) |
                           static_cast<uint32_t>(row[(2 * p + 1) * cs].bits) << 16;
      }
    }
    if (kc % 2) out[kp * kMR + r] = row[(kc - 1) * cs].bits;
  }
}

// ---- bf16 on AMX tiles ---------------------------------------------------------------------
// A micro-tile is up to 32 x 32 of C in four accumulator tiles (tile 2i + j: rows 16i.., columns
// 16j..), A in tiles 4-5 and B in tiles 6-7: per step of 32 k, two A and two B tile loads feed
// four TDPBF16PS (each 16 x 16 x 32), so every loaded tile is used twice, the most that 8 tiles
// allow. The A panel is packed per step as two full 16 x 32 tiles (1 KiB each, contiguous:
// TILELOADD with a 64-byte stride); B is the (k, k + 1) pair layout of pack_b_panels_bf16_pairs
// with 32-column panels and K rounded up to 32, so a B tile is 16 pair rows of 16 columns read
// with the panel's row pitch (128 bytes). Zero padding (rows past M, k past K, columns past N)
// keeps every tile full, so one tile configuration serves every shape; the padding products are
// zeros. The accumulator block has room for whole tiles (the driver rounds blocks to kAmxMR x
// kAmxNR), so the tiles are stored whole into it and the epilogue reads only the real part.
#if COIL_GEMM_HAS_AMX_KERNEL

constexpr int kAmxMR = 32;
constexpr int kAmxNR = 32;
constexpr int kAmxKStep = 32;                          // k per TDPBF16PS (16 pairs)
constexpr int64_t kAmxATile = amx::kRows * kAmxKStep;  // bf16 per A tile

// `steps` steps of 32 k; a: the packed A panel (2 tiles per step); b: the B panel at the
// slice's first pair row, pair rows b_row_bytes apart.
template <int MT, int NT>
inline void ukernel_amx(int64_t steps, const uint16_t* a, const uint16_t* b, int64_t b_row_bytes,
                        float* c, int64_t ldc, bool accumulate) {
  const int64_t c_stride = ldc * 4;
  if (accumulate) {
    amx::load<0>(c, c_stride);
    if constexpr (NT == 2) amx::load<1>(c + 16, c_stride);
    if constexpr (MT == 2) amx::load<2>(c + 16 * ldc, c_stride);
    if constexpr (MT == 2 && NT == 2) amx::load<3>(c + 16 * ldc + 16, c_stride);
  } else {
    amx::zero<0>();
    if constexpr (NT == 2) amx::zero<1>();
    if constexpr (MT == 2) amx::zero<2>();
    if constexpr (MT == 2 && NT == 2) amx::zero<3>();
  }
  const int64_t b_step = amx::kRows * b_row_bytes / 2;  // bf16 per 16 pair rows
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* as = a + s * 2 * kAmxATile;
    const uint16_t* bs = b + s * b_step;
    amx::load<4>(as, amx::kRowBytes);
    amx::load<6>(bs, b_row_bytes);
    if constexpr (NT == 2) amx::load<7>(bs + 32, b_row_bytes);
    if constexpr (MT == 2) amx::load<5>(as + kAmxATile, amx::kRowBytes);
    amx::dpbf16ps<0, 4, 6>();
    if constexpr (NT == 2) amx::dpbf16ps<1, 4, 7>();
    if constexpr (MT == 2) amx::dpbf16ps<2, 5, 6>();
    if constexpr (MT == 2 && NT == 2) amx::dpbf16ps<3, 5, 7>();
  }
  amx::store<0>(c, c_stride);
  if constexpr (NT == 2) amx::store<1>(c + 16, c_stride);
  if constexpr (MT == 2) amx::store<2>(c + 16 * ldc, c_stride);
  if constexpr (MT == 2 && NT == 2) amx::store<3>(c + 16 * ldc + 16, c_stride);
}

// rows <= 16 skips the second A tile (half the work for short M: decoding, small batches).
inline void ukernel_amx_tile(int rows, int nt, int64_t steps, const uint16_t* a, const uint16_t* b,
                             float* c, int64_t ldc, bool accumulate) {
  const int64_t b_row_bytes = int64_t{64} * nt;  // nt tiles of 16 column pairs
  if (rows > amx::kRows) {
    if (nt == 2) return ukernel_amx<2, 2>(steps, a, b, b_row_bytes, c, ldc, accumulate);
    return ukernel_amx<2, 1>(steps, a, b, b_row_bytes, c, ldc, accumulate);
  }
  if (nt == 2) return ukernel_amx<1, 2>(steps, a, b, b_row_bytes, c, ldc, accumulate);
  ukernel_amx<1, 1>(steps, a, b, b_row_bytes, c, ldc, accumulate);
}

// `rows` (<= 32) rows of A (element (i, k) at a[i * rs + k * cs]), columns [0, kc), as
// ceil(kc / 32) steps of two 16 x 32 tiles: (r, k) at ((k / 32) * 2 + r / 16) * 512 +
// (r % 16) * 32 + k % 32; zero past `rows` and kc.
inline void pack_a_panel_amx(const bfloat16* a, int64_t rs, int64_t cs, int rows, int64_t kc,
                             uint16_t* __restrict out) {
  const int64_t steps = ceil_div(kc, kAmxKStep);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t k0 = s * kAmxKStep, n = std::min<int64_t>(kAmxKStep, kc - k0);
    uint16_t* o = out + s * 2 * kAmxATile;
    for (int r = 0; r < kAmxMR; ++r, o += kAmxKStep) {
      int64_t j = 0;
      if (r < rows) {
        const bfloat16* row = a + r * rs + k0 * cs;
        if (cs == 1) {
          std::memcpy(o, row, static_cast<size_t>(n) * 2);
          j = n;
        } else {
          for (; j < n; ++j) o[j] = row[j * cs].bits;
        }
      }
      for (; j < kAmxKStep; ++j) o[j] = 0;
    }
  }
}

#endif

// Panels [p0, p1) of B (b(k, n) = b[k * rs + n * cs]) as float; panel p at
// out + (p - p0) * K * kNR (a whole B from p0 = 0, or one thread's columns: run_matmul's
// local B).
template <class T>
inline void pack_b_panels_f32(const T* b, int64_t rs, int64_t cs, int64_t K, int64_t N, int64_t p0,
                              int64_t p1, float* out) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t w = panel_width(p, N), n0 = p * kNR, cols = std::min<int64_t>(w, N - n0);
    float* o = out + (p - p0) * K * kNR;
    if (cs == 1) {  // rows of B are contiguous: copy a run of `cols` per k
      for (int64_t k = 0; k < K; ++k) {
        const T* row = b + k * rs + n0;
        float* orow = o + k * w;
        for (int64_t j = 0; j < cols; ++j) orow[j] = to_f32(row[j]);
        for (int64_t j = cols; j < w; ++j) orow[j] = 0.0f;
      }
      continue;
    }
    // Columns of B are runs (e.g. B = W^T, rs == 1): transpose 8 columns at a time.
    int64_t j = 0;
#ifdef COIL_GEMM_HAS_TRANSPOSE8
    if constexpr (std::is_same_v<T, float>) {
      if (rs == 1) {
        for (; j + 8 <= cols; j += 8) {
          const char* src = reinterpret_cast<const char*>(b + (n0 + j) * cs);
          int64_t k = transpose_rows8(src, cs * 4, K, o + j, w);
          for (; k < K; ++k) {
            for (int t = 0; t < 8; ++t) o[k * w + j + t] = b[(n0 + j + t) * cs + k];
          }
        }
      }
    }
#endif
    for (; j < w; ++j) {
      if (j < cols) {
        const T* col = b + (n0 + j) * cs;
        for (int64_t k = 0; k < K; ++k) o[k * w + j] = to_f32(col[k * rs]);
      } else {
        for (int64_t k = 0; k < K; ++k) o[k * w + j] = 0.0f;
      }
    }
  }
}

}  // namespace COIL_GEMM_ABI
}  // namespace coil::gemm::detail

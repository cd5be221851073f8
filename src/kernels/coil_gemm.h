// The matmul runtime of generated CPU kernels (CppMatmulKernel): C = A @ B for a batch of
// problems, A in float or bfloat16, B packed once ahead of time (a constant weight) or per call,
// f32 accumulation, and a caller-supplied epilogue that receives each finished block of C in
// float. Real code, compiled and tested for every ISA by tests/unit/gemm_runtime_test.cpp,
// embedded into libcoil like coil_vec.h. C++17 (generated code is built with -std=c++17).
//
// Usage (a linear layer y = relu(x @ W^T + bias), W: [N, K] row-major, packed once):
//   coil::gemm::Blocking blk = coil::gemm::choose_blocking(M, N, K, 4);
//   std::vector<float> wp(coil::gemm::packed_b_elements(K, N, blk));   // 64-byte aligned is best
//   coil::gemm::pack_b(w, /*rs=*/1, /*cs=*/K, K, N, blk, wp.data());   // b(k, n) = W(n, k)
//   coil::gemm::matmul(1, M, N, K, [&](int64_t) { return x; }, K, 1,
//                      [&](int64_t) { return wp.data(); }, blk,
//                      [&](int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
//                          const float* acc, int64_t ld) {
//                        for (int64_t i = m0; i < m1; ++i)
//                          for (int64_t j = n0; j < n1; ++j)
//                            y[i * N + j] = std::max(acc[(i - m0) * ld + (j - n0)] + bias[j], 0.f);
//                      });
//
// How it works (BLIS-style, with B packed ahead):
//   - B is packed into panels of kNR columns over all of K (the last panel only as wide as the
//     rest of N rounded up to a vector, kLanes): element (k, n) of panel q = n / kNR, of width
//     w, is at q * K * kNR + k * w + n % kNR; padding columns are zero. The layout does not
//     depend on the Blocking, so one packed weight serves any blocking. A B that changes every
//     call (an activation) is given as it is to matmul_raw_b and packed by the threads that
//     read it, each its own column panels into a buffer of its own (at most kLocalBBytes a
//     thread, else B is packed whole first): packed by one thread and read by the others, the
//     panels crossed cores dirty, and a 1x1 convolution over 49 pixels ran no faster on two
//     threads than on one.
//   - The output is cut into blocks of at most mc x nc, each computed by one thread: for each
//     kc slice of K, for each kMR-row panel of A (packed just before use, so it stays in L1),
//     the micro-kernel sweeps the nc / kNR B panels of the slice (the kc x nc slice of packed B
//     stays in L2), accumulating into the block's f32 scratch. After the last slice the
//     epilogue is called once on the block, by that thread, inside the parallel region (blocks
//     are disjoint, so an epilogue that writes only its block needs no synchronization).
//   - A thread walks its block rows in order and, within one, its column blocks; the block
//     row's packed A (all of K) is kept and reused by the later column blocks (when it takes
//     at most kKeepPackedABytes), so A is packed once per call.
//   - Threads: the (batch x row panels) x column panels grid is split into tm x tn rectangles
//     (tm * tn = threads, the split with the smallest largest share), balanced to within one
//     panel; one `omp parallel` per call, none below kParallelMinFlops or inside a parallel
//     region (a call from a parallel loop runs on its thread).
//   - Every element of C is one chain of multiply-adds in increasing k (kc slices continue the
//     chain through the f32 scratch exactly), whatever the blocking and the thread count:
//     results are bitwise identical for 1 and N threads.
//   - bf16 on vdpbf16ps: each step adds the two products of a (k, k+1) pair (exact in f32) to
//     the f32 sum; the instruction treats subnormal inputs and results as zero. Without it,
//     bf16 A and B are widened to float while packing and take the f32 path.
//   - bf16 on AMX (an -mamx-tile -mamx-bf16 build, the avx512_amx ISA): TDPBF16PS on 32 x 32
//     micro-tiles of four accumulator tiles (coil_gemm_kernels.h, coil_amx.h), B in 32-column
//     pair panels with K rounded up to 32, K sliced in whole steps of 32. Each instruction sums
//     16 pairs (even and odd products in two f32 lanes, then both into C), so the rounding
//     differs from vdpbf16ps's; still one fixed sequence per element, bitwise the same for 1
//     and N threads. COIL_AMX_EMULATE runs it on emulated tiles (tests on CPUs without AMX).
//   - Scratch (accumulator block + packed A) is per thread, thread_local, allocated by the first
//     call that needs it and grown only when a call needs more: no allocation per call in the
//     steady state (at most ~4.2 MiB per thread; freed when the module is unloaded).
//     matmul_scratch_bytes() is 0 accordingly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "coil_gemm_driver.h"
#include "coil_gemm_kernels.h"
#include "coil_types.h"

namespace coil::gemm {

/// Cache blocks: mc rows (a multiple of kMR), nc columns (a multiple of kNR), kc of K.
struct Blocking {
  int64_t mc, nc, kc;
};

/// The micro-tile of the compiled ISA, and its vector width in floats.
constexpr int kMR = detail::kMR;
constexpr int kNR = detail::kNR;
constexpr int kLanes = detail::kLanes;
/// True when bf16 matmuls run on vdpbf16ps (bf16 products, f32 sums); false when bf16 inputs
/// are widened to float while packing and run on the f32 kernel.
constexpr bool kNativeBf16 = COIL_GEMM_BF16_PAIRS != 0;
/// True when bf16 matmuls run on AMX tiles (then kNativeBf16 too).
constexpr bool kAmxBf16 = COIL_GEMM_HAS_AMX_KERNEL != 0;
/// The micro-tile of bf16 matmuls: kMR x kNR, or 32 x 32 on AMX.
#if COIL_GEMM_HAS_AMX_KERNEL
constexpr int kMRBf16 = detail::kAmxMR;
constexpr int kNRBf16 = detail::kAmxNR;
#else
constexpr int kMRBf16 = kMR;
constexpr int kNRBf16 = kNR;
#endif

// ---- cache sizes and blocking -------------------------------------------------------------
// kL1Bytes, kL2Bytes: per-core data caches of the target (see coil_gemm_driver.h).
using detail::kL1Bytes;
using detail::kL2Bytes;
using detail::kParallelMinFlops;
// K up to this is "short" for choose_blocking (one slice, L1-sized accumulator blocks).
constexpr int64_t kSmallK = 128;

#if COIL_GEMM_HAS_AMX_KERNEL
// AMX blocking. Every AMX CPU so far (Sapphire/Emerald/Granite Rapids) has 48 KiB L1d and
// 2 MiB L2 per core. kc: K per slice, a multiple of 32; the C tiles are loaded and stored once
// per slice, so a long slice amortizes them (512: 16 steps of 4 TDPBF16PS, ~1000 cycles, per 8
// tile loads/stores); the 32 x 512 A panel (32 KiB) stays in L1 while B streams from L2.
// Untuned: the lead measures on the device (bench/amx/run_device.sh); the macros are the knobs.
#ifndef COIL_GEMM_AMX_KC
#define COIL_GEMM_AMX_KC 512
#endif
#ifndef COIL_GEMM_AMX_L2_BYTES
#define COIL_GEMM_AMX_L2_BYTES (2 << 20)
#endif
inline Blocking choose_blocking_amx(int64_t M, int64_t N, int64_t K) {
  using detail::ceil_div;
  using detail::round_up;
  constexpr int64_t mr = detail::kAmxMR, nr = detail::kAmxNR, step = detail::kAmxKStep;
  const int64_t l2 = COIL_GEMM_AMX_L2_BYTES;
  const int64_t kc_max = std::max<int64_t>(step, COIL_GEMM_AMX_KC / step * step);
  K = std::max<int64_t>(K, 1);
  const int64_t kc = round_up(ceil_div(K, ceil_div(K, kc_max)), step);
  if (K <= kSmallK) {
    // Short K (one step or a few): as choose_blocking, keep the block in L1 for the epilogue.
    const int64_t nc = std::min(round_up(std::max<int64_t>(N, 1), nr), 4 * nr);
    return {std::min(mr * 2, round_up(std::max<int64_t>(M, 1), mr)), nc, kc};
  }
  // The kc x nc bf16 slice of B in ~30% of L2, the mc x nc f32 block in ~15%.
  const int64_t nc_max = std::max<int64_t>(nr, l2 * 3 / 10 / (kc * 2) / nr * nr);
  const int64_t nc = std::min(nc_max, round_up(std::max<int64_t>(N, 1), nr));
  const int64_t mc_max = std::max<int64_t>(mr, l2 * 3 / 20 / (nc * 4) / mr * mr);
  const int64_t mc = std::min(mc_max, round_up(std::max<int64_t>(M, 1), mr));
  return {mc, nc, kc};
}
#endif

/// Blocking for an M x N x K problem of `element_bytes`-byte inputs (4 f32, 2 bf16).
///   kc: the packed A panel (kMR x kc) takes half of L1, so it stays there while the B panels
///       stream past it (f32 AVX-512: 8 x 512 x 4 B = 16 KiB). K is cut into equal slices no
///       longer than that (a multiple of 8 elements, so bf16 pairs stay whole).
///   nc: the kc x nc slice of packed B takes about 30% of L2 (512 x 144 x 4 B = 288 KiB); every
///       row panel of the block re-reads it from there.
///   mc: the accumulator block (mc x nc f32) takes about 15% of L2 (272 x 144 x 4 B = 153 KiB).
///       Each B slice comes from L3 once per block (2 / mc bytes per flop).
/// Measured on Zen4 (bench/gemm_template_bench.cpp, 2048^3 f32, one thread): 8-10% faster than
/// the previous choice, mc 104 / nc 480 / kc 256 (B slice half of L2, A panel a quarter of L1).
inline Blocking choose_blocking(int64_t M, int64_t N, int64_t K, int element_bytes) {
  using detail::ceil_div;
  using detail::round_up;
#if COIL_GEMM_HAS_AMX_KERNEL
  if (element_bytes == 2) return choose_blocking_amx(M, N, K);
#endif
  const int64_t eb = element_bytes == 2 && kNativeBf16 ? 2 : 4;  // bytes per kernel element
  const int64_t kc_max = std::max<int64_t>(8, kL1Bytes / 2 / (kMR * eb) / 8 * 8);
  const int64_t nc_max =
      std::max<int64_t>(kNR, (kL2Bytes * 3 / 10 / (kc_max * eb) + kNR / 2) / kNR * kNR);
  const int64_t mc_max = std::max<int64_t>(kMR, kL2Bytes * 3 / 20 / (nc_max * 4) / kMR * kMR);
  K = std::max<int64_t>(K, 1);
  const int64_t kc = round_up(ceil_div(K, ceil_div(K, kc_max)), 8);
  if (K <= kSmallK) {
    // Short K: a tile is stored after few FMAs and the epilogue reads the block right away, so
    // the block should stay in L1 (a quarter of it: 8 x 288 x 4 B = 9 KiB). Measured 5-10%
    // faster than the large blocks at K = 16..64 (attention scores, tiny layers); the same at
    // K = 128.
    const int64_t nc = std::min(round_up(std::max<int64_t>(N, 1), kNR), 6 * int64_t{kNR});
    const int64_t mc = std::max<int64_t>(kMR, kL1Bytes / 4 / (nc * 4) / kMR * kMR);
    return {std::min(mc, round_up(std::max<int64_t>(M, 1), kMR)), nc, kc};
  }
  const int64_t nc = std::min(nc_max, round_up(std::max<int64_t>(N, 1), kNR));
  const int64_t mc = std::min(mc_max, round_up(std::max<int64_t>(M, 1), kMR));
  return {mc, nc, kc};
}

// ---- packed B ---------------------------------------------------------------------------

/// Floats of a packed f32 B (K x N).
inline int64_t packed_b_elements(int64_t K, int64_t N, const Blocking& /*blk*/) {
  return detail::round_up(N, kLanes) * K;
}

/// bfloat16 elements of a packed bf16 B (K x N). Without the bf16 kernel the packed form is
/// float (twice the bfloat16 count); treat the buffer as opaque bytes either way.
inline int64_t packed_b_elements_bf16(int64_t K, int64_t N, const Blocking& /*blk*/) {
#if COIL_GEMM_HAS_AMX_KERNEL
  // 32-column panels, the last rounded to 16 (a tile), K rounded to whole tile steps.
  return detail::round_up(N, 16) * detail::round_up(K, detail::kAmxKStep);
#else
  int64_t cols = detail::round_up(N, kLanes);
  return kNativeBf16 ? cols * detail::round_up(K, 2) : 2 * cols * K;
#endif
}

namespace detail {
inline namespace COIL_GEMM_ABI {

#if COIL_GEMM_BF16_PAIRS
// Panels [p0, p1) of NR columns as (k, k+1) pairs: element (k, n) of panel p, of width w, at
// p * Kp * NR + (k / 2) * 2 * w + 2 * (n % NR) + k % 2, Kp = K rounded up to KRound (2 for
// vdpbf16ps, 32 for AMX, whose B tiles are 16 pair rows), the rows past K zero. As 32-bit
// words: word (k / 2) * w + n % NR holds the pair. The AMX kernel reads the same layout as
// the vdpbf16ps one, only with 32-column panels (two 16-column tiles; the f32 kernel's 48
// would need three B tiles, leaving too few of the eight for a 2 x 2 block of accumulators).
template <int NR = kNR, int Lanes = kLanes, int KRound = 2>
inline void pack_b_panels_bf16_pairs(const bfloat16* b, int64_t rs, int64_t cs, int64_t K,
                                     int64_t N, int64_t p0, int64_t p1, uint16_t* out) {
  const int64_t Kp = round_up(K, KRound), kp_full = K / 2;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t w = panel_width_of<NR, Lanes>(p, N), n0 = p * NR;
    const int64_t cols = std::min<int64_t>(w, N - n0);
    uint16_t* o = out + p * Kp * NR;
    int64_t j = 0;
    if (rs == 1) {
      // Each column is a run of pairs: transpose 8 columns of 32-bit pairs at a time.
      for (; j + 8 <= cols; j += 8) {
        const bfloat16* col0 = b + (n0 + j) * cs;
        int64_t kp = transpose_rows8(reinterpret_cast<const char*>(col0), cs * 2, kp_full,
                                     reinterpret_cast<float*>(o) + j, w);
        for (; kp < kp_full; ++kp) {
          for (int t = 0; t < 8; ++t) {
            o[kp * 2 * w + 2 * (j + t)] = col0[t * cs + 2 * kp].bits;
            o[kp * 2 * w + 2 * (j + t) + 1] = col0[t * cs + 2 * kp + 1].bits;
          }
        }
        if (K % 2) {
          for (int t = 0; t < 8; ++t) {
            o[kp_full * 2 * w + 2 * (j + t)] = col0[t * cs + K - 1].bits;
            o[kp_full * 2 * w + 2 * (j + t) + 1] = 0;
          }
        }
        for (int64_t kp2 = ceil_div(K, 2); kp2 < Kp / 2; ++kp2) {  // AMX's padding rows
          for (int t = 0; t < 16; ++t) o[kp2 * 2 * w + 2 * j + t] = 0;
        }
      }
    }
    for (int64_t k = 0; k < Kp; ++k) {
      uint16_t* orow = o + (k / 2) * 2 * w + k % 2;
      const bfloat16* row = b + k * rs + n0 * cs;
      for (int64_t jj = j; jj < w; ++jj) {
        orow[2 * jj] = jj < cols && k < K ? row[jj * cs].bits : 0;
      }
    }
  }
}
#endif

}  // namespace COIL_GEMM_ABI
}  // namespace detail

/// Packs B (K x N, b(k, n) = b[k * rs + n * cs], any strides) for matmul into
/// packed_b_elements floats (64-byte aligned is best, any alignment works). The layout does
/// not depend on blk: a B packed once serves every Blocking. Serial (call it from an `omp for`
/// over batches to pack several B's in parallel), or pack_b_parallel for one large B packed at
/// run time. Row-major B (cs == 1) and W^T (rs == 1) are the fast paths.
inline void pack_b(const float* b, int64_t rs, int64_t cs, int64_t K, int64_t N,
                   const Blocking& /*blk*/, float* out) {
  detail::pack_b_panels_f32(b, rs, cs, K, N, 0, detail::ceil_div(N, kNR), out);
}

/// Packs a bf16 B for matmul_bf16 (into `packed_b_elements_bf16` elements). Serial.
inline void pack_b_bf16(const bfloat16* b, int64_t rs, int64_t cs, int64_t K, int64_t N,
                        const Blocking& /*blk*/, bfloat16* out) {
#if COIL_GEMM_HAS_AMX_KERNEL
  detail::pack_b_panels_bf16_pairs<detail::kAmxNR, 16, detail::kAmxKStep>(
      b, rs, cs, K, N, 0, detail::ceil_div(N, detail::kAmxNR), reinterpret_cast<uint16_t*>(out));
  return;
#endif
  int64_t panels = detail::ceil_div(N, kNR);
#if COIL_GEMM_HAS_BF16_KERNEL
  detail::pack_b_panels_bf16_pairs(b, rs, cs, K, N, 0, panels, reinterpret_cast<uint16_t*>(out));
#else
  detail::pack_b_panels_f32(b, rs, cs, K, N, 0, panels, reinterpret_cast<float*>(out));
#endif
}

/// pack_b / pack_b_bf16 with the panels split over an `omp parallel for` of its own (serial
/// when already inside a parallel region or when B is small). Same output.
inline void pack_b_parallel(const float* b, int64_t rs, int64_t cs, int64_t K, int64_t N,
                            const Blocking& /*blk*/, float* out) {
  int64_t panels = detail::ceil_div(N, kNR);
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 16))
  for (int64_t p = 0; p < panels; ++p)
    detail::pack_b_panels_f32(b, rs, cs, K, N, p, p + 1, out + p * K * kNR);
}

inline void pack_b_bf16_parallel(const bfloat16* b, int64_t rs, int64_t cs, int64_t K, int64_t N,
                                 const Blocking& /*blk*/, bfloat16* out) {
  int64_t panels = detail::ceil_div(N, kNRBf16);
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 16))
  for (int64_t p = 0; p < panels; ++p) {
#if COIL_GEMM_HAS_AMX_KERNEL
    detail::pack_b_panels_bf16_pairs<detail::kAmxNR, 16, detail::kAmxKStep>(
        b, rs, cs, K, N, p, p + 1, reinterpret_cast<uint16_t*>(out));
#elif COIL_GEMM_HAS_BF16_KERNEL
    detail::pack_b_panels_bf16_pairs(b, rs, cs, K, N, p, p + 1, reinterpret_cast<uint16_t*>(out));
#else
    detail::pack_b_panels_f32(b, rs, cs, K, N, p, p + 1,
                              reinterpret_cast<float*>(out) + p * K * kNR);
#endif
  }
}

// ---- packed A ---------------------------------------------------------------------------

/// Floats of an f32 A (M x K) packed ahead by pack_a_all: every kMR-row panel over all of K.
inline int64_t packed_a_elements(int64_t M, int64_t K, const Blocking& /*blk*/) {
  return detail::ceil_div(std::max<int64_t>(M, 1), kMR) * std::max<int64_t>(K, 1) * kMR;
}

/// Packs A (M x K, a(i, k) = a[i * rs + k * cs]) for matmul_packed_a into packed_a_elements
/// floats: panel p (rows [p * kMR, p * kMR + kMR)) at p * K * kMR, element (i, k) at
/// k * kMR + i % kMR, rows past M zero. It is the layout run_matmul packs A into per call (a
/// panel's kc slice at pc * kMR), so the products are bit for bit matmul's. For a constant A,
/// e.g. the weight W of a 1x1 convolution W[OC, C] @ x[C, H * W], packed once when the module is
/// loaded: per call that packing read and wrote all of W, as much memory traffic as the
/// product's own reads of W in the convolutions of mobilenet_v2's 7x7 and 14x14 stages.
inline void pack_a_all(const float* a, int64_t rs, int64_t cs, int64_t M, int64_t K,
                       const Blocking& blk, float* out) {
  std::fill(out, out + packed_a_elements(M, K, blk), 0.0f);
  if (K <= 0) return;
  for (int64_t p = 0; p * kMR < M; ++p) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, M - p * kMR));
    detail::pack_a_panel_f32(a + p * kMR * rs, rs, cs, rows, K, out + p * K * kMR);
  }
}

/// The calling thread's buffer for a B packed per call, at least `bytes`, 64-byte aligned: one
/// buffer per thread shared by every template kernel of the module (grown, never shrunk; freed
/// when the module is unloaded). A buffer per kernel (34 in mobilenet_v2) was cold in the caches
/// at every call, so packing paid a miss per line it wrote: the 16 -> 96 expand conv at
/// 112x112 took 0.54-0.63 ms inside the model against 0.32 ms alone.
inline void* packed_b_scratch(int64_t bytes) {
  return detail::thread_scratch_slot<1>(bytes);
}

/// Per-call scratch the caller must provide: none (matmul keeps per-thread thread_local
/// buffers that grow to the largest block seen and are reused by later calls).
inline int64_t matmul_scratch_bytes(int64_t /*M*/, int64_t /*N*/, int64_t /*K*/,
                                    const Blocking& /*blk*/, int /*element_bytes*/) {
  return 0;
}

/// C = A @ B for `batch` problems; see the top of this file. a_of(b): `const float*` of batch
/// b's A, element (i, k) at [i * a_rs + k * a_cs]; packed_b_of(b): `const float*` from pack_b.
/// epilogue(b, m0, m1, n0, n1, acc, ld) once per block, acc[(i - m0) * ld + (j - n0)] = C(b, i, j).
template <class AOf, class BOf, class Epilogue>
void matmul(int64_t batch, int64_t M, int64_t N, int64_t K, AOf&& a_of, int64_t a_rs, int64_t a_cs,
            BOf&& packed_b_of, const Blocking& blk, Epilogue&& epilogue) {
  auto a = [&](int64_t b) -> const float* { return a_of(b); };
  auto pb = [&](int64_t b) -> const void* { return packed_b_of(b); };
  detail::run_matmul<detail::PathF32<float>>(batch, M, N, K, a, a_rs, a_cs, nullptr, pb, blk.mc,
                                             blk.nc, blk.kc, epilogue, nullptr);
}

/// matmul with A packed ahead by pack_a_all (the same A for every batch): A is read from
/// `packed_a` in place, never packed per call. Bit for bit matmul's result.
template <class BOf, class Epilogue>
void matmul_packed_a(int64_t batch, int64_t M, int64_t N, int64_t K, const float* packed_a,
                     BOf&& packed_b_of, const Blocking& blk, Epilogue&& epilogue) {
  auto a = [&](int64_t) -> const float* { return nullptr; };
  auto pb = [&](int64_t b) -> const void* { return packed_b_of(b); };
  detail::run_matmul<detail::PathF32<float>>(batch, M, N, K, a, 0, 0, packed_a, pb, blk.mc, blk.nc,
                                             blk.kc, epilogue, nullptr);
}

/// matmul with B as it is (b_of(b): `const float*` of batch b's B, element (k, n) at
/// [k * b_rs + n * b_cs]), packed during the call by the threads that read it: each thread
/// packs the column panels it computes into a buffer of its own (detail::kLocalBBytes at
/// most, else B is packed whole first). For a B that changes every call (an activation), in
/// place of pack_b_parallel into packed_b_scratch then matmul. `packed_a`: A packed by
/// pack_a_all, or null to read A through a_of as matmul does. Bit for bit matmul's result.
template <class AOf, class BOf, class Epilogue>
void matmul_raw_b(int64_t batch, int64_t M, int64_t N, int64_t K, const float* packed_a, AOf&& a_of,
                  int64_t a_rs, int64_t a_cs, BOf&& b_of, int64_t b_rs, int64_t b_cs,
                  const Blocking& blk, Epilogue&& epilogue) {
  auto a = [&](int64_t b) -> const float* { return a_of(b); };
  auto pb = [](int64_t) -> const void* { return nullptr; };
  auto raw = [&](int64_t b) -> const float* { return b_of(b); };
  const detail::RawB rb{raw, b_rs, b_cs};
  detail::run_matmul<detail::PathF32<float>>(batch, M, N, K, a, a_rs, a_cs, packed_a, pb, blk.mc,
                                             blk.nc, blk.kc, epilogue, &rb);
}

/// matmul for bfloat16 A (`const bfloat16*`) and B packed by pack_b_bf16, summed in f32.
template <class AOf, class BOf, class Epilogue>
void matmul_bf16(int64_t batch, int64_t M, int64_t N, int64_t K, AOf&& a_of, int64_t a_rs,
                 int64_t a_cs, BOf&& packed_b_of, const Blocking& blk, Epilogue&& epilogue) {
  auto a = [&](int64_t b) -> const bfloat16* { return a_of(b); };
  auto pb = [&](int64_t b) -> const void* { return packed_b_of(b); };
#if COIL_GEMM_HAS_AMX_KERNEL
  detail::run_matmul<detail::PathAmx>(batch, M, N, K, a, a_rs, a_cs, nullptr, pb, blk.mc, blk.nc,
                                      blk.kc, epilogue, nullptr);
#elif COIL_GEMM_HAS_BF16_KERNEL
  detail::run_matmul<detail::PathBf16>(batch, M, N, K, a, a_rs, a_cs, nullptr, pb, blk.mc, blk.nc,
                                       blk.kc, epilogue, nullptr);
#else
  detail::run_matmul<detail::PathF32<bfloat16>>(batch, M, N, K, a, a_rs, a_cs, nullptr, pb, blk.mc,
                                                blk.nc, blk.kc, epilogue, nullptr);
#endif
}

}  // namespace coil::gemm

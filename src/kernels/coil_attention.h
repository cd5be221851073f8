// The attention kernels of generated CPU code (an `attention` node and its gradient;
// lower/lower_attention.cpp): y = softmax(q @ k^T * scale [+ mask]) @ v computed as a blocked
// "flash" forward pass, the rows' logsumexp, and the blocked backward (FlashAttention-2's) for
// q, k or v, so that the [Tq, Tk] score matrix never exists: memory is O(T) (the inputs and the
// output) plus a few small blocks per thread. Real code, compiled and tested for every ISA by
// tests/correctness/attention_test.cpp and attention_backward_kernel_test.cpp, embedded into
// libcoil like coil_gemm.h. C++17.
//
// Usage (q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] through (batch, head, row)
// strides with contiguous rows, y [B, H, Tq, Dv] contiguous; a mask M is bool (false: -inf) or
// float (added), addressed through Params::mask_strides, 0 on broadcast dims):
//   coil::attention::Params p{B, H, Hkv, Tq, Tk, D, Dv, 0.125f, /*causal=*/true,
//                             coil::attention::MaskKind::none, {0, 0, 0, 0},
//                             {H * Tq * D, Tq * D, D}, {Hkv * Tk * D, Tk * D, D},
//                             {Hkv * Tk * Dv, Tk * Dv, Dv}};
//   coil::attention::forward(p, q, k, v, static_cast<const float*>(nullptr), y);
// and for training, with lse [B, H, Tq] f32 and dout = dL/dy [B, H, Tq, Dv] contiguous, each
// gradient dense (dq like q, dk like k, dv like v, contiguous):
//   coil::attention::logsumexp(p, q, k, mask, lse);  (or forward(p, q, k, v, mask, y, lse):
//                                                      y and lse from one pass)
//   coil::attention::backward(p, coil::attention::Grad::q, q, k, v, y, dout, lse, mask, dq);
//   coil::attention::backward_kv(p, q, k, v, y, dout, lse, mask, dk, dv);  (one pass for both)
//   (or backward with Grad::k into dk, Grad::v into dv, one call per gradient; Grad::v does not
//   read y)
//
// How it works (FlashAttention-2's forward loop order, one thread per query block):
//   - Tasks are (batch, head, block of kBlockRows query rows), spread over OpenMP threads
//     (dynamic: causal blocks differ in work). Each output row is computed by one thread in a
//     fixed order of key blocks, so results do not depend on the thread count. When the tasks
//     are few and the keys many (decoding), the keys are split into chunks too, each chunk's
//     rows left unnormalized with their running max and sum, then combined (kSplitMinTasks).
//   - Few query rows per kv head (decoding: H / Hkv heads x Tq rows <= kDecodeMaxRows) take
//     the decode path instead (coil_attention_decode.h): one task per (batch, kv head) for
//     every row of its group, dot products with K's rows and O += P V with V's rows read in
//     place (no packing, each element of K and V read once per task), then the same per-row
//     softmax steps, key chunks and combine as below.
//   - For each block of kBlockKeys keys: K's block is transposed into kt [D][kBlockKeys] (the
//     ISA's register transpose), so that scores S = Q K^T are broadcast-FMAs along the keys:
//     a register tile of kMicroRows rows x 4 vectors, the shape of the matmul micro-kernel.
//     Then per row: S *= scale, the mask, causal -inf; the online softmax (running max m and
//     sum l; the earlier output rescaled by exp(m_old - m_new)); O += P V as broadcast-FMAs
//     along Dv. At the end y = O / l, rounded once to y's dtype.
//   - A row whose keys are all masked keeps m = -inf and l = 0 (exp is taken against 0, not
//     -inf, so no NaN appears on the way) and ends as 0 / 0 = NaN: what softmax of all -inf
//     gives in coil's reference. With Tk = 0 the result is zeros (the sum over no keys).
//   - bf16/f16 inputs are widened to f32 while packing; everything accumulates in f32.
//   - Scratch per thread: Q, K^T, V blocks, the score block and the output block: about
//     (kBlockRows + kBlockKeys) * (D + Dv) floats, allocated once per call per thread.
//   - Modules of the avx512/avx2 ISAs link the instances of forward, logsumexp and backward
//     from libcoil_vmath (src/kernels/vmath/attention_*.cpp) rather than compile them.
//
// logsumexp is the forward's query loop without the values: lse = m + log(l) of the same
// running max and sum (-inf for a row that sees no key).
//
// How backward works (FlashAttention-2's backward: P is recomputed from lse block by block):
//   P = exp(S - lse), dP = dO V^T, dS = P (dP - delta) with delta = rowsum(dO * O) (computed
//   once per call, [B, H, Tq] f32), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (s already
//   holds the scale, so dL/dq and dL/dk take it once more; a float mask has none).
//   - Grad::q: tasks (batch, head, block of kBlockRows query rows), as forward. For each key
//     block the row sees (causal blocks past the last visible key skipped): K^T and V^T packed
//     as forward packs K^T, S = Q K^T and dP = dO V^T with the same score micro-kernel, then
//     per row finish_scores, P and dS, and dQ += dS K with the values micro-kernel over K's
//     block widened by rows.
//   - Grad::k and Grad::v: tasks (batch, kv head, block of kBlockKeys keys), K^T (and V^T for
//     dK) packed once; for each query head of the group, query rows kBlockKeys at a time
//     (causal: from the first row that sees the block's first key): S, P (and dP, dS) as
//     above, then P or dS transposed in registers into [key][query] rows so that the values
//     micro-kernel accumulates dV += P^T dO or dK += dS^T Q. Grad::v skips dP and delta;
//     backward_kv computes P and dS once for both (the scores are not recomputed for dV).
//   - Each gradient row is summed by one thread in a fixed order (no atomics): results do not
//     depend on the thread count. The gradients accumulate in f32 and are rounded once.
//   - A row that sees no key (lse = -inf) has P = 0 and no gradient: its dq row is zero and
//     it adds nothing to dk and dv, whatever its dout and its (NaN) output hold. Any other NaN
//     or inf propagates.
//   - Scratch per thread, allocated once per call: q and dO rows, K^T and V^T blocks, K's
//     block, the S/P and dP/dS blocks, one transposed block and the task's gradient rows: five
//     blocks of 64 rows of D or Dv floats and three of 64 x kBlockKeys (120 KiB at D = Dv = 64
//     on AVX-512).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "coil_vec.h"

#if defined(COIL_CPU_AVX512) || defined(COIL_CPU_AVX2)
#include <immintrin.h>
#endif

namespace coil::attention {

enum class MaskKind { none, boolean, additive };

/// Which input attention's backward differentiates.
enum class Grad { q, k, v };

/// The sizes and options of one attention call.
struct Params {
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  float scale;  // the factor of q @ k^T
  bool causal;  // query i sees keys j <= i + kv_len - q_len (bottom-right aligned)
  MaskKind mask;
  int64_t mask_strides[4];  // elements per step of batch, head, query, key (0: broadcast)
  /// Elements per step of batch, head and row of q, k, v (each row's D or Dv elements are
  /// contiguous); the contiguous layout is {H * T * D, T * D, D}.
  int64_t q_strides[3], k_strides[3], v_strides[3];
};

// The code differs per ISA, so it lives in an inline namespace named after it (as coil_gemm's):
// libcoil_vmath holds forward compiled for avx512 and avx2 (src/kernels/vmath/attention_*.cpp)
// side by side, and a module of those ISAs links its own (COIL_GEMM_PRECOMPILED, below).
#if defined(COIL_CPU_AVX512)
#define COIL_ATTENTION_ABI avx512
#elif defined(COIL_CPU_AVX2)
#define COIL_ATTENTION_ABI avx2
#else
#define COIL_ATTENTION_ABI portable
#endif
inline namespace COIL_ATTENTION_ABI {

namespace detail {

using V = Vectorized<float>;
constexpr int kL = V::size();
/// Keys per block: four vectors, one register tile row of the score micro-kernel.
constexpr int64_t kBlockKeys = 4 * kL;
/// Query rows per task: enough to amortize packing a K/V block over 64 rows of FMAs.
constexpr int64_t kBlockRows = 64;
/// Rows of the register tiles: 4 x 4 accumulators fit AVX-512's 32 registers, 2 x 4 AVX2's 16.
constexpr int kMicroRows = kL >= 16 ? 4 : 2;
/// Split keys ("flash-decoding"): with fewer (batch, head, query block) tasks than
/// kSplitMinTasks and many keys (decoding: one query row against a long cache, where B x H
/// tasks leave threads idle), the keys are cut into chunks of at least kSplitMinKeys, each
/// chunk a task of its own, and a second pass combines the chunks' rows. The cut depends on
/// the sizes only, never on the thread count, so results stay the same for every count.
constexpr int64_t kSplitMinTasks = 32;
constexpr int64_t kSplitMinKeys = 512;
constexpr int64_t kMaxSplits = 16;
/// Floats after a row's outputs in a split's partial result: its running max and sum.
constexpr int64_t kPartExtra = 2;

/// a * b + c in one rounding where the ISA has FMA (generated code is built with
/// -ffp-contract=off, so a * b + c would be two instructions).
inline V fmadd(const V& a, const V& b, const V& c) {
#if defined(COIL_CPU_AVX512)
  return _mm512_fmadd_ps(a.reg(), b.reg(), c.reg());
#elif defined(COIL_CPU_AVX2)
  return _mm256_fmadd_ps(a.reg(), b.reg(), c.reg());
#else
  return a * b + c;
#endif
}

inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

/// s[r][0..kBlockKeys) = sum_{d < D} q[r][d] * kt[d][.] for R rows (q rows ldq apart).
template <int R>
inline void block_scores(const float* q, int64_t ldq, int64_t D, const float* kt, float* s) {
  V acc[R][4];
  for (int64_t d = 0; d < D; ++d) {
    V kv[4];
    for (int c = 0; c < 4; ++c) kv[c] = V::loadu(kt + d * kBlockKeys + c * kL);
    for (int r = 0; r < R; ++r) {
      const V qv(q[r * ldq + d]);
      for (int c = 0; c < 4; ++c) acc[r][c] = fmadd(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c].store(s + r * kBlockKeys + c * kL);
}

/// o[r][0 .. C * kL) += sum_{j < nk} p[r][j] * v[j][.] for R rows (o rows ldo apart, v rows
/// ldv apart, widened to f32 as they are loaded); only `last` elements of v's last vector are
/// read (the rest count as zero), so that rows of V read in place need no padding.
template <int R, int C, typename T>
inline void block_values(const float* p, const T* v, int64_t ldv, int64_t nk, float* o, int64_t ldo,
                         int64_t last = kL) {
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = V::loadu(o + r * ldo + c * kL);
  for (int64_t j = 0; j < nk; ++j) {
    V vv[C];
    for (int c = 0; c + 1 < C; ++c) vv[c] = V::loadu(v + j * ldv + c * kL);
    vv[C - 1] = V::loadu(v + j * ldv + (C - 1) * kL, last);
    for (int r = 0; r < R; ++r) {
      const V pv(p[r * kBlockKeys + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = fmadd(pv, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c].store(o + r * ldo + c * kL);
}

/// block_values over columns [0, n) of R rows, four vectors at a time, then the rest.
template <int R, typename T>
inline void block_values_row_group(const float* p, const T* v, int64_t ldv, int64_t nk, float* o,
                                   int64_t ldo, int64_t n) {
  int64_t c0 = 0;
  for (; c0 + 4 * kL <= n; c0 += 4 * kL) block_values<R, 4>(p, v + c0, ldv, nk, o + c0, ldo);
  if (c0 == n) return;
  const int64_t vectors = (n - c0 + kL - 1) / kL, last = n - c0 - (vectors - 1) * kL;
  switch (vectors) {
    case 4:
      block_values<R, 4>(p, v + c0, ldv, nk, o + c0, ldo, last);
      break;
    case 3:
      block_values<R, 3>(p, v + c0, ldv, nk, o + c0, ldo, last);
      break;
    case 2:
      block_values<R, 2>(p, v + c0, ldv, nk, o + c0, ldo, last);
      break;
    default:
      block_values<R, 1>(p, v + c0, ldv, nk, o + c0, ldo, last);
      break;
  }
}

/// Rows [0, rows) of a block, kMicroRows at a time, then the remainder one row at a time.
template <typename F1, typename FR>
inline void for_row_groups(int64_t rows, FR&& group, F1&& single) {
  int64_t r = 0;
  for (; r + kMicroRows <= rows; r += kMicroRows) group(r);
  for (; r < rows; ++r) single(r);
}

/// S = Q K^T: s[r][0..kBlockKeys) for `rows` rows of q (ldq apart) against a packed K^T block.
inline void scores_of_rows(const float* q, int64_t ldq, int64_t D, int64_t rows, const float* kt,
                           float* s) {
  for_row_groups(
      rows,
      [&](int64_t r) { block_scores<kMicroRows>(q + r * ldq, ldq, D, kt, s + r * kBlockKeys); },
      [&](int64_t r) { block_scores<1>(q + r * ldq, ldq, D, kt, s + r * kBlockKeys); });
}

/// O += P V: o[r][0..n) += sum_{j < nk} p[r][j] * v[j][0..n) for `rows` rows (p rows
/// kBlockKeys apart; o rows ldo apart, ldo a multiple of the lanes; v rows ldv apart, f32 or
/// widened as loaded; n = ldo for V packed with padding, else V's row length).
template <typename T>
inline void values_of_rows(const float* p, const T* v, int64_t ldv, int64_t nk, int64_t rows,
                           float* o, int64_t ldo, int64_t n) {
  for_row_groups(
      rows,
      [&](int64_t r) {
        block_values_row_group<kMicroRows>(p + r * kBlockKeys, v, ldv, nk, o + r * ldo, ldo, n);
      },
      [&](int64_t r) {
        block_values_row_group<1>(p + r * kBlockKeys, v, ldv, nk, o + r * ldo, ldo, n);
      });
}

/// kt[D][kBlockKeys] = the transpose of nk rows of src (ld apart), widened to f32 (the ISA's
/// register transpose), keys past nk zero; rows [D, round_up(D, kL)) of kt are scratch.
template <typename T>
inline void pack_transposed(const T* src, int64_t ld, int64_t nk, int64_t D, float* kt) {
  for (int64_t jj = 0; jj < nk; jj += kL)
    for (int64_t d = 0; d < D; d += kL)
      transpose_tile(src + jj * ld + d, ld, kt + d * kBlockKeys + jj, kBlockKeys,
                     std::min<int64_t>(kL, nk - jj), std::min<int64_t>(kL, D - d));
  for (int64_t jj = round_up(nk, kL); jj < kBlockKeys; jj += kL)
    for (int64_t d = 0; d < D; ++d) V().store(kt + d * kBlockKeys + jj);
}

/// One thread's blocks, sized for the call. The decode path (coil_attention_decode.h) reads
/// K and V in place and needs no kt or v (`packs` false).
struct Scratch {
  int64_t ldq, ldv;  // row lengths of q and of v/o (D and Dv rounded up to the lanes)
  std::vector<float> q, kt, v, s, o, m, l;
  Scratch(int64_t D, int64_t Dv, bool packs = true)
      : ldq(round_up(std::max<int64_t>(D, 1), kL)),
        ldv(round_up(std::max<int64_t>(Dv, 1), kL)),
        q(static_cast<size_t>(kBlockRows * ldq)),
        kt(packs ? static_cast<size_t>(ldq * kBlockKeys) : 0),
        v(packs ? static_cast<size_t>(kBlockKeys * ldv) : 0),
        s(static_cast<size_t>(kBlockRows * kBlockKeys)),
        o(static_cast<size_t>(kBlockRows * ldv)),
        m(static_cast<size_t>(kBlockRows)),
        l(static_cast<size_t>(kBlockRows)) {}
};

/// Widens `n` elements of a row into floats, zeros after them up to `padded` (>= n); writes
/// nothing at or past dst[padded].
template <typename T>
inline void widen_row(const T* src, int64_t n, float* dst, int64_t padded) {
  int64_t d = 0;
  for (; d < n; d += kL) V::loadu(src + d, n - d).store(dst + d, padded - d);
  for (; d < padded; d += kL) V().store(dst + d, padded - d);
}

/// Row i of head h of batch b of the mask (null without one).
template <typename M>
inline const M* mask_row(const Params& p, const M* mask, int64_t b, int64_t h, int64_t i) {
  if (mask == nullptr) return nullptr;
  return mask + b * p.mask_strides[0] + h * p.mask_strides[1] + i * p.mask_strides[2];
}

/// The scores of row r (query i) against keys [j0, j0 + nk): scale, mask, causal; -inf past nk.
template <typename M>
inline void finish_scores(const Params& p, const M* mask_row, int64_t i, int64_t j0, int64_t nk,
                          float* s) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  const V scale(p.scale);
  for (int c = 0; c < 4; ++c) (V::loadu(s + c * kL) * scale).store(s + c * kL);
  if (mask_row != nullptr) {
    const int64_t sj = p.mask_strides[3];
    if constexpr (std::is_same_v<M, float>) {
      if (sj == 1) {
        for (int64_t c = 0; c * kL < nk; ++c)
          (V::loadu(s + c * kL) + V::loadu(mask_row + j0 + c * kL, nk - c * kL)).store(s + c * kL);
      } else {
        for (int64_t j = 0; j < nk; ++j) s[j] += mask_row[(j0 + j) * sj];
      }
    } else if (sj == 1) {
      // A vector of bools widened to 0/1 and a blend: a branch per key (what the compiler
      // makes of a scalar loop) is mispredicted at a causal or padding mask's edge and on
      // every random key, twice the unmasked kernel's time at T = 256.
      const V minus_inf(kMinusInf);
      for (int64_t c = 0; c * kL < nk; ++c) {
        const V masked = V::loadu(mask_row + j0 + c * kL, nk - c * kL) == V(0.0f);
        V::blendv(V::loadu(s + c * kL), minus_inf, masked).store(s + c * kL);
      }
    } else {
      for (int64_t j = 0; j < nk; ++j)
        if (!mask_row[(j0 + j) * sj]) s[j] = kMinusInf;
    }
  }
  if (p.causal) {
    const int64_t last = i + p.kv_len - p.q_len;  // the last key query i sees
    for (int64_t j = std::max<int64_t>(last + 1 - j0, 0); j < nk; ++j) s[j] = kMinusInf;
  }
  for (int64_t j = nk; j < kBlockKeys; ++j) s[j] = kMinusInf;
}

/// The online softmax step of one row: folds the block's scores into (m, l), turns them into
/// probabilities in place, and returns the factor that rescales the row's earlier output.
inline float online_softmax(float* s, float& m, float& l) {
  V mx = V::loadu(s);
  for (int c = 1; c < 4; ++c) mx = mx.maximum(V::loadu(s + c * kL));
  const float block_max = mx.reduce_max();
  const float m_new =
      std::isnan(m) || std::isnan(block_max) ? m + block_max : std::max(m, block_max);
  // Against 0 while every score so far is -inf: exp(-inf - 0) = 0, not exp(-inf + inf) = NaN.
  const float base = m_new == -std::numeric_limits<float>::infinity() ? 0.0f : m_new;
  V sum;
  for (int c = 0; c < 4; ++c) {
    V e = (V::loadu(s + c * kL) - V(base)).exp();
    e.store(s + c * kL);
    sum = sum + e;
  }
  const float alpha = std::exp(m - base);
  l = l * alpha + sum.reduce_add();
  m = m_new;
  return alpha;
}

/// A task's rows before its first key block: O = 0, running max m = -inf, running sum l = 0.
inline void start_rows(Scratch& w, int64_t rows) {
  std::fill(w.o.begin(), w.o.begin() + rows * w.ldv, 0.0f);
  std::fill(w.m.begin(), w.m.begin() + rows, -std::numeric_limits<float>::infinity());
  std::fill(w.l.begin(), w.l.begin() + rows, 0.0f);
}

/// Between a key block's scores and its O += P V: for each row r (query query[r], mask row
/// mask_rows[r]) scale, mask and causal limit (finish_scores), then the online softmax, which
/// turns w.s into probabilities, and the row's earlier output rescaled.
template <typename M>
inline void softmax_rows(const Params& p, int64_t rows, const int64_t* query,
                         const M* const* mask_rows, int64_t j0, int64_t nk, Scratch& w) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = w.s.data() + r * kBlockKeys;
    finish_scores(p, mask_rows[r], query[r], j0, nk, s);
    const float alpha = online_softmax(s, w.m[static_cast<size_t>(r)], w.l[static_cast<size_t>(r)]);
    if (alpha != 1.0f) {
      float* o = w.o.data() + r * w.ldv;
      for (int64_t d = 0; d < w.ldv; d += kL) (V::loadu(o + d) * V(alpha)).store(o + d);
    }
  }
}

/// A task's rows after its last key block. With `part` null they are finished into y's rows
/// `yb` (Dv apart): O / l rounded once, zeros when Tk = 0, and their logsumexp m + log(l) into
/// `lse_rows` when not null; else (split keys) each row leaves its unnormalized output, running
/// max and sum in `part` (kPartExtra floats after ldv outputs per row) for combine_parts.
template <typename T>
void finish_rows(const Scratch& w, int64_t rows, int64_t Dv, int64_t Tk, T* yb, float* part,
                 float* lse_rows) {
  if (part != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = part + r * (w.ldv + kPartExtra);
      std::copy(w.o.begin() + r * w.ldv, w.o.begin() + (r + 1) * w.ldv, dst);
      dst[w.ldv] = w.m[static_cast<size_t>(r)];
      dst[w.ldv + 1] = w.l[static_cast<size_t>(r)];
    }
    return;
  }
  if (lse_rows != nullptr)  // lse_block's expression: the same bits as logsumexp's
    for (int64_t r = 0; r < rows; ++r)
      lse_rows[r] = w.m[static_cast<size_t>(r)] + std::log(w.l[static_cast<size_t>(r)]);
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = w.o.data() + r * w.ldv;
    T* out = yb + r * Dv;
    if (Tk == 0) {  // softmax over no keys, then a sum over no keys: zeros
      for (int64_t d = 0; d < Dv; d += kL) V().store(out + d, Dv - d);
      continue;
    }
    const V inv_l(1.0f / w.l[static_cast<size_t>(r)]);
    for (int64_t d = 0; d < Dv; d += kL) (V::loadu(o + d) * inv_l).store(out + d, Dv - d);
  }
}

/// One task of the blocked path: query rows [i0, i0 + rows) of head h of batch b over keys
/// [key_lo, key_hi) (key_lo a multiple of kBlockKeys), finished by finish_rows into y's rows
/// `yb`, `part` or `lse_rows`.
template <typename T, typename M>
void query_block(const Params& p, const T* q, const T* k, const T* v, const M* mask, int64_t b,
                 int64_t h, int64_t i0, int64_t rows, Scratch& w, int64_t key_lo, int64_t key_hi,
                 T* yb, float* part, float* lse_rows) {
  const int64_t D = p.head_dim, Dv = p.value_dim, Tk = p.kv_len;
  const int64_t hk = h / (p.heads / p.kv_heads);
  const int64_t ldq = p.q_strides[2], ldk = p.k_strides[2], ldv = p.v_strides[2];
  const T* qb = q + b * p.q_strides[0] + h * p.q_strides[1] + i0 * ldq;
  const T* kb = k + b * p.k_strides[0] + hk * p.k_strides[1];
  const T* vb = v + b * p.v_strides[0] + hk * p.v_strides[1];
  int64_t query[kBlockRows];
  const M* mask_rows[kBlockRows];
  for (int64_t r = 0; r < rows; ++r) {
    widen_row(qb + r * ldq, D, w.q.data() + r * D, D);
    query[r] = i0 + r;
    mask_rows[r] = mask_row(p, mask, b, h, i0 + r);
  }
  start_rows(w, rows);
  // Causal: keys past the last row's last visible key are skipped whole.
  int64_t key_end = std::min(Tk, key_hi);
  if (p.causal) key_end = std::clamp<int64_t>(i0 + rows + Tk - p.q_len, 0, key_end);
  for (int64_t j0 = key_lo; j0 < key_end; j0 += kBlockKeys) {
    const int64_t nk = std::min<int64_t>(kBlockKeys, key_end - j0);
    // K^T block [D][kBlockKeys] (keys past nk zero) and V block [nk][ldv] in f32.
    pack_transposed(kb + j0 * ldk, ldk, nk, D, w.kt.data());
    for (int64_t j = 0; j < nk; ++j)
      widen_row(vb + (j0 + j) * ldv, Dv, w.v.data() + j * w.ldv, w.ldv);
    scores_of_rows(w.q.data(), D, D, rows, w.kt.data(), w.s.data());
    softmax_rows(p, rows, query, mask_rows, j0, nk, w);
    values_of_rows(w.s.data(), w.v.data(), w.ldv, nk, rows, w.o.data(), w.ldv, w.ldv);
  }
  finish_rows(w, rows, Dv, Tk, yb, part, lse_rows);
}

}  // namespace detail

namespace detail {

/// Task t of the (batch, head, block of kBlockRows query rows) tasks, `blocks` blocks per head:
/// sets b, h and the block's first row i0; returns its rows.
inline int64_t query_task(const Params& p, int64_t blocks, int64_t t, int64_t& b, int64_t& h,
                          int64_t& i0) {
  const int64_t blk = t % blocks, bh = t / blocks;
  b = bh / p.heads;
  h = bh % p.heads;
  i0 = blk * kBlockRows;
  return std::min<int64_t>(kBlockRows, p.q_len - i0);
}

/// Keys per chunk when the keys are split (kv_len when not).
inline int64_t key_chunk(int64_t tasks, int64_t kv_len) {
  if (tasks >= kSplitMinTasks || kv_len < 2 * kSplitMinKeys) return std::max<int64_t>(kv_len, 1);
  const int64_t splits =
      std::min<int64_t>({kv_len / kSplitMinKeys, (kSplitMinTasks + tasks - 1) / tasks, kMaxSplits});
  if (splits <= 1) return kv_len;
  return round_up((kv_len + splits - 1) / splits, kBlockKeys);
}

/// Rows [0, rows) of one task from its `splits` partial results (`part`, each `rows_cap`
/// rows of ldv + kPartExtra floats): the softmax's rescaling across chunks, then y = O / L
/// (and the rows' logsumexp M + log(L) into `lse_rows` when not null).
template <typename T>
void combine_parts(const float* part, int64_t splits, int64_t rows_cap, int64_t ldv, int64_t rows,
                   int64_t Dv, T* yb, float* lse_rows) {
  const int64_t row_len = ldv + kPartExtra, split_len = rows_cap * row_len;
  std::vector<float> o(static_cast<size_t>(ldv));
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < splits; ++c) {
      const float mc = part[c * split_len + r * row_len + ldv];
      m = std::isnan(m) || std::isnan(mc) ? m + mc : std::max(m, mc);
    }
    const float base = m == -std::numeric_limits<float>::infinity() ? 0.0f : m;
    std::fill(o.begin(), o.end(), 0.0f);
    float l = 0;
    for (int64_t c = 0; c < splits; ++c) {
      const float* src = part + c * split_len + r * row_len;
      const float f = std::exp(src[ldv] - base);
      l += src[ldv + 1] * f;
      for (int64_t d = 0; d < ldv; d += kL)
        fmadd(V::loadu(src + d), V(f), V::loadu(o.data() + d)).store(o.data() + d);
    }
    if (lse_rows != nullptr) lse_rows[r] = m + std::log(l);  // -inf for a row that sees no key
    const V inv_l(1.0f / l);
    for (int64_t d = 0; d < Dv; d += kL)
      (V::loadu(o.data() + d) * inv_l).store(yb + r * Dv + d, Dv - d);
  }
}

}  // namespace detail
}  // namespace COIL_ATTENTION_ABI
}  // namespace coil::attention

// The decode path: few query rows per kv head (decoding), K and V read in place.
#include "coil_attention_decode.h"

namespace coil::attention {
inline namespace COIL_ATTENTION_ABI {
namespace detail {

/// The forward's tasks before any split of the keys: (batch, kv head) on the decode path,
/// else (batch, head, block of kBlockRows query rows).
inline int64_t forward_tasks(const Params& p, bool decode) {
  if (decode) return p.batch * p.kv_heads;
  return p.batch * p.heads * ((p.q_len + kBlockRows - 1) / kBlockRows);
}

/// The forward's passes on the decode path or the blocked one (forward picks by the sizes,
/// decodes(p); tests and benchmarks may ask for the blocked path where forward decodes, and
/// `decode` is ignored where the sizes do not allow it). Both cut their tasks' keys into
/// chunks alike (key_chunk) and combine the chunks' rows alike (combine_parts).
template <typename T, typename M>
void run_forward(const Params& p, const T* q, const T* k, const T* v, const M* mask, T* y,
                 float* lse, bool decode) {
  decode = decode && decodes(p);  // a decode task holds at most kDecodeMaxRows rows
  const int64_t Dv = p.value_dim, blocks = (p.q_len + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = forward_tasks(p, decode);
  const int64_t rows_cap = decode ? group_rows(p) : std::min<int64_t>(kBlockRows, p.q_len);
  // Task t's rows: `rows` consecutive rows of y's B * H * Tq from row0 (a decode task's rows,
  // the Tq rows of each head of its group, are consecutive too).
  auto task_rows = [&](int64_t t, int64_t& row0) {
    if (decode) {
      row0 = t * rows_cap;
      return rows_cap;
    }
    int64_t b, h, i0;
    const int64_t rows = query_task(p, blocks, t, b, h, i0);
    row0 = (b * p.heads + h) * p.q_len + i0;
    return rows;
  };
  auto run_task = [&](int64_t t, Scratch& w, int64_t key_lo, int64_t key_hi, float* part) {
    int64_t row0;
    const int64_t rows = task_rows(t, row0);
    float* lse_rows = lse == nullptr ? nullptr : lse + row0;
    if (decode) {
      group_block(p, q, k, v, mask, t / p.kv_heads, t % p.kv_heads, w, key_lo, key_hi,
                  y + row0 * Dv, part, lse_rows);
    } else {
      int64_t b, h, i0;
      query_task(p, blocks, t, b, h, i0);
      query_block(p, q, k, v, mask, b, h, i0, rows, w, key_lo, key_hi, y + row0 * Dv, part,
                  lse_rows);
    }
  };
  const int64_t chunk = key_chunk(tasks, p.kv_len);
  const int64_t splits = std::max<int64_t>((p.kv_len + chunk - 1) / chunk, 1);
  if (splits == 1) {
#pragma omp parallel if (tasks > 1)
    {
      Scratch w(p.head_dim, Dv, /*packs=*/!decode);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) run_task(t, w, 0, p.kv_len, nullptr);
    }
    return;
  }
  const int64_t ldv = round_up(std::max<int64_t>(Dv, 1), kL);
  const int64_t split_len = rows_cap * (ldv + kPartExtra);
  std::vector<float> part(static_cast<size_t>(tasks * splits * split_len));
#pragma omp parallel
  {
    Scratch w(p.head_dim, Dv, /*packs=*/!decode);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < tasks * splits; ++u) {
      const int64_t c = u % splits;
      run_task(u / splits, w, c * chunk, std::min(p.kv_len, (c + 1) * chunk),
               part.data() + u * split_len);
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t row0;
      const int64_t rows = task_rows(t, row0);
      combine_parts(part.data() + t * splits * split_len, splits, rows_cap, ldv, rows, Dv,
                    y + row0 * Dv, lse == nullptr ? nullptr : lse + row0);
    }
  }
}

}  // namespace detail

/// y = attention(q, k, v, mask) as Params says; `mask` null when p.mask is none (M: bool for
/// a boolean mask, float for an additive one). With `lse` not null, each row's logsumexp
/// ([B, H, Tq] f32, as logsumexp writes it: the same bits unless the keys are split or the
/// decode path runs, whose scores sum in another order) is stored too, from the running max
/// and sum the pass has anyway: a training forward needs no second pass over the scores.
template <typename T, typename M>
void logsumexp(const Params& p, const T* q, const T* k, const M* mask, float* lse);

template <typename T, typename M>
void forward(const Params& p, const T* q, const T* k, const T* v, const M* mask, T* y,
             float* lse = nullptr) {
  if (p.batch * p.heads * p.q_len == 0) return;
  if (p.value_dim == 0) {  // y is empty, its logsumexp is not
    if (lse != nullptr) logsumexp(p, q, k, mask, lse);
    return;
  }
  detail::run_forward(p, q, k, v, p.mask == MaskKind::none ? nullptr : mask, y, lse,
                      detail::decodes(p));
}

namespace detail {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// One task of logsumexp: query_block's loop without the values. The running max m and sum l
/// are the forward's (online_softmax), so lse = m + log(l) is the log of the very sum the
/// forward divides by; a row that sees no key keeps m = -inf, l = 0 and gets -inf + -inf.
template <typename T, typename M>
void lse_block(const Params& p, const T* q, const T* k, const M* mask, float* lse, int64_t b,
               int64_t h, int64_t i0, int64_t rows, Scratch& w) {
  const int64_t D = p.head_dim, Tk = p.kv_len;
  const int64_t hk = h / (p.heads / p.kv_heads);
  const int64_t ldq = p.q_strides[2], ldk = p.k_strides[2];
  const T* qb = q + b * p.q_strides[0] + h * p.q_strides[1] + i0 * ldq;
  const T* kb = k + b * p.k_strides[0] + hk * p.k_strides[1];
  for (int64_t r = 0; r < rows; ++r) widen_row(qb + r * ldq, D, w.q.data() + r * D, D);
  std::fill(w.m.begin(), w.m.begin() + rows, kMinusInf);
  std::fill(w.l.begin(), w.l.begin() + rows, 0.0f);
  int64_t key_end = Tk;
  if (p.causal) key_end = std::clamp<int64_t>(i0 + rows + Tk - p.q_len, 0, key_end);
  for (int64_t j0 = 0; j0 < key_end; j0 += kBlockKeys) {
    const int64_t nk = std::min<int64_t>(kBlockKeys, key_end - j0);
    pack_transposed(kb + j0 * ldk, ldk, nk, D, w.kt.data());
    scores_of_rows(w.q.data(), D, D, rows, w.kt.data(), w.s.data());
    for (int64_t r = 0; r < rows; ++r) {
      float* s = w.s.data() + r * kBlockKeys;
      finish_scores(p, mask_row(p, mask, b, h, i0 + r), i0 + r, j0, nk, s);
      online_softmax(s, w.m[static_cast<size_t>(r)], w.l[static_cast<size_t>(r)]);
    }
  }
  float* out = lse + (b * p.heads + h) * p.q_len + i0;
  for (int64_t r = 0; r < rows; ++r)
    out[r] = w.m[static_cast<size_t>(r)] + std::log(w.l[static_cast<size_t>(r)]);
}

/// out[r] = sum_d a[r][d] * b[r][d] in f32 for `rows` contiguous rows of n elements (delta =
/// rowsum(dO * O)): once per call, so that the k/v tasks, which visit every query row of their
/// heads once per key block, do not recompute it.
template <typename T>
void row_dots(const T* a, const T* b, int64_t rows, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    V acc;
    for (int64_t d = 0; d < n; d += kL)
      acc = fmadd(V::loadu(a + r * n + d, n - d), V::loadu(b + r * n + d, n - d), acc);
    out[r] = acc.reduce_add();
  }
}

/// One thread's blocks for backward. Rows of q/k are widened to ldd floats and rows of dO/v to
/// ldv (zero-padded to the lanes), the layout block_values reads its "v" in.
struct GradScratch {
  int64_t ldd, ldv;
  // q / dO rows of a task, K^T and V^T blocks, K's block by rows (dQ), the scores / P and dP /
  // dS of the rows, P^T or dS^T (dK, dV), and the task's f32 gradient rows.
  std::vector<float> q, dout, kt, vt, k, s, dp, t, acc, acc_v;  // acc_v: dV beside dK's acc
  static constexpr int64_t kRows = std::max(kBlockRows, kBlockKeys);
  GradScratch(int64_t D, int64_t Dv, bool both = false)
      : ldd(round_up(std::max<int64_t>(D, 1), kL)),
        ldv(round_up(std::max<int64_t>(Dv, 1), kL)),
        q(static_cast<size_t>(kRows * ldd)),
        dout(static_cast<size_t>(kRows * ldv)),
        kt(static_cast<size_t>(ldd * kBlockKeys)),
        vt(static_cast<size_t>(ldv * kBlockKeys)),
        k(static_cast<size_t>(kBlockKeys * ldd)),
        s(static_cast<size_t>(kRows * kBlockKeys)),
        dp(static_cast<size_t>(kRows * kBlockKeys)),
        t(static_cast<size_t>(kBlockKeys * kBlockKeys)),
        acc(static_cast<size_t>(kRows * std::max(ldd, ldv))),
        acc_v(both ? static_cast<size_t>(kBlockKeys * ldv) : 0) {}
};

/// P = exp(S - lse) in place over a row's block of finished scores (keys past the block are
/// -inf: 0). A row that sees no key (lse = -inf) has P = 0, not exp(-inf + inf) = NaN.
inline void probabilities(float* s, float lse) {
  if (lse == kMinusInf) {
    for (int c = 0; c < 4; ++c) V().store(s + c * kL);
    return;
  }
  for (int c = 0; c < 4; ++c) (V::loadu(s + c * kL) - V(lse)).exp().store(s + c * kL);
}

/// s: finished scores -> P; dp: dP = dO V^T -> dS = P (dP - delta). A row that sees no key has
/// dS = 0 whatever delta is (its forward output, and so delta, is NaN).
inline void softmax_grad(float* s, float* dp, float lse, float delta) {
  probabilities(s, lse);
  if (lse == kMinusInf) {
    for (int c = 0; c < 4; ++c) V().store(dp + c * kL);
    return;
  }
  for (int c = 0; c < 4; ++c) {
    const V dpv = V::loadu(dp + c * kL) - V(delta);
    (V::loadu(s + c * kL) * dpv).store(dp + c * kL);
  }
}

/// dst[j][r] = src[r][j] for r < rows, j < nk (both kBlockKeys-strided): P or dS of a chunk of
/// query rows turned into the [key][query] rows values_of_rows multiplies.
inline void transpose_block(const float* src, int64_t rows, int64_t nk, float* dst) {
  for (int64_t r = 0; r < rows; r += kL)
    for (int64_t c = 0; c < nk; c += kL)
      transpose_tile(src + r * kBlockKeys + c, kBlockKeys, dst + c * kBlockKeys + r, kBlockKeys,
                     std::min<int64_t>(kL, rows - r), std::min<int64_t>(kL, nk - c));
}

/// Rows of a task's f32 gradient times `factor`, rounded once into T (n elements a row, dense).
template <typename T>
void store_rows(const float* acc, int64_t ld, int64_t rows, int64_t n, float factor, T* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < n; d += kL)
      (V::loadu(acc + r * ld + d) * V(factor)).store(out + r * n + d, n - d);
}

/// Widens a q or dO row, or zeros it for a row that sees no key (lse = -inf): such a row is left
/// out of the gradients, and NaN or inf in it must not leak through P = 0 (0 * inf = NaN).
template <typename T>
void widen_live_row(const T* src, int64_t n, float lse, float* dst, int64_t padded) {
  if (lse == kMinusInf) {
    std::fill(dst, dst + padded, 0.0f);
  } else {
    widen_row(src, n, dst, padded);
  }
}

/// One Grad::q task: rows [i0, i0 + rows) of head h of batch b, over the key blocks they see.
template <typename T, typename M>
void dq_block(const Params& p, const T* q, const T* k, const T* v, const T* dout, const float* lse,
              const float* delta, const M* mask, T* grad, int64_t b, int64_t h, int64_t i0,
              int64_t rows, GradScratch& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim, Tk = p.kv_len, ldd = w.ldd, ldv = w.ldv;
  const int64_t hk = h / (p.heads / p.kv_heads);
  const int64_t ldq = p.q_strides[2], ldk = p.k_strides[2], ldvv = p.v_strides[2];
  const int64_t row0 = (b * p.heads + h) * p.q_len + i0;  // row i0 in lse, delta, dout, grad
  const T* qb = q + b * p.q_strides[0] + h * p.q_strides[1] + i0 * ldq;
  const T* kb = k + b * p.k_strides[0] + hk * p.k_strides[1];
  const T* vb = v + b * p.v_strides[0] + hk * p.v_strides[1];
  for (int64_t r = 0; r < rows; ++r) {
    widen_live_row(qb + r * ldq, D, lse[row0 + r], w.q.data() + r * ldd, ldd);
    widen_live_row(dout + (row0 + r) * Dv, Dv, lse[row0 + r], w.dout.data() + r * ldv, ldv);
  }
  std::fill(w.acc.begin(), w.acc.begin() + rows * ldd, 0.0f);
  int64_t key_end = Tk;
  if (p.causal) key_end = std::clamp<int64_t>(i0 + rows + Tk - p.q_len, 0, key_end);
  for (int64_t j0 = 0; j0 < key_end; j0 += kBlockKeys) {
    const int64_t nk = std::min<int64_t>(kBlockKeys, key_end - j0);
    pack_transposed(kb + j0 * ldk, ldk, nk, D, w.kt.data());
    pack_transposed(vb + j0 * ldvv, ldvv, nk, Dv, w.vt.data());
    for (int64_t j = 0; j < nk; ++j) widen_row(kb + (j0 + j) * ldk, D, w.k.data() + j * ldd, ldd);
    scores_of_rows(w.q.data(), ldd, D, rows, w.kt.data(), w.s.data());
    scores_of_rows(w.dout.data(), ldv, Dv, rows, w.vt.data(), w.dp.data());
    for (int64_t r = 0; r < rows; ++r) {
      float* s = w.s.data() + r * kBlockKeys;
      finish_scores(p, mask_row(p, mask, b, h, i0 + r), i0 + r, j0, nk, s);
      softmax_grad(s, w.dp.data() + r * kBlockKeys, lse[row0 + r], delta[row0 + r]);
    }
    values_of_rows(w.dp.data(), w.k.data(), ldd, nk, rows, w.acc.data(), ldd, ldd);  // dQ += dS K
  }
  // A row that sees no key: zeros (dS = 0 times a masked key's inf would be NaN).
  for (int64_t r = 0; r < rows; ++r)
    if (lse[row0 + r] == kMinusInf) std::fill_n(w.acc.data() + r * ldd, ldd, 0.0f);
  store_rows(w.acc.data(), ldd, rows, D, p.scale, grad + row0 * D);
}

/// One Grad::k and/or Grad::v task: keys [j0, j0 + nk) of kv head hk of batch b, over every
/// query row of the heads that read it, kBlockKeys rows at a time (P and dS blocks are
/// square). dk or dv null: that gradient is not computed; with both, P and dS come from one S.
template <typename T, typename M>
void dkv_block(const Params& p, const T* q, const T* k, const T* v, const T* dout, const float* lse,
               const float* delta, const M* mask, T* dk, T* dv, int64_t b, int64_t hk, int64_t j0,
               int64_t nk, GradScratch& w) {
  const int64_t D = p.head_dim, Dv = p.value_dim, Tq = p.q_len, Tk = p.kv_len;
  const int64_t ldd = w.ldd, ldv = w.ldv, ldq = p.q_strides[2];
  // dK in acc (rows of ldd); dV in acc_v when both are computed, else in acc (rows of ldv).
  float* acc_k = w.acc.data();
  float* acc_v = dk ? w.acc_v.data() : w.acc.data();
  pack_transposed(k + b * p.k_strides[0] + hk * p.k_strides[1] + j0 * p.k_strides[2],
                  p.k_strides[2], nk, D, w.kt.data());
  if (dk) {
    pack_transposed(v + b * p.v_strides[0] + hk * p.v_strides[1] + j0 * p.v_strides[2],
                    p.v_strides[2], nk, Dv, w.vt.data());
    std::fill(acc_k, acc_k + nk * ldd, 0.0f);
  }
  if (dv) std::fill(acc_v, acc_v + nk * ldv, 0.0f);
  // Causal: rows before the first one that sees key j0 see none of the block.
  const int64_t first = p.causal ? std::clamp<int64_t>(j0 + Tq - Tk, 0, Tq) : 0;
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const T* qb = q + b * p.q_strides[0] + h * p.q_strides[1];
    const int64_t row0 = (b * p.heads + h) * Tq;  // row 0 in lse, delta, dout
    for (int64_t i0 = first; i0 < Tq; i0 += kBlockKeys) {
      const int64_t rows = std::min<int64_t>(kBlockKeys, Tq - i0);
      for (int64_t r = 0; r < rows; ++r) {
        const float l = lse[row0 + i0 + r];
        widen_live_row(qb + (i0 + r) * ldq, D, l, w.q.data() + r * ldd, ldd);
        widen_live_row(dout + (row0 + i0 + r) * Dv, Dv, l, w.dout.data() + r * ldv, ldv);
      }
      scores_of_rows(w.q.data(), ldd, D, rows, w.kt.data(), w.s.data());
      if (dk) scores_of_rows(w.dout.data(), ldv, Dv, rows, w.vt.data(), w.dp.data());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* s = w.s.data() + r * kBlockKeys;
        finish_scores(p, mask_row(p, mask, b, h, i), i, j0, nk, s);
        if (dk) {
          softmax_grad(s, w.dp.data() + r * kBlockKeys, lse[row0 + i], delta[row0 + i]);
        } else {
          probabilities(s, lse[row0 + i]);
        }
      }
      // dV += P^T dO, dK += dS^T Q: the transposed block's rows are keys, its columns queries.
      if (dv) {
        transpose_block(w.s.data(), rows, nk, w.t.data());
        values_of_rows(w.t.data(), w.dout.data(), ldv, rows, nk, acc_v, ldv, ldv);
      }
      if (dk) {
        transpose_block(w.dp.data(), rows, nk, w.t.data());
        values_of_rows(w.t.data(), w.q.data(), ldd, rows, nk, acc_k, ldd, ldd);
      }
    }
  }
  if (dk) store_rows(acc_k, ldd, nk, D, p.scale, dk + ((b * p.kv_heads + hk) * Tk + j0) * D);
  if (dv) store_rows(acc_v, ldv, nk, Dv, 1.0f, dv + ((b * p.kv_heads + hk) * Tk + j0) * Dv);
}

/// dK and/or dV (either may be null) of every key: one task per (batch, kv head, block of
/// kBlockKeys keys), each key's gradient summed by one thread over the heads of its group and
/// the query rows in a fixed order.
template <typename T, typename M>
void run_dkv(const Params& p, const T* q, const T* k, const T* v, const T* dout, const float* lse,
             const float* delta, const M* mask, T* dk, T* dv) {
  const int64_t blocks = (p.kv_len + kBlockKeys - 1) / kBlockKeys;
  const int64_t tasks = p.batch * p.kv_heads * blocks;
#pragma omp parallel if (tasks > 1)
  {
    GradScratch w(p.head_dim, p.value_dim, dk && dv);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / blocks, j0 = t % blocks * kBlockKeys;
      dkv_block(p, q, k, v, dout, lse, delta, mask, dk, dv, bh / p.kv_heads, bh % p.kv_heads, j0,
                std::min<int64_t>(kBlockKeys, p.kv_len - j0), w);
    }
  }
}

}  // namespace detail

/// lse[(b * H + h) * Tq + i] = log(sum_j exp(s[b, h, i, j])) of the scaled, masked,
/// causal-limited scores (natural log, computed with a running max as the forward does);
/// -inf for a row that sees no key (every key masked, causal with Tq > Tk, or Tk == 0).
/// lse is f32, contiguous [B, H, Tq]. p.value_dim is ignored (v is not read).
template <typename T, typename M>
void logsumexp(const Params& p, const T* q, const T* k, const M* mask, float* lse) {
  using namespace detail;
  const int64_t blocks = (p.q_len + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = p.batch * p.heads * blocks;
  if (tasks == 0) return;
  const M* m = p.mask == MaskKind::none ? nullptr : mask;
#pragma omp parallel if (tasks > 1)
  {
    Scratch w(p.head_dim, 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t b, h, i0;
      const int64_t rows = query_task(p, blocks, t, b, h, i0);
      lse_block(p, q, k, m, lse, b, h, i0, rows, w);
    }
  }
}

/// The gradient of y = attention(q, k, v, mask) with respect to q, k or v (`wrt`), given
/// o = y and dout = dL/dy (both contiguous [B, H, Tq, Dv] of dtype T) and lse as logsumexp
/// writes it. grad is contiguous and dense: [B, H, Tq, D] (q), [B, Hkv, Tk, D] (k) or
/// [B, Hkv, Tk, Dv] (v), of dtype T, every element written (zeros where nothing
/// contributes). o is not read when wrt == Grad::v (may be null then).
template <typename T, typename M>
void backward(const Params& p, Grad wrt, const T* q, const T* k, const T* v, const T* o,
              const T* dout, const float* lse, const M* mask, T* grad) {
  using namespace detail;
  const int64_t bh_rows = p.batch * p.heads * p.q_len;
  const int64_t width = wrt == Grad::v ? p.value_dim : p.head_dim;
  const int64_t rows_out = wrt == Grad::q ? bh_rows : p.batch * p.kv_heads * p.kv_len;
  if (rows_out == 0 || width == 0) return;
  const M* m = p.mask == MaskKind::none ? nullptr : mask;
  std::vector<float> delta;  // rowsum(dO * O) per query row: dS = P (dP - delta)
  if (wrt != Grad::v) {
    delta.resize(static_cast<size_t>(bh_rows));
    row_dots(dout, o, bh_rows, p.value_dim, delta.data());
  }
  if (wrt == Grad::q) {
    const int64_t blocks = (p.q_len + kBlockRows - 1) / kBlockRows;
    const int64_t tasks = p.batch * p.heads * blocks;
#pragma omp parallel if (tasks > 1)
    {
      GradScratch w(p.head_dim, p.value_dim);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) {
        int64_t b, h, i0;
        const int64_t rows = query_task(p, blocks, t, b, h, i0);
        dq_block(p, q, k, v, dout, lse, delta.data(), m, grad, b, h, i0, rows, w);
      }
    }
    return;
  }
  run_dkv(p, q, k, v, dout, lse, delta.data(), m, wrt == Grad::k ? grad : nullptr,
          wrt == Grad::v ? grad : nullptr);
}

/// dk and dv of y = attention(q, k, v, mask) in one pass over the scores (each S, P and dS
/// block computed once for both): the values backward gives with Grad::k and Grad::v, bit for
/// bit.
template <typename T, typename M>
void backward_kv(const Params& p, const T* q, const T* k, const T* v, const T* o, const T* dout,
                 const float* lse, const M* mask, T* dk, T* dv) {
  using namespace detail;
  if (p.batch * p.kv_heads * p.kv_len == 0) return;
  if (p.head_dim == 0 || p.value_dim == 0) {  // an empty gradient: the other one alone
    backward(p, Grad::k, q, k, v, o, dout, lse, mask, dk);
    backward(p, Grad::v, q, k, v, o, dout, lse, mask, dv);
    return;
  }
  const M* m = p.mask == MaskKind::none ? nullptr : mask;
  const int64_t bh_rows = p.batch * p.heads * p.q_len;
  std::vector<float> delta(static_cast<size_t>(bh_rows));  // rowsum(dO * O) per query row
  row_dots(dout, o, bh_rows, p.value_dim, delta.data());
  run_dkv(p, q, k, v, dout, lse, delta.data(), m, dk, dv);
}

// Every (dtype, mask) pair generated code calls; modules of the avx512/avx2 ISAs link them
// from libcoil_vmath instead of compiling them (0.7 s of g++ per module with attention).
#define COIL_ATTENTION_INSTANCES(X) \
  X(float, float)                   \
  X(float, bool)                    \
  X(bfloat16, float)                \
  X(bfloat16, bool)                 \
  X(half, float)                    \
  X(half, bool)
#ifdef COIL_GEMM_PRECOMPILED
#define COIL_ATTENTION_DECLARE(T, M)                                                               \
  extern template void forward<T, M>(const Params&, const T*, const T*, const T*, const M*, T*,    \
                                     float*);                                                      \
  extern template void logsumexp<T, M>(const Params&, const T*, const T*, const M*, float*);       \
  extern template void backward<T, M>(const Params&, Grad, const T*, const T*, const T*, const T*, \
                                      const T*, const float*, const M*, T*);                       \
  extern template void backward_kv<T, M>(const Params&, const T*, const T*, const T*, const T*,    \
                                         const T*, const float*, const M*, T*, T*);
COIL_ATTENTION_INSTANCES(COIL_ATTENTION_DECLARE)
#undef COIL_ATTENTION_DECLARE
#endif

}  // namespace COIL_ATTENTION_ABI
}  // namespace coil::attention

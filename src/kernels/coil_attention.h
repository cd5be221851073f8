// The attention kernel of generated CPU code (an `attention` node; lower/lower_attention.cpp):
// y = softmax(q @ k^T * scale [+ mask]) @ v computed as a blocked "flash" forward pass, so that
// the [Tq, Tk] score matrix never exists: memory is O(T) (the inputs and the output) plus a
// few small blocks per thread. Real code, compiled and tested for every ISA by
// tests/correctness/attention_test.cpp, embedded into libcoil like coil_gemm.h. C++17.
//
// Usage (q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] through (batch, head, row)
// strides with contiguous rows, y [B, H, Tq, Dv] contiguous; a mask M is bool (false: -inf) or
// float (added), addressed through Params::mask_strides, 0 on broadcast dims):
//   coil::attention::Params p{B, H, Hkv, Tq, Tk, D, Dv, 0.125f, /*causal=*/true,
//                             coil::attention::MaskKind::none, {0, 0, 0, 0},
//                             {H * Tq * D, Tq * D, D}, {Hkv * Tk * D, Tk * D, D},
//                             {Hkv * Tk * Dv, Tk * Dv, Dv}};
//   coil::attention::forward(p, q, k, v, static_cast<const float*>(nullptr), y);
//
// How it works (FlashAttention-2's forward loop order, one thread per query block):
//   - Tasks are (batch, head, block of kBlockRows query rows), spread over OpenMP threads
//     (dynamic: causal blocks differ in work). Each output row is computed by one thread in a
//     fixed order of key blocks, so results do not depend on the thread count. When the tasks
//     are few and the keys many (decoding), the keys are split into chunks too, each chunk's
//     rows left unnormalized with their running max and sum, then combined (kSplitMinTasks).
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
//   - Modules of the avx512/avx2 ISAs link forward's instances from libcoil_vmath
//     (src/kernels/vmath/attention_*.cpp) rather than compile them.
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

/// s[r][0..kBlockKeys) = sum_d q[r][d] * kt[d][.] for R rows (q rows D apart).
template <int R>
inline void block_scores(const float* q, int64_t D, const float* kt, float* s) {
  V acc[R][4];
  for (int64_t d = 0; d < D; ++d) {
    V kv[4];
    for (int c = 0; c < 4; ++c) kv[c] = V::loadu(kt + d * kBlockKeys + c * kL);
    for (int r = 0; r < R; ++r) {
      const V qv(q[r * D + d]);
      for (int c = 0; c < 4; ++c) acc[r][c] = fmadd(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c].store(s + r * kBlockKeys + c * kL);
}

/// o[r][c0 .. c0 + C * kL) += sum_{j < nk} p[r][j] * v[j][.] for R rows (o rows ldo apart, v
/// rows ldv apart).
template <int R, int C>
inline void block_values(const float* p, const float* v, int64_t ldv, int64_t nk, float* o,
                         int64_t ldo) {
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = V::loadu(o + r * ldo + c * kL);
  for (int64_t j = 0; j < nk; ++j) {
    V vv[C];
    for (int c = 0; c < C; ++c) vv[c] = V::loadu(v + j * ldv + c * kL);
    for (int r = 0; r < R; ++r) {
      const V pv(p[r * kBlockKeys + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = fmadd(pv, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c].store(o + r * ldo + c * kL);
}

template <int R>
inline void block_values_row_group(const float* p, const float* v, int64_t ldv, int64_t nk,
                                   float* o, int64_t ldo) {
  int64_t c0 = 0;
  for (; c0 + 4 * kL <= ldo; c0 += 4 * kL) block_values<R, 4>(p, v + c0, ldv, nk, o + c0, ldo);
  switch ((ldo - c0) / kL) {
    case 3:
      block_values<R, 3>(p, v + c0, ldv, nk, o + c0, ldo);
      break;
    case 2:
      block_values<R, 2>(p, v + c0, ldv, nk, o + c0, ldo);
      break;
    case 1:
      block_values<R, 1>(p, v + c0, ldv, nk, o + c0, ldo);
      break;
    default:
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

/// One thread's blocks, sized for the call.
struct Scratch {
  int64_t ldq, ldv;  // row lengths of q and of v/o (Dv rounded up to the lanes)
  std::vector<float> q, kt, v, s, o, m, l;
  Scratch(int64_t D, int64_t Dv)
      : ldq(D),
        ldv(round_up(std::max<int64_t>(Dv, 1), kL)),
        q(static_cast<size_t>(kBlockRows * std::max<int64_t>(D, 1))),
        kt(static_cast<size_t>(round_up(std::max<int64_t>(D, 1), kL) * kBlockKeys)),
        v(static_cast<size_t>(kBlockKeys * ldv)),
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

/// One task: query rows [i0, i0 + rows) of head h of batch b over keys [key_lo, key_hi)
/// (key_lo a multiple of kBlockKeys). With `part` null the rows are finished into y; else
/// (split keys) each row leaves its unnormalized output, running max and sum in `part`
/// (kPartExtra floats after ldv outputs per row) for combine_parts.
template <typename T, typename M>
void query_block(const Params& p, const T* q, const T* k, const T* v, const M* mask, T* y,
                 int64_t b, int64_t h, int64_t i0, int64_t rows, Scratch& w, int64_t key_lo,
                 int64_t key_hi, float* part) {
  const int64_t D = p.head_dim, Dv = p.value_dim, Tk = p.kv_len;
  const int64_t hk = h / (p.heads / p.kv_heads);
  const int64_t ldq = p.q_strides[2], ldk = p.k_strides[2], ldv = p.v_strides[2];
  const T* qb = q + b * p.q_strides[0] + h * p.q_strides[1] + i0 * ldq;
  const T* kb = k + b * p.k_strides[0] + hk * p.k_strides[1];
  const T* vb = v + b * p.v_strides[0] + hk * p.v_strides[1];
  T* yb = y + ((b * p.heads + h) * p.q_len + i0) * Dv;
  for (int64_t r = 0; r < rows; ++r) widen_row(qb + r * ldq, D, w.q.data() + r * D, D);
  std::fill(w.o.begin(), w.o.begin() + rows * w.ldv, 0.0f);
  std::fill(w.m.begin(), w.m.begin() + rows, -std::numeric_limits<float>::infinity());
  std::fill(w.l.begin(), w.l.begin() + rows, 0.0f);
  // Causal: keys past the last row's last visible key are skipped whole.
  int64_t key_end = std::min(Tk, key_hi);
  if (p.causal) key_end = std::clamp<int64_t>(i0 + rows + Tk - p.q_len, 0, key_end);
  float alpha[kBlockRows];
  for (int64_t j0 = key_lo; j0 < key_end; j0 += kBlockKeys) {
    const int64_t nk = std::min<int64_t>(kBlockKeys, key_end - j0);
    // K^T block [D][kBlockKeys] (keys past nk zero) and V block [nk][ldv] in f32.
    for (int64_t jj = 0; jj < nk; jj += kL)
      for (int64_t d = 0; d < D; d += kL)
        transpose_tile(kb + (j0 + jj) * ldk + d, ldk, w.kt.data() + d * kBlockKeys + jj, kBlockKeys,
                       std::min<int64_t>(kL, nk - jj), std::min<int64_t>(kL, D - d));
    for (int64_t jj = round_up(nk, kL); jj < kBlockKeys; jj += kL)
      for (int64_t d = 0; d < D; ++d) V().store(w.kt.data() + d * kBlockKeys + jj);
    for (int64_t j = 0; j < nk; ++j)
      widen_row(vb + (j0 + j) * ldv, Dv, w.v.data() + j * w.ldv, w.ldv);
    for_row_groups(
        rows,
        [&](int64_t r) {
          block_scores<kMicroRows>(w.q.data() + r * D, D, w.kt.data(), w.s.data() + r * kBlockKeys);
        },
        [&](int64_t r) {
          block_scores<1>(w.q.data() + r * D, D, w.kt.data(), w.s.data() + r * kBlockKeys);
        });
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const M* mask_row = mask == nullptr ? nullptr
                                          : mask + b * p.mask_strides[0] + h * p.mask_strides[1] +
                                                i * p.mask_strides[2];
      float* s = w.s.data() + r * kBlockKeys;
      finish_scores(p, mask_row, i, j0, nk, s);
      alpha[r] = online_softmax(s, w.m[static_cast<size_t>(r)], w.l[static_cast<size_t>(r)]);
      if (alpha[r] != 1.0f) {
        float* o = w.o.data() + r * w.ldv;
        for (int64_t d = 0; d < w.ldv; d += kL) (V::loadu(o + d) * V(alpha[r])).store(o + d);
      }
    }
    for_row_groups(
        rows,
        [&](int64_t r) {
          block_values_row_group<kMicroRows>(w.s.data() + r * kBlockKeys, w.v.data(), w.ldv, nk,
                                             w.o.data() + r * w.ldv, w.ldv);
        },
        [&](int64_t r) {
          block_values_row_group<1>(w.s.data() + r * kBlockKeys, w.v.data(), w.ldv, nk,
                                    w.o.data() + r * w.ldv, w.ldv);
        });
  }
  if (part != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = part + r * (w.ldv + kPartExtra);
      std::copy(w.o.begin() + r * w.ldv, w.o.begin() + (r + 1) * w.ldv, dst);
      dst[w.ldv] = w.m[static_cast<size_t>(r)];
      dst[w.ldv + 1] = w.l[static_cast<size_t>(r)];
    }
    return;
  }
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

}  // namespace detail

namespace detail {

/// Keys per chunk when the keys are split (kv_len when not).
inline int64_t key_chunk(int64_t tasks, int64_t kv_len) {
  if (tasks >= kSplitMinTasks || kv_len < 2 * kSplitMinKeys) return std::max<int64_t>(kv_len, 1);
  const int64_t splits =
      std::min<int64_t>({kv_len / kSplitMinKeys, (kSplitMinTasks + tasks - 1) / tasks, kMaxSplits});
  if (splits <= 1) return kv_len;
  return round_up((kv_len + splits - 1) / splits, kBlockKeys);
}

/// Rows [0, rows) of one task from its `splits` partial results (`part`, each `rows_cap`
/// rows of ldv + kPartExtra floats): the softmax's rescaling across chunks, then y = O / L.
template <typename T>
void combine_parts(const float* part, int64_t splits, int64_t rows_cap, int64_t ldv, int64_t rows,
                   int64_t Dv, T* yb) {
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
    const V inv_l(1.0f / l);
    for (int64_t d = 0; d < Dv; d += kL)
      (V::loadu(o.data() + d) * inv_l).store(yb + r * Dv + d, Dv - d);
  }
}

}  // namespace detail

/// y = attention(q, k, v, mask) as Params says; `mask` null when p.mask is none (M: bool for
/// a boolean mask, float for an additive one).
template <typename T, typename M>
void forward(const Params& p, const T* q, const T* k, const T* v, const M* mask, T* y) {
  using namespace detail;
  const int64_t blocks = (p.q_len + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = p.batch * p.heads * blocks;
  if (tasks == 0 || p.value_dim == 0) return;
  const M* m = p.mask == MaskKind::none ? nullptr : mask;
  const int64_t chunk = key_chunk(tasks, p.kv_len);
  const int64_t splits = std::max<int64_t>((p.kv_len + chunk - 1) / chunk, 1);
  auto task_rows = [&](int64_t t, int64_t& b, int64_t& h, int64_t& i0) {
    const int64_t blk = t % blocks, bh = t / blocks;
    b = bh / p.heads;
    h = bh % p.heads;
    i0 = blk * kBlockRows;
    return std::min<int64_t>(kBlockRows, p.q_len - i0);
  };
  if (splits == 1) {
#pragma omp parallel if (tasks > 1)
    {
      Scratch w(p.head_dim, p.value_dim);
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) {
        int64_t b, h, i0;
        const int64_t rows = task_rows(t, b, h, i0);
        query_block(p, q, k, v, m, y, b, h, i0, rows, w, 0, p.kv_len, nullptr);
      }
    }
    return;
  }
  const int64_t rows_cap = std::min<int64_t>(kBlockRows, p.q_len);
  const int64_t ldv = round_up(std::max<int64_t>(p.value_dim, 1), kL);
  const int64_t split_len = rows_cap * (ldv + kPartExtra);
  std::vector<float> part(static_cast<size_t>(tasks * splits * split_len));
#pragma omp parallel
  {
    Scratch w(p.head_dim, p.value_dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < tasks * splits; ++u) {
      int64_t b, h, i0;
      const int64_t rows = task_rows(u / splits, b, h, i0), c = u % splits;
      query_block(p, q, k, v, m, y, b, h, i0, rows, w, c * chunk,
                  std::min(p.kv_len, (c + 1) * chunk), part.data() + u * split_len);
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t b, h, i0;
      const int64_t rows = task_rows(t, b, h, i0);
      combine_parts(part.data() + t * splits * split_len, splits, rows_cap, ldv, rows, p.value_dim,
                    y + ((b * p.heads + h) * p.q_len + i0) * p.value_dim);
    }
  }
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
#define COIL_ATTENTION_DECLARE(T, M) \
  extern template void forward<T, M>(const Params&, const T*, const T*, const T*, const M*, T*);
COIL_ATTENTION_INSTANCES(COIL_ATTENTION_DECLARE)
#undef COIL_ATTENTION_DECLARE
#endif

}  // namespace COIL_ATTENTION_ABI
}  // namespace coil::attention

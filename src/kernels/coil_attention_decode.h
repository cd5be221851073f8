// The attention forward's decode path, for few query rows per kv head: a decoding step's one
// (or few) query rows against a long KV cache, often with grouped-query heads (32 on 8 kv
// heads). Included by coil_attention.h only, between its helpers and its forward, and part of
// it: the same namespaces (the ISA's inline namespace too), the same semantics, tested with it.
//
// Why a path of its own: the blocked path transposes each block of K into kt and widens V's
// block before its micro-kernels, work that 64 query rows share. With one row the packing
// costs as much as the math, and each kv head's keys were packed once per query head of its
// group (4 times at 32:8): 3-5 GB/s of K and V on one core at 32:8, 13 GB/s at 1:1, where the
// step should run at memory speed (docs/attention.md, "Decoding on the CPU").
//
//   - When (decodes): the rows of a kv head's group, H / Hkv heads x Tq query rows, are at most
//     kDecodeMaxRows. The choice depends on the sizes only, so results are the same bits at
//     every thread count.
//   - Tasks are (batch, kv head), each serving every query row of its group's heads, so each
//     element of K and V is read once per task (not once per query head); when the tasks are
//     few and the keys many, the keys are split into chunks and combined as on the blocked
//     path (key_chunk, combine_parts).
//   - Scores: the group's q rows are widened to f32 once per task (zero-padded to whole
//     vectors); per key block, each row's dot products with kDecodeKeys rows of K read in
//     place (bf16/f16 widened as loaded), one vector accumulator per (row, key) along D, then
//     the accumulators' lanes summed into the keys' scores (an in-register transpose-and-add).
//   - Then exactly the blocked path's per-row steps (finish_scores: scale, mask, causal;
//     online_softmax; the earlier output rescaled) and O += P V with the values micro-kernel
//     reading V's rows in place (the last vector of a row masked, widened as loaded).
//   - While it scores a block it prefetches the next block's keys and this block's values.
//   - Scratch: the group's q rows, the score block and the output rows (Scratch without kt and v).
#pragma once

namespace coil::attention {
inline namespace COIL_ATTENTION_ABI {
namespace detail {

/// The decode path serves every query row of a kv head's group in one task when there are at
/// most this many (8 register tiles of rows on AVX-512, 16 on AVX2, each reading the key tile
/// from L1). Measured on one core (docs/attention.md, "Decoding on the CPU"): 1.2-2x the blocked
/// path's speed at 4-32 rows of one head, 6-7x at 16-32 rows of a GQA group, and about even at 64
/// rows, where the blocked path's packing is shared by enough rows; past 32 the decode path's
/// fewer, larger tasks (one per kv head, not per query head) would cost threads more than it
/// saves. 32 rows: speculative steps of up to 8 rows at 4:1, 4 rows at 8:1.
constexpr int64_t kDecodeMaxRows = 32;
/// Keys whose dot products with a row are in flight at once (independent accumulators).
constexpr int kDecodeKeys = 4;

/// The rows of one (batch, kv head): the Tq rows of each of its group's H / Hkv heads.
inline int64_t group_rows(const Params& p) {
  return p.heads / p.kv_heads * p.q_len;
}

/// Whether forward takes the decode path: few rows per kv head.
inline bool decodes(const Params& p) {
  return p.kv_heads > 0 && group_rows(p) <= kDecodeMaxRows;
}

/// out[c] = the sum of acc[c]'s lanes for c < kDecodeKeys: the four accumulators transposed and
/// added in registers (pairs of lanes, then 64-bit pairs, then the 128-bit quarters), rather
/// than four reductions through memory.
inline void lane_sums(const V* acc, float* out) {
  static_assert(kDecodeKeys == 4, "lane_sums adds four accumulators");
#if defined(COIL_CPU_AVX512)
  const __m512 a0 = acc[0].reg(), a1 = acc[1].reg(), a2 = acc[2].reg(), a3 = acc[3].reg();
  // Per 128-bit quarter: (a0, a1, a0, a1) partial sums, then (a2, a3, a2, a3).
  const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Per quarter: (a0, a1, a2, a3).
  const __m512d d01 = _mm512_castps_pd(t01), d23 = _mm512_castps_pd(t23);
  const __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d01, d23)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(d01, d23)));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#elif defined(COIL_CPU_AVX2)
  // Per 128-bit half: (a0, a1, a2, a3) after two rounds of pairwise adds.
  const __m256 t01 = _mm256_hadd_ps(acc[0].reg(), acc[1].reg());
  const __m256 t23 = _mm256_hadd_ps(acc[2].reg(), acc[3].reg());
  const __m256 u = _mm256_hadd_ps(t01, t23);
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
#else
  for (int c = 0; c < kDecodeKeys; ++c) out[c] = acc[c].reduce_add();
#endif
}

/// s[r][0 .. kDecodeKeys) = q[r] . key[c] for R rows of q (f32, ldq apart, zero past D up to
/// whole vectors) and kDecodeKeys rows of K read in place (D elements each, widened as loaded;
/// s rows kBlockKeys apart).
template <int R, typename T>
inline void dot_tile(const float* q, int64_t ldq, const T* const* key, int64_t D, float* s) {
  V acc[R][kDecodeKeys];
  auto step = [&](int64_t d, int64_t count) {
    V kv[kDecodeKeys];
    for (int c = 0; c < kDecodeKeys; ++c) kv[c] = V::loadu(key[c] + d, count);
    for (int r = 0; r < R; ++r) {
      const V qv = V::loadu(q + r * ldq + d);
      for (int c = 0; c < kDecodeKeys; ++c) acc[r][c] = fmadd(qv, kv[c], acc[r][c]);
    }
  };
  int64_t d = 0;
  for (; d + kL <= D; d += kL) step(d, kL);
  if (d < D) step(d, D - d);
  for (int r = 0; r < R; ++r) lane_sums(acc[r], s + r * kBlockKeys);
}

/// Asks for the cache lines of a row of n elements `offset` elements past `base` without
/// waiting for them. The address is computed on integers (prefetch_ahead): rows past the
/// tensor's end (the last block's next) cost a prefetch of nothing.
template <typename T>
inline void prefetch_row(const T* base, int64_t offset, int64_t n) {
  for (int64_t e = 0; e < n; e += 64 / static_cast<int64_t>(sizeof(T)))
    prefetch_ahead(base, offset + e);
  prefetch_ahead(base, offset + n - 1);  // a row that starts inside a line ends in one more
}

/// S = Q K^T for a key block: s[r][0..nk) for `rows` rows of q (as dot_tile's) against nk rows
/// of K read in place (ldk apart). Keys go kDecodeKeys at a time, each group's rows read from
/// L1 by every register tile of rows; a last group past nk repeats key nk - 1, whose extra
/// scores finish_scores overwrites with -inf. Along the way it prefetches the next block's keys
/// and this block's values (rows of Dv elements, ldv apart from v), which the values step reads
/// next. Without it the loads wait on memory one tile at a time, 25-30% slower at 4 rows in
/// f32 and 1.4-1.9x in bf16 (likely as the hardware's prefetchers stop at each 4 KiB page:
/// 8 keys of 128 f32).
template <typename T>
inline void group_scores(const float* q, int64_t ldq, int64_t D, int64_t rows, const T* k,
                         int64_t ldk, int64_t nk, const T* v, int64_t ldv, int64_t Dv, float* s) {
  for (int64_t j = 0; j < nk; j += kDecodeKeys) {
    const T* key[kDecodeKeys];
    for (int c = 0; c < kDecodeKeys; ++c) {
      key[c] = k + std::min<int64_t>(j + c, nk - 1) * ldk;
      prefetch_row(k, (j + c + kBlockKeys) * ldk, D);
      prefetch_row(v, (j + c) * ldv, Dv);
    }
    for_row_groups(
        rows,
        [&](int64_t r) { dot_tile<kMicroRows>(q + r * ldq, ldq, key, D, s + r * kBlockKeys + j); },
        [&](int64_t r) { dot_tile<1>(q + r * ldq, ldq, key, D, s + r * kBlockKeys + j); });
  }
}

/// One decode task: every query row of kv head hk's group in batch b (row r: head
/// hk * H / Hkv + r / Tq, query r % Tq) over keys [key_lo, key_hi) (key_lo a multiple of
/// kBlockKeys), finished by finish_rows into y's rows `yb`, `part` or `lse_rows`.
template <typename T, typename M>
void group_block(const Params& p, const T* q, const T* k, const T* v, const M* mask, int64_t b,
                 int64_t hk, Scratch& w, int64_t key_lo, int64_t key_hi, T* yb, float* part,
                 float* lse_rows) {
  const int64_t D = p.head_dim, Tq = p.q_len, rows = group_rows(p);
  const int64_t h0 = hk * (p.heads / p.kv_heads), ldq = w.ldq;
  const int64_t ldk = p.k_strides[2], ldv = p.v_strides[2];
  const T* kb = k + b * p.k_strides[0] + hk * p.k_strides[1];
  const T* vb = v + b * p.v_strides[0] + hk * p.v_strides[1];
  int64_t query[kDecodeMaxRows];
  const M* mask_rows[kDecodeMaxRows];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = h0 + r / Tq, i = r % Tq;
    widen_row(q + b * p.q_strides[0] + h * p.q_strides[1] + i * p.q_strides[2], D,
              w.q.data() + r * ldq, ldq);
    query[r] = i;
    mask_rows[r] = mask_row(p, mask, b, h, i);
  }
  start_rows(w, rows);
  // Causal needs no limit here: the group's last query row sees every key.
  const int64_t key_end = std::min(p.kv_len, key_hi);
  for (int64_t j0 = key_lo; j0 < key_end; j0 += kBlockKeys) {
    const int64_t nk = std::min<int64_t>(kBlockKeys, key_end - j0);
    group_scores(w.q.data(), ldq, D, rows, kb + j0 * ldk, ldk, nk, vb + j0 * ldv, ldv, p.value_dim,
                 w.s.data());
    softmax_rows(p, rows, query, mask_rows, j0, nk, w);
    values_of_rows(w.s.data(), vb + j0 * ldv, ldv, nk, rows, w.o.data(), w.ldv, p.value_dim);
  }
  finish_rows(w, rows, p.value_dim, p.kv_len, yb, part, lse_rows);
}

}  // namespace detail
}  // namespace COIL_ATTENTION_ABI
}  // namespace coil::attention

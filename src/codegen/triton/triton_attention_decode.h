// The split-K ("flash-decoding") path of the GPU's attention forward. A decoding step has a few
// query rows (Tq = 1..16) against a long KV cache: the forward template's cdiv(Tq, BLOCK_M) x
// B x H programs (B = 1, H = 32: 32 programs on a 132-SM GPU) leave most of the GPU idle while
// each of them walks every key. As FlashDecoding does, the keys are cut into S chunks and the
// forward becomes two kernels:
//
//   partial  grid (cdiv(Tq, BLOCK_M), B * H, S) (packed, below: (1, B * Hkv, S)): the forward's
//            program (triton_attention.h: GQA, masks, causal loops, bounds and padding masks,
//            strided views) over the keys
//            [s * chunk, min((s + 1) * chunk, TK)), chunk = cdiv(cdiv(TK, S), BLOCK_N) * BLOCK_N
//            computed in the kernel (TK may be a size argument), so that every chunk starts on
//            a block and only TK's partial last block needs a bound. It stores its unnormalized
//            accumulator acc [S, B*H, Tq, Dv] and running max and sum m, l [S, B*H, Tq] (f32,
//            log2 units); an empty chunk stores m = -inf, l = 0, acc = 0.
//   combine  grid (cdiv(B*H*Tq, BLOCK_M)): per row M = max_s m_s, w_s = exp2(m_s - M_safe)
//            (M_safe = 0 where M = -inf, as the forward's m_safe), L = sum_s l_s w_s,
//            O = sum_s acc_s w_s / L stored in the output dtype (and the logsumexp
//            (M + log2 L) ln 2 where the forward stores one).
//
// The edge cases are the forward's: a row that sees no key has L = 0 and gives 0 / 0 = NaN (coil's
// reference: softmax over all -inf); TK = 0 gives zeros, also a symbolic TK that is 0 at run time
// (the combine tests it); a NaN score or value reaches the row through its chunk's weight.
//
// Grouped-query packing (attention_packed_heads), in the partial kernel and in the unsplit
// forward alike: where a kv head's G = H / Hkv query heads have few rows (Tq * G <= 64), the
// program is per (batch x kv head[, chunk]) and its query tile's rows are the group's
// (query head, query row) pairs: row r is query head kvh * G + r // Tq, query row r % Tq. The
// K and V blocks are loaded once per kv head (not once per query head of its group) and the
// tile's rows are used (Tq = 1 alone filled 1 of 16). q and the mask are addressed per row (head
// hq, query row iq), the causal limit is per row (j <= iq + Tk - Tq). Those rows are contiguous in
// the result [B, H, Tq, Dv] (and the partials, the logsumexp): rows (b * Hkv + kvh) * G * Tq + r,
// so the stores and the combine index them as before. The program count the split rule sees is
// then B * Hkv.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "codegen/triton/triton_kernel.h"

namespace coil {

// When to split (decided at codegen from the sizes, Inductor-style like triton_split.h): a
// forward whose programs are too few to give each SM of an H100/H200 (132 SMs) two of them, over
// enough keys that each chunk still has a few key blocks to pipeline. S chunks fill about two
// programs per SM (S * programs <= kDecodeTargetPrograms), at most kDecodeMaxSplits, each of at
// least kDecodeMinChunkKeys keys; S < 2 means no split.
constexpr int64_t kDecodeGpuSms = 132;
constexpr int64_t kDecodeTargetPrograms = 2 * kDecodeGpuSms;
// The partial kernel's query block (its configs' BLOCK_M: the template's smallest block), by
// which the program count is counted.
constexpr int64_t kDecodeQueryBlock = 16;
constexpr int64_t kDecodeMinKeys = 1024;  // a static Tk below this stays one kernel
constexpr int64_t kDecodeMinChunkKeys = 256;
constexpr int64_t kDecodeMaxSplits = 64;

/// Grouped-query packing: at most this many (query head, query row) pairs in a tile (the
/// runtime's BLOCK_M covers them: max(16, next_pow2(Tq * G)); the accumulator [64, Dv] stays in
/// registers).
constexpr int64_t kPackMaxRows = 64;

/// G = H / Hkv where forward attention kernel `k` packs its kv head's query heads into the rows
/// of one query tile, else 0. The rule: a forward, G >= 2, 1 <= Tq and Tq * G <= kPackMaxRows,
/// and B, H, Tq (the result's first dims) and Hkv static numbers (the row mapping and the
/// program count are printed); a symbolic Tk is fine (a decode step's cache).
int64_t attention_packed_heads(const TritonKernelPlan& k, const std::vector<TritonBuffer>& buffers);

/// The query tile of a packed kernel (its configs' BLOCK_M): the group's Tq * G rows padded to a
/// power of two >= 16.
int64_t attention_packed_block(int64_t rows);

/// The number of key chunks S of a forward attention with `query_programs` = cdiv(Tq, 16) * B * H
/// programs (packed: B * Hkv, one tile each) over `kv_len` keys; 1 where it stays one kernel. A
/// symbolic Tk (a size-generic module's cache length, `kv_len_symbolic`: the text may not depend on
/// it) splits by the program count alone, as if the cache were long: the chunk length is computed
/// at run time, and a short cache leaves the last chunks empty (their programs store m = -inf and
/// exit), the price kSymbolicSplitRow accepts for split reductions.
int64_t attention_decode_splits(int64_t query_programs, int64_t kv_len, bool kv_len_symbolic);

/// The partial and combine kernels replacing forward attention kernel `k` (partial buffers
/// appended to `buffers`), or nullopt where it stays one kernel (attention_decode_splits; also
/// any kernel but the forward, and sizes B, H or Tq that are symbolic: the program count must be
/// static).
std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> split_attention_decode(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers);

/// Prints kernel `k` of `plan`: a partial or combine kernel of split_attention_decode.
TritonKernelSource generate_triton_attention_decode_kernel(const TritonProgramPlan& plan, size_t k,
                                                           int index);

}  // namespace coil

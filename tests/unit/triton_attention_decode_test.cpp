// The split-K ("flash-decoding") path of the GPU's attention forward
// (codegen/triton/triton_attention_decode.h): when a forward is split, and what its partial and
// combine kernels print. python/tests/test_attention_decode_emulated.py executes the kernels'
// bodies on the CPU; tests/gpu/test_attention.py (group `decode`) on the GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen/triton/triton_attention_decode.h"
#include "driver/pipeline.h"
#include "graph/text_format.h"

namespace coil {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string attention_graph(const std::string& q, const std::string& kv, const std::string& attrs,
                            const std::string& mask = "") {
  std::string text = "input q: " + q + "\ninput k: " + kv + "\ninput v: " + kv + "\n";
  if (!mask.empty()) text += "input m: " + mask + "\n";
  text += "y = attention(q, k, v" + std::string(mask.empty() ? "" : ", m") + ") {" + attrs +
          "}\noutput y\n";
  return text;
}

TritonModule cuda_module(const std::string& text) {
  CompileOptions o;
  o.device = "cuda";
  return generate_gpu_program(parse_graph(text, "<test>"), o).triton;
}

TEST(TritonAttentionDecode, SplitRuleFillsTwoProgramsPerSm) {
  // B = 1, H = 32, Tq = 1 over 8192 keys: 32 programs, 8 chunks of 1024 keys (256 programs).
  EXPECT_EQ(attention_decode_splits(32, 8192, false), 8);
  // One program: as many chunks as allowed.
  EXPECT_EQ(attention_decode_splits(1, 65536, false), kDecodeMaxSplits);
  // Chunks keep at least 256 keys.
  EXPECT_EQ(attention_decode_splits(4, 1024, false), 4);
  EXPECT_EQ(attention_decode_splits(1, 1500, false), 5);
  // Short keys, or programs enough for the GPU: one kernel.
  EXPECT_EQ(attention_decode_splits(1, kDecodeMinKeys - 1, false), 1);
  EXPECT_EQ(attention_decode_splits(kDecodeTargetPrograms / 2, 1 << 20, false), 2);
  EXPECT_EQ(attention_decode_splits(kDecodeTargetPrograms / 2 + 1, 1 << 20, false), 1);
  EXPECT_EQ(attention_decode_splits(0, 8192, false), 1);
  // A symbolic cache length: by the program count alone (its value at the hints is not read).
  EXPECT_EQ(attention_decode_splits(4, 2, true), kDecodeMaxSplits);
  EXPECT_EQ(attention_decode_splits(32, 2, true), 8);
  EXPECT_EQ(attention_decode_splits(200, 1 << 20, true), 1);
}

TEST(TritonAttentionDecode, PackingRuleTakesSmallGroupsOfStaticSizes) {
  auto packed = [](const std::string& q, const std::string& kv, const std::string& attrs = "",
                   const std::string& mask = "") {
    std::string heads;
    for (const auto& k : cuda_module(attention_graph(q, kv, attrs, mask)).kernels) {
      const size_t at = k.decorator.find("packed_heads=");
      heads += at == std::string::npos ? "-" : k.decorator.substr(at + 13, 1);
    }
    return heads;  // per kernel: its group, or "-"
  };
  EXPECT_EQ(attention_packed_block(1), 16);
  EXPECT_EQ(attention_packed_block(12), 16);
  EXPECT_EQ(attention_packed_block(17), 32);
  EXPECT_EQ(attention_packed_block(kPackMaxRows), kPackMaxRows);
  // Split (partial, combine: the combine reads rows and is not packed) or one kernel.
  EXPECT_EQ(packed("bf16[1, 32, 1, 128]", "bf16[1, 8, 8192, 128]"), "4-");
  EXPECT_EQ(packed("bf16[1, 32, 1, 128]", "bf16[1, 8, 1000, 128]"), "4");
  EXPECT_EQ(packed("f32[2, 8, 8, 64]", "f32[2, 1, 300, 64]", "causal=true"), "8");  // 64 rows
  EXPECT_EQ(packed("f32[2, 8, 9, 64]", "f32[2, 1, 300, 64]", "causal=true"), "-");  // 72 rows
  EXPECT_EQ(packed("f32[1, 4, 16, 64]", "f32[1, 2, 300, 64]"), "2");
  EXPECT_EQ(packed("f32[1, 4, 33, 64]", "f32[1, 2, 300, 64]"), "-");
  EXPECT_EQ(packed("f32[1, 4, 1, 64]", "f32[1, 4, 300, 64]"), "-");  // no group
  // A symbolic cache length is packed; a symbolic batch or query length is not (the program
  // count and the row mapping are printed).
  EXPECT_EQ(packed("f32[1, 4, 1, 64]", "f32[1, 2, t, 64]"), "2-");
  EXPECT_EQ(packed("f32[1, 4, s, 64]", "f32[1, 2, t, 64]"), "-");
  EXPECT_EQ(packed("f32[n, 4, 1, 64]", "f32[n, 2, t, 64]"), "-");
  // The backward's kernels keep their programs per query head; the forward of a training step
  // is packed and stores its logsumexp per packed row.
  TritonModule m = cuda_module(
      "input q: f32[1, 4, 3, 64]\ninput k: f32[1, 1, 300, 64]\ninput v: f32[1, 1, 300, 64]\n"
      "input dy: f32[1, 4, 3, 64]\ny = attention(q, k, v)\nl = attention_lse(q, k)\n"
      "dq = attention_grad(q, k, v, y, dy, l) {wrt=\"q\"}\noutput dq\noutput l\noutput y\n");
  int forward = 0;
  for (const auto& k : m.kernels) {
    const bool is_forward = !contains(k.decorator, "kernel=");
    EXPECT_EQ(contains(k.decorator, "packed_heads=4"), is_forward) << k.decorator;
    if (!is_forward) continue;
    ++forward;
    EXPECT_TRUE(contains(k.code, "tl.store(out_ptr1 + (bkv * 12 + rm), lse, mask=rm < ROWS)"))
        << k.code;
  }
  EXPECT_EQ(forward, 1);
}

TEST(TritonAttentionDecode, DecodeShapeIsAPartialAndACombineKernel) {
  // 32 query heads on 8 kv heads, Tq = 1: a program per kv head, its 4 query heads the rows of
  // the tile: 8 programs, 32 chunks of 256 keys.
  TritonModule m = cuda_module(attention_graph("bf16[1, 32, 1, 128]", "bf16[1, 8, 8192, 128]", ""));
  ASSERT_EQ(m.kernels.size(), 2u);
  const TritonKernelSource &partial = m.kernels[0], &combine = m.kernels[1];
  EXPECT_TRUE(contains(partial.decorator, "kernel='decode_partial', splits=32, packed_heads=4,"))
      << partial.decorator;
  EXPECT_TRUE(contains(combine.decorator, "kernel='decode_combine', splits=32, name="))
      << combine.decorator;
  std::vector<std::string> args;
  for (const auto& a : partial.args) args.push_back(a.name);
  EXPECT_EQ(args, (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "out_ptr0", "out_ptr1",
                                            "out_ptr2"}));
  args.clear();
  for (const auto& a : combine.args) args.push_back(a.name);
  EXPECT_EQ(args, (std::vector<std::string>{"arg_acc", "arg_max", "arg_sum", "out_ptr0"}));
  // The program is per (batch x kv head, chunk); row r of the tile is query head kvh * 4 + r.
  EXPECT_TRUE(contains(partial.code,
                       "    ROWS = 4  # TQ * 4 heads: the rows of a kv head's group\n"
                       "    pid_m = tl.program_id(0)\n"
                       "    bkv = tl.program_id(1)  # batch x kv head\n"
                       "    b = bkv // 8\n"
                       "    kvh = bkv % 8\n"))
      << partial.code;
  EXPECT_TRUE(contains(partial.code,
                       "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n"
                       "    hq = kvh * 4 + rm\n"
                       "    rn0 = tl.arange(0, BLOCK_N)\n"));
  EXPECT_FALSE(contains(partial.code, "bh"));
  EXPECT_FALSE(contains(partial.code, "iq["));  // Tq = 1: every row is query row 0
  // q per row (its base holds the batch only); K and V per kv head: each K and V block is
  // loaded once by the kv head's program, for all of its query heads.
  EXPECT_TRUE(contains(partial.code, "    Q = arg_Q\n"));
  EXPECT_TRUE(contains(partial.code,
                       "q = tl.load(Q + (hq[:, None] * 128 + rd[None, :]), "
                       "mask=(rm[:, None] < ROWS), other=0.0)"));
  EXPECT_TRUE(contains(partial.code, "K = arg_K + (kvh * 1048576)\n"));
  EXPECT_TRUE(contains(partial.code, "V = arg_V + (kvh * 1048576)\n"));
  EXPECT_EQ(partial.code.find("tl.load(K"), partial.code.rfind("tl.load(K"));
  EXPECT_EQ(partial.code.find("tl.load(V"), partial.code.rfind("tl.load(V"));
  EXPECT_TRUE(contains(partial.code, "split = tl.program_id(2)"));
  EXPECT_TRUE(contains(partial.code,
                       "chunk = ((TK + 31) // 32 + BLOCK_N - 1) // BLOCK_N * BLOCK_N\n"
                       "    chunk_lo = split * chunk\n"
                       "    chunk_hi = tl.minimum(chunk_lo + chunk, TK)"));
  // 8192 keys: every block divides them, no bounds mask.
  EXPECT_TRUE(contains(partial.code, "for start_n in range(chunk_lo, chunk_hi, BLOCK_N):"));
  EXPECT_FALSE(contains(partial.code, "rn[:, None] < TK"));
  // The kv head's rows are rows bkv * 4 + r of [B * H * Tq]: the partials' layout is the
  // unpacked one, and the combine reads it as before.
  EXPECT_TRUE(contains(partial.code, "prow = split * 32 + bkv * 4 + rm"));
  EXPECT_TRUE(contains(partial.code, "tl.store(out_ptr1 + prow, m_i, mask=rm < ROWS)"));
  EXPECT_TRUE(contains(partial.code, "tl.store(out_ptr2 + prow, l_i, mask=rm < ROWS)"));
  EXPECT_TRUE(contains(partial.code,
                       "tl.store(out_ptr0 + (prow[:, None] * 128 + rdv[None, :]), acc, "
                       "mask=(rm[:, None] < ROWS))"));
  EXPECT_FALSE(contains(partial.code, "acc / l_i"));  // unnormalized
  // The combine: M over the chunks with the forward's m_safe, weights exp2(m_s - M).
  EXPECT_TRUE(contains(combine.code, "m_safe = tl.where(m_max == float(\"-inf\"), 0.0, m_max)"))
      << combine.code;
  EXPECT_TRUE(contains(combine.code, "for s in range(0, 32):"));
  EXPECT_TRUE(contains(combine.code,
                       "w = tl.math.exp2(tl.load(arg_max + (s * 32 + rows), mask=row_mask, "
                       "other=float(\"-inf\")) - m_safe)"));
  EXPECT_TRUE(contains(combine.code,
                       "l_sum += tl.load(arg_sum + (s * 32 + rows), mask=row_mask, "
                       "other=0.0) * w\n"));
  EXPECT_TRUE(contains(combine.code,
                       "acc += tl.load(arg_acc + (s * 4096 + rows[:, None] * 128 + rdv[None, :]), "
                       "mask=row_mask[:, None], other=0.0) * w[:, None]\n"));
  EXPECT_TRUE(contains(combine.code, "o = acc / l_sum[:, None]"));
  EXPECT_TRUE(contains(combine.code, "o.to(tl.bfloat16), mask=row_mask[:, None])"));
  EXPECT_FALSE(contains(combine.code, "TK == 0"));  // a static Tk is long
  // The wrapper allocates the partials and launches both.
  EXPECT_TRUE(contains(m.source,
                       "part0 = runtime.empty_strided((32, 32, 1, 128), "
                       "(4096, 128, 128, 1), torch.float32)"))
      << m.source;
  EXPECT_TRUE(contains(m.source,
                       "part1 = runtime.empty_strided((32, 32, 1), (32, 1, 1), "
                       "torch.float32)"));
  EXPECT_TRUE(contains(m.source, ".run(arg0_1, arg1_1, arg2_1, part0, part1, part2)"));
  EXPECT_TRUE(contains(m.source, ".run(part0, part1, part2, out0)"));
}

TEST(TritonAttentionDecode, UngroupedHeadsKeepAProgramPerQueryHead) {
  // No group to pack (32 kv heads): 32 programs, 8 chunks, a row block per query head.
  const TritonModule m =
      cuda_module(attention_graph("bf16[1, 32, 1, 128]", "bf16[1, 32, 8192, 128]", ""));
  ASSERT_EQ(m.kernels.size(), 2u);
  const std::string& code = m.kernels[0].code;
  EXPECT_TRUE(contains(m.kernels[0].decorator, "kernel='decode_partial', splits=8, name="))
      << m.kernels[0].decorator;
  EXPECT_TRUE(contains(code, "bh = tl.program_id(1)\n    b = bh // 32\n    h = bh % 32\n")) << code;
  EXPECT_TRUE(contains(code, "Q = arg_Q + (h * 128)"));
  EXPECT_TRUE(contains(code, "K = arg_K + (h * 1048576)"));
  EXPECT_FALSE(contains(code, "ROWS"));
  EXPECT_TRUE(contains(code, "prow = split * 32 + bh + rm"));
  EXPECT_TRUE(contains(code, "tl.store(out_ptr1 + prow, m_i, mask=rm < TQ)"));
}

TEST(TritonAttentionDecode, PackedRowsIndexQMasksAndCausalPerRow) {
  // Tq = 3, 8 heads on 2 kv heads: rows r = (query head kvh * 4 + r // 3, query row r % 3), 12
  // of a 16-row tile (masked past ROWS). 4 programs over 5000 keys: 19 chunks.
  const std::string q = "bf16[2, 8, 3, 80]", kv = "bf16[2, 2, 5000, 80]";
  const TritonModule per_head =
      cuda_module(attention_graph(q, kv, "causal=true", "bool[2, 8, 3, 5000]"));
  ASSERT_EQ(per_head.kernels.size(), 2u);
  const std::string& code = per_head.kernels[0].code;
  EXPECT_TRUE(contains(per_head.kernels[0].decorator, "splits=19, packed_heads=4,"))
      << per_head.kernels[0].decorator;
  EXPECT_TRUE(contains(code, "    ROWS = 12  #"));
  EXPECT_TRUE(contains(code, "    hq = kvh * 4 + rm // TQ\n    iq = rm % TQ\n")) << code;
  EXPECT_TRUE(contains(code, "Q = arg_Q + (b * 1920)\n"));
  EXPECT_TRUE(contains(code, "K = arg_K + (b * 800000 + kvh * 400000)\n"));
  EXPECT_TRUE(contains(code, "M = arg_mask + (b * 120000)\n"));
  EXPECT_TRUE(contains(code,
                       "q = tl.load(Q + (hq[:, None] * 240 + iq[:, None] * 80 + rd[None, :]), "
                       "mask=(rm[:, None] < ROWS) & (rd[None, :] < 80), other=0.0)"));
  EXPECT_TRUE(contains(code,
                       "mv = tl.load(M + (hq[:, None] * 15000 + iq[:, None] * 5000 + rn[None, "
                       ":]), mask=(rm[:, None] < ROWS) & (rn[None, :] < TK), other=0)"));
  // Causal per row (bottom-right: row r sees keys j <= iq + TK - TQ); the keys every row sees
  // (below TK - TQ + 1 = 4998) run without the causal where, clamped to the chunk.
  EXPECT_TRUE(contains(code,
                       "    hi = TK\n"
                       "    full = 4998  # TK - TQ + 1\n"
                       "    full = (full // BLOCK_N) * BLOCK_N\n"
                       "    # only this program's chunk of keys\n"
                       "    hi = tl.minimum(hi, chunk_hi)\n"));
  EXPECT_TRUE(
      contains(code, "s = tl.where(rn[None, :] <= iq[:, None] + (TK - TQ), s, float(\"-inf\"))"));
  EXPECT_TRUE(contains(code, "prow = split * 48 + bkv * 12 + rm"));
  // A mask broadcast over heads: per query row only; over heads and rows: a column of zeros
  // (the address stays a [BLOCK_M, BLOCK_N] tile).
  EXPECT_TRUE(
      contains(cuda_module(attention_graph(q, kv, "", "f32[2, 1, 3, 5000]")).kernels[0].code,
               "mv = tl.load(M + (iq[:, None] * 5000 + rn[None, :])"));
  EXPECT_TRUE(contains(cuda_module(attention_graph(q, kv, "", "f32[5000]")).kernels[0].code,
                       "mv = tl.load(M + (rm[:, None] * 0 + rn[None, :])"));
  // Tq = 1: no query row; the causal limit is the same for every row, and a symbolic TK
  // computes `full` at run time.
  const std::string one =
      cuda_module(attention_graph("f32[1, 8, 1, 64]", "f32[1, 2, t, 64]", "causal=true"))
          .kernels[0]
          .code;
  EXPECT_TRUE(contains(one, "full = tl.maximum(TK - TQ + 1, 0)\n")) << one;
  EXPECT_TRUE(contains(one, "s = tl.where(rn[None, :] <= (TK - TQ), s, float(\"-inf\"))"));
  EXPECT_FALSE(contains(one, "iq["));
}

TEST(TritonAttentionDecode, UnsplitForwardIsPackedToo) {
  // 1000 keys: one kernel, a program per (batch, kv head) over the 4 x 2 rows of its group,
  // stored at rows bkv * 8 + r of the result (and of the logsumexp).
  const TritonModule m = cuda_module(
      "input q: bf16[8, 32, 2, 128]\ninput k: bf16[8, 8, 1000, 128]\ninput v: bf16[8, 8, 1000, "
      "128]\ny = attention(q, k, v) {causal=true}\nl = attention_lse(q, k) {causal=true}\n"
      "output y\noutput l\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  const TritonKernelSource& k = m.kernels[0];
  EXPECT_TRUE(contains(k.decorator, "dtype='bfloat16', packed_heads=4, name=")) << k.decorator;
  EXPECT_TRUE(contains(k.code, "# flash attention and its logsumexp"));
  EXPECT_TRUE(contains(k.code, "    hq = kvh * 4 + rm // TQ\n    iq = rm % TQ\n"));
  // Not chunked: the keys below TK - TQ + 1 = 999, rounded down to a block, then the diagonal.
  EXPECT_TRUE(contains(k.code, "full = 999  # TK - TQ + 1\n")) << k.code;
  EXPECT_TRUE(contains(k.code, "for start_n in range(0, full, BLOCK_N):"));
  EXPECT_TRUE(contains(k.code, "for start_n in range(full, hi, BLOCK_N):"));
  EXPECT_TRUE(contains(k.code,
                       "tl.store(out_ptr0 + (bkv * 1024 + rm[:, None] * 128 + rdv[None, :]), "
                       "o.to(tl.bfloat16), mask=(rm[:, None] < ROWS))"));
  EXPECT_TRUE(contains(k.code, "tl.store(out_ptr1 + (bkv * 8 + rm), lse, mask=rm < ROWS)"));
}

TEST(TritonAttentionDecode, ShortKeysOrEnoughProgramsStayOneKernel) {
  EXPECT_EQ(cuda_module(attention_graph("bf16[1, 32, 1, 128]", "bf16[1, 8, 1000, 128]", ""))
                .kernels.size(),
            1u);
  // 8 x 32 heads without a group: 256 programs, about two per SM already.
  EXPECT_EQ(cuda_module(attention_graph("bf16[8, 32, 1, 128]", "bf16[8, 32, 8192, 128]", ""))
                .kernels.size(),
            1u);
  // The same on 8 kv heads is packed into 8 x 8 programs: split into 4 chunks.
  const TritonModule gqa =
      cuda_module(attention_graph("bf16[8, 32, 1, 128]", "bf16[8, 8, 8192, 128]", ""));
  ASSERT_EQ(gqa.kernels.size(), 2u);
  EXPECT_TRUE(contains(gqa.kernels[0].decorator, "splits=4, packed_heads=4,"))
      << gqa.kernels[0].decorator;
  // A prefill (Tq = Tk) has programs enough too.
  EXPECT_EQ(cuda_module(
                attention_graph("bf16[1, 32, 4096, 128]", "bf16[1, 32, 4096, 128]", "causal=true"))
                .kernels.size(),
            1u);
}

TEST(TritonAttentionDecode, CausalChunksClampTheDiagonalLoopsAndKeepMasks) {
  // Tq = 4 causal over 4097 keys, D = 80 (padded), a bool mask: 8 programs, 16 chunks (of 256 keys
  // at least).
  TritonModule m = cuda_module(attention_graph("f32[2, 4, 4, 80]", "f32[2, 4, 4097, 80]",
                                               "causal=true", "bool[2, 1, 1, 4097]"));
  ASSERT_EQ(m.kernels.size(), 2u);
  const std::string& code = m.kernels[0].code;
  EXPECT_TRUE(contains(m.kernels[0].decorator, "splits=16,")) << m.kernels[0].decorator;
  EXPECT_TRUE(contains(code,
                       "    hi = tl.minimum(hi, chunk_hi)\n"
                       "    full = tl.minimum(tl.maximum(full, chunk_lo), chunk_hi)\n"
                       "    for start_n in range(chunk_lo, full, BLOCK_N):"))
      << code;
  EXPECT_TRUE(contains(code, "for start_n in range(full, hi, BLOCK_N):"));
  // The diagonal loop may cross TK (4097): its loads are bounded; the padding of D and Dv is
  // masked everywhere, and the broadcast mask is read through its strides.
  EXPECT_TRUE(contains(code, "mask=(rn[:, None] < TK) & (rd[None, :] < 80), other=0.0)"));
  EXPECT_TRUE(contains(code, "mv = tl.load(M + (rm[:, None] * 0 + rn[None, :])"));
  EXPECT_TRUE(contains(code, "mask=(rm[:, None] < TQ) & (rdv[None, :] < 80))"));
  const std::string& combine = m.kernels[1].code;
  EXPECT_TRUE(contains(combine, "rdv = tl.arange(0, 128)"));
  EXPECT_TRUE(contains(combine, "mask=row_mask[:, None] & (rdv[None, :] < 80)")) << combine;
  // Not causal, an odd length: whole blocks of the chunk, then TK's partial last block.
  const std::string odd =
      cuda_module(attention_graph("f32[1, 2, 3, 64]", "f32[1, 2, 4097, 64]", "")).kernels[0].code;
  EXPECT_TRUE(
      contains(odd,
               "for start_n in range(chunk_lo, tl.minimum(chunk_hi, (TK // BLOCK_N) * BLOCK_N), "
               "BLOCK_N):"))
      << odd;
  EXPECT_TRUE(
      contains(odd,
               "for start_n in range(tl.maximum(chunk_lo, (TK // BLOCK_N) * BLOCK_N), chunk_hi, "
               "BLOCK_N):"));
}

TEST(TritonAttentionDecode, SymbolicCacheLengthSplitsByTheProgramCount) {
  // A decode step over a cache of t positions: 4 programs, the most chunks; the chunk length
  // and an empty cache are the kernels' business at run time.
  TritonModule m = cuda_module(attention_graph("f32[1, 4, 1, 64]", "f32[1, 4, t, 64]", ""));
  ASSERT_EQ(m.kernels.size(), 2u);
  EXPECT_TRUE(contains(m.kernels[0].decorator, "'kv_len': 'ks0'")) << m.kernels[0].decorator;
  EXPECT_TRUE(contains(m.kernels[0].decorator, fmt::format("splits={},", kDecodeMaxSplits)));
  EXPECT_TRUE(contains(m.kernels[0].code, "TK = ks0"));
  EXPECT_TRUE(contains(m.kernels[0].code, "chunk = ((TK + 63) // 64 + BLOCK_N - 1)"));
  EXPECT_TRUE(contains(m.kernels[1].code, "o = tl.where(TK == 0, 0.0, o)")) << m.kernels[1].code;
  EXPECT_EQ(m.kernels[1].size_args, (std::vector<std::string>{"ks0"}));
  // A symbolic query length: the program count is unknown (a prefill would pay the partials'
  // traffic), one kernel.
  EXPECT_EQ(cuda_module(attention_graph("f32[1, 4, s, 64]", "f32[1, 4, t, 64]", "")).kernels.size(),
            1u);
}

TEST(TritonAttentionDecode, TrainingForwardSplitsAndStoresItsLogsumexpNotTheBackward) {
  TritonModule m = cuda_module(
      "input q: f32[1, 2, 1, 64]\ninput k: f32[1, 2, 4096, 64]\ninput v: f32[1, 2, 4096, 64]\n"
      "input dy: f32[1, 2, 1, 64]\ny = attention(q, k, v)\nl = attention_lse(q, k)\n"
      "dq = attention_grad(q, k, v, y, dy, l) {wrt=\"q\"}\noutput dq\noutput l\n");
  int grad_q = 0, combine = 0;
  for (const auto& k : m.kernels) {
    if (contains(k.decorator, "kernel='grad_q'") || contains(k.decorator, "kernel='lse'")) {
      grad_q += contains(k.decorator, "kernel='grad_q'");
      EXPECT_FALSE(contains(k.decorator, "splits=")) << k.decorator;
    }
    // Where the forward's kernel also stores the logsumexp (sched/fusion.h), the combine does.
    if (contains(k.decorator, "kernel='decode_combine'") && k.args.size() == 5) {
      ++combine;
      EXPECT_EQ(k.args[4].name, "out_ptr1");
      EXPECT_TRUE(contains(k.code, "lse = (m_max + tl.math.log2(l_sum)) * 0.6931471805599452"))
          << k.code;
      EXPECT_TRUE(contains(k.code, "tl.store(out_ptr1 + rows, lse, mask=row_mask)"));
    }
  }
  EXPECT_EQ(grad_q, 1);
  EXPECT_LE(combine, 1);
}

}  // namespace
}  // namespace coil

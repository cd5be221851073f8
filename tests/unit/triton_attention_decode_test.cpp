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

TEST(TritonAttentionDecode, DecodeShapeIsAPartialAndACombineKernel) {
  TritonModule m = cuda_module(attention_graph("bf16[1, 32, 1, 128]", "bf16[1, 8, 8192, 128]", ""));
  ASSERT_EQ(m.kernels.size(), 2u);
  const TritonKernelSource &partial = m.kernels[0], &combine = m.kernels[1];
  EXPECT_TRUE(contains(partial.decorator, "kernel='decode_partial', splits=8,"))
      << partial.decorator;
  EXPECT_TRUE(contains(combine.decorator, "kernel='decode_combine', splits=8,"))
      << combine.decorator;
  std::vector<std::string> args;
  for (const auto& a : partial.args) args.push_back(a.name);
  EXPECT_EQ(args, (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "out_ptr0", "out_ptr1",
                                            "out_ptr2"}));
  args.clear();
  for (const auto& a : combine.args) args.push_back(a.name);
  EXPECT_EQ(args, (std::vector<std::string>{"arg_acc", "arg_max", "arg_sum", "out_ptr0"}));
  // The forward's program (GQA 4:1) over the keys of chunk program_id(2).
  EXPECT_TRUE(contains(partial.code, "kvh = h // 4")) << partial.code;
  EXPECT_TRUE(contains(partial.code, "split = tl.program_id(2)"));
  EXPECT_TRUE(contains(partial.code,
                       "chunk = ((TK + 7) // 8 + BLOCK_N - 1) // BLOCK_N * BLOCK_N\n"
                       "    chunk_lo = split * chunk\n"
                       "    chunk_hi = tl.minimum(chunk_lo + chunk, TK)"));
  // 8192 keys: every block divides them, no bounds mask.
  EXPECT_TRUE(contains(partial.code, "for start_n in range(chunk_lo, chunk_hi, BLOCK_N):"));
  EXPECT_FALSE(contains(partial.code, "rn[:, None] < TK"));
  EXPECT_TRUE(contains(partial.code, "prow = split * 32 + bh + rm"));
  EXPECT_TRUE(contains(partial.code, "tl.store(out_ptr1 + prow, m_i, mask=rm < TQ)"));
  EXPECT_TRUE(contains(partial.code, "tl.store(out_ptr2 + prow, l_i, mask=rm < TQ)"));
  EXPECT_TRUE(contains(partial.code,
                       "tl.store(out_ptr0 + (prow[:, None] * 128 + rdv[None, :]), acc, "
                       "mask=(rm[:, None] < TQ))"));
  EXPECT_FALSE(contains(partial.code, "acc / l_i"));  // unnormalized
  // The combine: M over the chunks with the forward's m_safe, weights exp2(m_s - M).
  EXPECT_TRUE(contains(combine.code, "m_safe = tl.where(m_max == float(\"-inf\"), 0.0, m_max)"))
      << combine.code;
  EXPECT_TRUE(contains(combine.code, "for s in range(0, 8):"));
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
                       "part0 = runtime.empty_strided((8, 32, 1, 128), "
                       "(4096, 128, 128, 1), torch.float32)"))
      << m.source;
  EXPECT_TRUE(contains(m.source,
                       "part1 = runtime.empty_strided((8, 32, 1), (32, 1, 1), "
                       "torch.float32)"));
  EXPECT_TRUE(contains(m.source, ".run(arg0_1, arg1_1, arg2_1, part0, part1, part2)"));
  EXPECT_TRUE(contains(m.source, ".run(part0, part1, part2, out0)"));
}

TEST(TritonAttentionDecode, ShortKeysOrEnoughProgramsStayOneKernel) {
  EXPECT_EQ(cuda_module(attention_graph("bf16[1, 32, 1, 128]", "bf16[1, 8, 1000, 128]", ""))
                .kernels.size(),
            1u);
  // 8 x 32 heads: 256 programs, about two per SM already.
  EXPECT_EQ(cuda_module(attention_graph("bf16[8, 32, 1, 128]", "bf16[8, 8, 8192, 128]", ""))
                .kernels.size(),
            1u);
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

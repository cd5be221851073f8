// The GPU's flash-attention template (codegen/triton/triton_attention.cpp): which graphs become
// it, and the decisions printed into the kernel (GQA, masks, causal loops, bounds and padding
// masks, precision, edge cases). Nothing here runs Triton: python/tests/test_attention_emulated.py
// executes the kernels' bodies on the CPU, tests/gpu/test_attention.py on the GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "driver/pipeline.h"
#include "graph/text_format.h"

namespace coil {
namespace {

TritonModule cuda_module(const std::string& text, const std::string& precision = "highest") {
  CompileOptions o;
  o.device = "cuda";
  o.precision = precision;
  return generate_program(parse_graph(text, "<test>"), o).triton;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

std::string attention_graph(const std::string& q, const std::string& k, const std::string& v,
                            const std::string& attrs, const std::string& mask = "") {
  std::string text = "input q: " + q + "\ninput k: " + k + "\ninput v: " + v + "\n";
  if (!mask.empty()) text += "input m: " + mask + "\n";
  text += "y = attention(q, k, v" + std::string(mask.empty() ? "" : ", m") + ") {" + attrs +
          "}\noutput y\n";
  return text;
}

TEST(TritonAttention, CausalGroupedQueryIsOneFlashKernel) {
  TritonModule m = cuda_module(attention_graph("f32[2, 4, 64, 32]", "f32[2, 2, 64, 32]",
                                               "f32[2, 2, 64, 32]", "causal=true"));
  ASSERT_EQ(m.kernels.size(), 1u);
  ASSERT_TRUE(m.externs.empty());
  const TritonKernelSource& k = m.kernels[0];
  EXPECT_EQ(k.name, "triton_tem_fused_attention_0");
  EXPECT_TRUE(contains(k.decorator,
                       "@heuristics.attention(shape={'batch': 2, 'heads': 4, "
                       "'kv_heads': 2, 'q_len': 64, 'kv_len': 64, 'head_dim': 32, "
                       "'value_dim': 32}, causal=True, dtype='float32'"))
      << k.decorator;
  EXPECT_TRUE(contains(k.code, "kvh = h // 2"));
  EXPECT_TRUE(contains(k.code, "K = arg_K + (b * 4096 + kvh * 2048)"));
  // Unmasked blocks, then the diagonal ones with the causal where; nothing past `hi`.
  EXPECT_TRUE(contains(k.code, "for start_n in range(0, full, BLOCK_N):"));
  EXPECT_TRUE(contains(k.code, "for start_n in range(full, hi, BLOCK_N):"));
  EXPECT_EQ(count(k.code, "rm[:, None] + (TK - TQ), s, float(\"-inf\"))"), 1u);
  // 64 is divided by every block the runtime may pick; D = 32 is a power of two: no masks.
  EXPECT_FALSE(contains(k.code, "mask=")) << k.code;
  EXPECT_EQ(count(k.code, "input_precision='ieee'"), 4u);
  EXPECT_TRUE(contains(k.code, "o = acc / l_i[:, None]"));
  std::vector<std::string> args;
  for (const auto& a : k.args) args.push_back(a.name);
  EXPECT_EQ(args, (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "out_ptr0"}));
  EXPECT_TRUE(contains(m.source, "triton_tem_fused_attention_0.run(arg0_1, arg1_1, arg2_1, out0)"))
      << m.source;
}

TEST(TritonAttention, Fp32PrecisionAndLowPrecisionDots) {
  const std::string f32 =
      attention_graph("f32[1, 2, 64, 64]", "f32[1, 2, 64, 64]", "f32[1, 2, 64, 64]", "");
  const std::string high = cuda_module(f32, "high").kernels[0].code;
  EXPECT_EQ(count(high, "input_precision='tf32'"), 2u) << high;
  EXPECT_FALSE(contains(high, "ieee"));
  for (const char* dt : {"bf16", "f16"}) {
    const std::string t = std::string(dt) + "[1, 2, 64, 64]";
    const TritonKernelSource k = cuda_module(attention_graph(t, t, t, "")).kernels[0];
    EXPECT_FALSE(contains(k.code, "input_precision")) << dt;
    EXPECT_TRUE(contains(k.code, "tl.dot(p.to(v.dtype), v)")) << dt;
    EXPECT_TRUE(
        contains(k.code, dt == std::string("bf16") ? "o.to(tl.bfloat16)" : "o.to(tl.float16)"));
  }
}

TEST(TritonAttention, BoundsAndPaddingMasksOnlyWhereABlockMayCross) {
  // Tq = 100, Tk = 300: partial blocks; D = 80 pads to 128, Dv = 64 does not.
  TritonModule m = cuda_module(attention_graph("bf16[1, 8, 100, 80]", "bf16[1, 2, 300, 80]",
                                               "bf16[1, 2, 300, 64]", "causal=true"));
  const std::string& code = m.kernels[0].code;
  EXPECT_TRUE(contains(code, "rd = tl.arange(0, 128)"));
  EXPECT_TRUE(contains(code, "rdv = tl.arange(0, 64)"));
  EXPECT_TRUE(contains(code, "mask=(rm[:, None] < TQ) & (rd[None, :] < 80), other=0.0)"));
  // Keys: the unmasked loop never crosses Tk; the diagonal loop's loads do.
  EXPECT_EQ(count(code, "mask=(rd[None, :] < 80), other=0.0)"), 1u) << code;
  EXPECT_EQ(count(code, "mask=(rn[:, None] < TK) & (rd[None, :] < 80), other=0.0)"), 1u);
  EXPECT_EQ(count(code, "mask=(rn[:, None] < TK), other=0.0)"), 1u);
  EXPECT_TRUE(contains(code, "o.to(tl.bfloat16), mask=(rm[:, None] < TQ))"));
  // Not causal: whole blocks without masks, then the partial last one with the bound where.
  TritonModule nc = cuda_module(
      attention_graph("f32[1, 1, 7, 16]", "f32[1, 1, 1000, 16]", "f32[1, 1, 1000, 16]", ""));
  EXPECT_TRUE(contains(nc.kernels[0].code,
                       "for start_n in range((TK // BLOCK_N) * BLOCK_N, TK, BLOCK_N):"));
  EXPECT_EQ(count(nc.kernels[0].code, "s = tl.where(rn[None, :] < TK, s, float(\"-inf\"))"), 1u);
}

TEST(TritonAttention, MasksAreReadThroughBroadcastStrides) {
  const std::string q = "f32[2, 4, 128, 64]", kv = "f32[2, 4, 96, 64]";
  const std::string add =
      cuda_module(attention_graph(q, kv, kv, "", "f32[2, 1, 1, 96]")).kernels[0].code;
  EXPECT_TRUE(contains(add, "M = arg_mask + (b * 96)")) << add;
  EXPECT_TRUE(contains(add, "mv = tl.load(M + (rm[:, None] * 0 + rn[None, :]))"));
  EXPECT_TRUE(contains(add, "s = s + mv * 1.4426950408889634"));
  const std::string keep =
      cuda_module(attention_graph(q, kv, kv, "", "bool[128, 96]")).kernels[0].code;
  EXPECT_TRUE(contains(keep, "M = arg_mask\n")) << keep;
  EXPECT_TRUE(contains(keep, "mv = tl.load(M + (rm[:, None] * 96 + rn[None, :]))"));
  EXPECT_TRUE(contains(keep, "s = tl.where(mv != 0, s, float(\"-inf\"))"));
}

TEST(TritonAttention, NoKeyStoresZerosWithoutALoop) {
  const TritonKernelSource k =
      cuda_module(attention_graph("f32[1, 2, 5, 16]", "f32[1, 2, 0, 16]", "f32[1, 2, 0, 16]", ""))
          .kernels[0];
  EXPECT_FALSE(contains(k.code, "for start_n"));
  EXPECT_TRUE(contains(k.code, "o = acc  # no key"));
}

TEST(TritonAttention, HeadDimsAbove256AreWrittenOut) {
  auto kernels_of = [](int64_t d, int64_t dv) {
    const std::string q = fmt::format("f32[1, 2, 64, {}]", d);
    const std::string v = fmt::format("f32[1, 2, 64, {}]", dv);
    return cuda_module(attention_graph(q, q, v, ""));
  };
  TritonModule at_limit = kernels_of(256, 256);
  ASSERT_EQ(at_limit.kernels.size(), 1u);
  EXPECT_EQ(at_limit.kernels[0].name, "triton_tem_fused_attention_0");
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{300, 64}, {64, 300}}) {
    TritonModule m = kernels_of(d, dv);
    EXPECT_FALSE(m.externs.empty()) << d << " " << dv;  // q @ k^T and p @ v through cuBLAS
    for (const auto& k : m.kernels) EXPECT_FALSE(contains(k.name, "triton_tem")) << k.name;
  }
}

TEST(TritonAttention, WrittenOutPatternBecomesTheTemplate) {
  TritonModule m = cuda_module(
      "input q: f32[2, 4, 64, 32]\ninput k: f32[2, 4, 64, 32]\ninput v: f32[2, 4, 64, 32]\n"
      "const c: f32[] = [0.17677669]\nkt = transpose(k) {dim0=2, dim1=3}\ns = matmul(q, kt)\n"
      "ss = mul(s, c)\np = softmax(ss) {axis=-1}\ny = matmul(p, v)\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_TRUE(contains(m.kernels[0].name, "triton_tem_fused")) << m.kernels[0].name;
  EXPECT_TRUE(contains(m.kernels[0].decorator, "@heuristics.attention("));
  // A bf16 GPT block's masked_fill as torch 1.13 writes it: bmm views, a bool mask through
  // where(logical_not(m), -inf, s) (m read as it is: no kernel for the mask either).
  TritonModule gpt = cuda_module(
      "input q: bf16[1, 4, 64, 32]\ninput k: bf16[1, 4, 64, 32]\ninput v: bf16[1, 4, 64, 32]\n"
      "input m: bool[64, 64]\nkt = transpose(k) {dim0=-2, dim1=-1}\n"
      "qe = expand(q) {shape=[1, 4, 64, 32]}\nq3 = reshape(qe) {shape=[4, 64, 32]}\n"
      "ke = expand(kt) {shape=[1, 4, 32, 64]}\nk3 = reshape(ke) {shape=[4, 32, 64]}\n"
      "s3 = matmul(q3, k3)\ns = reshape(s3) {shape=[1, 4, 64, 64]}\n"
      "c = full() {dtype=bf16, shape=[], value=0.125}\nss = mul(s, c)\nnm = logical_not(m)\n"
      "ninf = full() {dtype=bf16, shape=[], value=-inf}\nw = where(nm, ninf, ss)\n"
      "p = softmax(w) {axis=-1}\npe = expand(p) {shape=[1, 4, 64, 64]}\n"
      "p3 = reshape(pe) {shape=[4, 64, 64]}\nve = expand(v) {shape=[1, 4, 64, 32]}\n"
      "v3 = reshape(ve) {shape=[4, 64, 32]}\ny3 = matmul(p3, v3)\n"
      "y = reshape(y3) {shape=[1, 4, 64, 32]}\noutput y\n");
  ASSERT_EQ(gpt.kernels.size(), 1u);
  EXPECT_TRUE(contains(gpt.kernels[0].decorator, "@heuristics.attention("));
}

TEST(TritonAttention, LargeTensorsIndexWith64Bits) {
  const std::string code =
      cuda_module(attention_graph("bf16[64, 32, 8192, 128]", "bf16[64, 32, 8192, 128]",
                                  "bf16[64, 32, 8192, 128]", ""))
          .kernels[0]
          .code;
  EXPECT_TRUE(contains(code, "bh = tl.program_id(1).to(tl.int64)"));
  EXPECT_TRUE(contains(code, "rn0 = tl.arange(0, BLOCK_N).to(tl.int64)"));
}

}  // namespace
}  // namespace coil

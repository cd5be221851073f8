// The GPU's flash-attention backward templates (codegen/triton/triton_attention_backward.cpp):
// attention_lse and the three attention_grad kernels, what each prints (arguments, grids' loops,
// GQA, causal ranges, bounds and padding masks, dots, edge cases) and what stays written out.
// Nothing here runs Triton: python/tests/test_attention_backward_emulated.py executes the
// kernels' bodies on the CPU, tests/gpu/test_attention.py (group `backward`) on the GPU.
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

/// y = attention, l = attention_lse, dq, dk, dv = attention_grad: the graph of a training step.
std::string backward_graph(const std::string& dt, int64_t b, int64_t h, int64_t hkv, int64_t tq,
                           int64_t tk, int64_t d, int64_t dv, const std::string& attrs,
                           const std::string& mask = "") {
  std::string text = fmt::format(
      "input q: {0}[{1}, {2}, {4}, {6}]\ninput k: {0}[{1}, {3}, {5}, {6}]\n"
      "input v: {0}[{1}, {3}, {5}, {7}]\ninput dy: {0}[{1}, {2}, {4}, {7}]\n",
      dt, b, h, hkv, tq, tk, d, dv);
  const std::string m = mask.empty() ? "" : ", m";
  if (!mask.empty()) text += "input m: " + mask + "\n";
  const std::string sep = attrs.empty() ? "" : ", ";
  text += fmt::format("y = attention(q, k, v{0}) {{{1}}}\n", m, attrs);
  text += fmt::format("l = attention_lse(q, k{0}) {{{1}}}\n", m, attrs);
  for (const char* wrt : {"q", "k", "v"})
    text += fmt::format("d{0} = attention_grad(q, k, v, y, dy, l{1}) {{wrt=\"{0}\"{2}{3}}}\n", wrt,
                        m, sep, attrs);
  return text + "output y\noutput l\noutput dq\noutput dk\noutput dv\n";
}

/// The same step with attention_lse (and, `dv_too`, the gradient of v) over a copy of q (input
/// q2): not the forward's (dK's) scores, so it keeps a kernel of its own instead of sharing the
/// forward's (dK's) pass.
std::string lse_apart(std::string text, bool dv_too = false) {
  const std::string from = "l = attention_lse(q, k";
  text.replace(text.find(from), from.size(), "l = attention_lse(q2, k");
  if (dv_too) {
    const std::string dv = "dv = attention_grad(q, k";
    text.replace(text.find(dv), dv.size(), "dv = attention_grad(q2, k");
  }
  const std::string q = text.substr(0, text.find('\n') + 1);  // "input q: ..."
  return q + "input q2" + q.substr(q.find(':')) + text.substr(q.size());
}

/// The forward kernel (its decorator names no backward kernel).
const TritonKernelSource* forward_of(const TritonModule& m) {
  for (const auto& k : m.kernels)
    if (contains(k.decorator, "@heuristics.attention(") && !contains(k.decorator, "kernel='"))
      return &k;
  return nullptr;
}

/// The kernel whose decorator names `kernel` ('lse', 'grad_q', ...).
const TritonKernelSource* kernel_of(const TritonModule& m, const std::string& kernel) {
  for (const auto& k : m.kernels)
    if (contains(k.decorator, "kernel='" + kernel + "'")) return &k;
  return nullptr;
}

std::vector<std::string> arg_names(const TritonKernelSource& k) {
  std::vector<std::string> out;
  for (const auto& a : k.args) out.push_back(a.name);
  return out;
}

// A training step is three flash kernels: the forward stores attention_lse's logsumexp from its
// own running max and sum (the two nodes share a kernel group), the gradient of q, and those of
// k and v from one key-block loop (grad_kv: the two nodes share a kernel group too), after the
// small kernel that computes its rowsum(dO * out) once (delta).
TEST(TritonAttentionBackward, TrainingStepIsThreeFlashKernels) {
  const std::string step = backward_graph("f32", 2, 4, 2, 64, 64, 32, 32, "causal=true");
  TritonModule m = cuda_module(step);
  ASSERT_EQ(m.kernels.size(), 4u) << m.source;
  EXPECT_TRUE(m.externs.empty());  // no matmul: nothing is written out
  for (const auto& k : m.kernels) EXPECT_TRUE(contains(k.name, "triton_tem_fused_attention"));
  const TritonKernelSource* fwd = forward_of(m);
  ASSERT_TRUE(fwd) << m.source;
  EXPECT_EQ(fwd->name, "triton_tem_fused_attention_attention_lse_0");
  EXPECT_EQ(arg_names(*fwd),
            (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "out_ptr0", "out_ptr1"}));
  EXPECT_TRUE(contains(fwd->code, "lse = (m_i + tl.math.log2(l_i)) * 0.69314718055994529"))
      << fwd->code;
  EXPECT_TRUE(contains(fwd->code, "tl.store(out_ptr1 + (bh * 64 + rm), lse)"));
  EXPECT_EQ(kernel_of(m, "lse"), nullptr);
  // An attention_lse (a gradient of v) over other scores (here another buffer for q) keeps its
  // own kernel.
  TritonModule apart = cuda_module(lse_apart(step, true));
  ASSERT_EQ(apart.kernels.size(), 6u) << apart.source;  // and grad_k's delta kernel
  const TritonKernelSource* lse = kernel_of(apart, "lse");
  const TritonKernelSource* dq = kernel_of(m, "grad_q");
  const TritonKernelSource* dk = kernel_of(apart, "grad_k");
  const TritonKernelSource* dv = kernel_of(apart, "grad_v");
  const TritonKernelSource* dkv = kernel_of(m, "grad_kv");
  ASSERT_TRUE(lse && dq && dk && dv && dkv) << m.source;
  EXPECT_EQ(kernel_of(m, "grad_k"), nullptr);
  EXPECT_EQ(kernel_of(m, "grad_v"), nullptr);
  EXPECT_EQ(kernel_of(apart, "grad_kv"), nullptr);
  ASSERT_TRUE(forward_of(apart));
  EXPECT_FALSE(contains(forward_of(apart)->code, "lse"));
  EXPECT_TRUE(contains(dq->decorator,
                       "@heuristics.attention(shape={'batch': 2, 'heads': 4, 'kv_heads': 2, "
                       "'q_len': 64, 'kv_len': 64, 'head_dim': 32, 'value_dim': 32}, "
                       "causal=True, dtype='float32', kernel='grad_q'"))
      << dq->decorator;
  EXPECT_EQ(arg_names(*lse), (std::vector<std::string>{"arg_Q", "arg_K", "out_ptr0"}));
  EXPECT_EQ(arg_names(*dq), (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "arg_O", "arg_DO",
                                                      "arg_LSE", "out_ptr0"}));
  // dk and dk + dv read delta (from the delta kernel) where dq reads out.
  EXPECT_EQ(arg_names(*dk), (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "arg_DELTA",
                                                      "arg_DO", "arg_LSE", "out_ptr0"}));
  EXPECT_EQ(arg_names(*dkv),
            (std::vector<std::string>{"arg_Q", "arg_K", "arg_V", "arg_DELTA", "arg_DO", "arg_LSE",
                                      "out_ptr0", "out_ptr1"}));
  const TritonKernelSource* delta = kernel_of(m, "delta");
  ASSERT_TRUE(delta) << m.source;
  EXPECT_EQ(arg_names(*delta),
            (std::vector<std::string>{"arg_O", "arg_DO", "arg_LSE", "out_ptr0"}));
  EXPECT_TRUE(contains(delta->code, "delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)"));
  EXPECT_TRUE(contains(delta->code, "delta = tl.where(lse == float(\"-inf\"), 0.0, delta)"));
  EXPECT_TRUE(contains(delta->code, "row_mask = rows < 2 * 4 * 64"));
  EXPECT_TRUE(contains(dkv->code, "delta = tl.load(DELTA + rm)"));
  EXPECT_FALSE(contains(dkv->code, "arg_O"));
  // The delta kernel runs before grad_kv, its buffer freed after.
  EXPECT_LT(m.source.find(delta->name + ".run("), m.source.find(dkv->name + ".run("));
  // dv needs neither V nor out (no dp, no delta).
  EXPECT_EQ(arg_names(*dv),
            (std::vector<std::string>{"arg_Q", "arg_K", "arg_DO", "arg_LSE", "out_ptr0"}));

  // lse: the forward's running max and sum without V, stored in natural log.
  EXPECT_TRUE(contains(lse->code, "for start_n in range(full, hi, BLOCK_N):"));
  EXPECT_TRUE(contains(lse->code, "lse = (m_i + tl.math.log2(l_i)) * 0.69314718055994529"))
      << lse->code;
  EXPECT_TRUE(contains(lse->code, "tl.store(out_ptr0 + (bh * 64 + rm), lse)"));
  EXPECT_FALSE(contains(lse->code, "arg_V"));

  // grad_q: per query block, the forward's causal key loops.
  EXPECT_TRUE(contains(dq->code, "kvh = h // 2"));
  EXPECT_TRUE(contains(dq->code, "delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)"));
  EXPECT_TRUE(contains(dq->code, "delta = tl.where(no_key, 0.0, delta)"));
  EXPECT_TRUE(contains(dq->code, "lse2 = tl.where(no_key, float(\"inf\"), lse * "));
  EXPECT_TRUE(contains(dq->code, "for start_n in range(0, full, BLOCK_N):"));
  EXPECT_EQ(count(dq->code, "rm[:, None] + (TK - TQ), s, float(\"-inf\"))"), 1u);
  EXPECT_TRUE(contains(dq->code, "ds = p * (dp - delta[:, None])"));
  EXPECT_TRUE(contains(dq->code, "dq += tl.dot(ds, k, input_precision='ieee')"));
  EXPECT_TRUE(contains(dq->code, "(dq * 0.17677669529663687).to(tl.float32)"));
  // Every length and head dim is divided by every block: no mask anywhere.
  for (const auto* k : {lse, dq, dk, dv, dkv}) EXPECT_FALSE(contains(k->code, "mask=")) << k->code;

  // grad_k / grad_v: per key block and kv head, the group's query heads, causal query ranges.
  for (const auto* k : {dk, dv, dkv}) {
    EXPECT_TRUE(contains(k->code, "b = bkv // 2\n"));
    EXPECT_TRUE(contains(k->code, "for g in range(0, 2):"));
    EXPECT_TRUE(contains(k->code, "h = kvh * 2 + g"));
    EXPECT_TRUE(contains(k->code, "for start_m in range(lo, tl.minimum(full, TQ), BLOCK_M):"));
    EXPECT_TRUE(contains(k->code, "for start_m in range(full, TQ, BLOCK_M):"));
    EXPECT_EQ(count(k->code, "st = tl.where(rn[:, None] <= rm[None, :] + (TK - TQ)"), 1u);
    EXPECT_TRUE(contains(k->code, "pt = tl.math.exp2(st - lse2[None, :])"));
  }
  EXPECT_TRUE(contains(dk->code, "dst = pt * (dpt - delta[None, :])"));
  EXPECT_TRUE(contains(dk->code, "acc += tl.dot(dst, q, input_precision='ieee')"));
  EXPECT_TRUE(contains(dk->code, "(acc * 0.17677669529663687).to(tl.float32)"));
  EXPECT_TRUE(contains(dv->code, "acc += tl.dot(pt, do, input_precision='ieee')"));
  EXPECT_FALSE(contains(dv->code, "delta"));
  // grad_kv: grad_k's loop, and dv from the same p^T into acc_v, stored into out_ptr1.
  EXPECT_TRUE(contains(dkv->code, "dst = pt * (dpt - delta[None, :])"));
  EXPECT_TRUE(contains(dkv->code, "acc += tl.dot(dst, q, input_precision='ieee')"));
  EXPECT_TRUE(contains(dkv->code, "acc_v += tl.dot(pt, do, input_precision='ieee')"));
  EXPECT_EQ(count(dkv->code, "st = tl.dot(k, tl.trans(q)"),
            count(dk->code, "st = tl.dot(k, tl.trans(q)"));
  EXPECT_TRUE(contains(dkv->code,
                       "tl.store(out_ptr0 + (bkv * 2048 + rn[:, None] * 32 + rd[None, :]), "
                       "(acc * 0.17677669529663687).to(tl.float32))"))
      << dkv->code;
  EXPECT_TRUE(contains(dkv->code,
                       "tl.store(out_ptr1 + (bkv * 2048 + rn[:, None] * 32 + "
                       "rdv[None, :]), acc_v.to(tl.float32))"))
      << dkv->code;
  EXPECT_TRUE(contains(dv->code,
                       "tl.store(out_ptr0 + (bkv * 2048 + rn[:, None] * 32 + "
                       "rdv[None, :]), acc.to(tl.float32))"))
      << dv->code;
}

TEST(TritonAttentionBackward, LowPrecisionOddLengthsAndPaddedHeadDims) {
  // bf16, Tq = 100, Tk = 300 (partial blocks), D = 80 (padded to 128), Dv = 64, 4:1 GQA.
  // The gradients of k and v apart (dv over another q), and together (grad_kv).
  TritonModule m = cuda_module(
      lse_apart(backward_graph("bf16", 1, 8, 2, 100, 300, 80, 64, "causal=true"), true));
  const TritonKernelSource* dq = kernel_of(m, "grad_q");
  const TritonKernelSource* dk = kernel_of(m, "grad_k");
  const TritonKernelSource* dv = kernel_of(m, "grad_v");
  ASSERT_TRUE(dq && dk && dv) << m.source;
  TritonModule both = cuda_module(backward_graph("bf16", 1, 8, 2, 100, 300, 80, 64, "causal=true"));
  const TritonKernelSource* dkv = kernel_of(both, "grad_kv");
  ASSERT_TRUE(dkv) << both.source;
  EXPECT_TRUE(contains(dkv->code, "acc_v += tl.dot(pt.to(do.dtype), do)"));
  EXPECT_TRUE(contains(dkv->code, "acc_v = tl.zeros([BLOCK_N, 64], dtype=tl.float32)"));
  EXPECT_TRUE(contains(dkv->code, "acc = tl.zeros([BLOCK_N, 128], dtype=tl.float32)"));
  EXPECT_TRUE(contains(dkv->code, "acc_v.to(tl.bfloat16), mask=(rn[:, None] < TK))")) << dkv->code;
  EXPECT_TRUE(
      contains(dkv->code, ".to(tl.bfloat16), mask=(rn[:, None] < TK) & (rd[None, :] < 80))"))
      << dkv->code;
  EXPECT_FALSE(contains(dq->code, "input_precision"));
  EXPECT_TRUE(contains(dq->code, "dq += tl.dot(ds.to(k.dtype), k)"));
  EXPECT_TRUE(contains(dq->code, "rd = tl.arange(0, 128)"));
  EXPECT_TRUE(contains(dq->code, "lse = tl.load(LSE + rm, mask=rm < TQ, other=float(\"-inf\"))"));
  EXPECT_TRUE(contains(dq->code, "mask=(rm[:, None] < TQ) & (rd[None, :] < 80), other=0.0)"));
  EXPECT_TRUE(contains(dq->code, ".to(tl.bfloat16), mask=(rm[:, None] < TQ) & (rd[None, :] < 80))"))
      << dq->code;
  EXPECT_TRUE(contains(dk->code, "acc += tl.dot(dst.to(q.dtype), q)"));
  EXPECT_TRUE(contains(dk->code, "for g in range(0, 4):"));
  // Keys: the block's K and V loads and the store carry the bound; queries: only the causal
  // (diagonal) loop and the partial last block.
  EXPECT_TRUE(contains(dk->code,
                       "k = tl.load(K + (rn[:, None] * 80 + rd[None, :]), mask=(rn[:, None] < "
                       "TK) & (rd[None, :] < 80), other=0.0)"))
      << dk->code;
  EXPECT_TRUE(
      contains(dk->code, "for start_m in range(full, (TQ // BLOCK_M) * BLOCK_M, BLOCK_M):"));
  EXPECT_TRUE(contains(dk->code,
                       "for start_m in range(tl.maximum(full, (TQ // BLOCK_M) * "
                       "BLOCK_M), TQ, BLOCK_M):"));
  EXPECT_EQ(count(dk->code, "lse = tl.load(LSE + rm, mask=rm < TQ, other=float(\"-inf\"))"), 2u);
  EXPECT_TRUE(contains(dv->code, "acc += tl.dot(pt.to(do.dtype), do)"));
  EXPECT_TRUE(contains(dv->code, "acc.to(tl.bfloat16), mask=(rn[:, None] < TK))")) << dv->code;
}

TEST(TritonAttentionBackward, MasksTf32AndEmptyLengths) {
  const std::string add =
      cuda_module(backward_graph("f32", 2, 4, 4, 128, 96, 64, 64, "", "f32[2, 1, 1, 96]"), "high")
          .source;
  EXPECT_TRUE(contains(add, "input_precision='tf32'"));
  EXPECT_FALSE(contains(add, "'ieee'"));
  // The transposed tile of a key block's program: keys along rows.
  EXPECT_TRUE(contains(add, "mv = tl.load(M + (rn[:, None] + rm[None, :] * 0)")) << add;
  EXPECT_TRUE(contains(add, "st = st + mv * 1.4426950408889634"));
  const std::string keep =
      cuda_module(backward_graph("f32", 1, 2, 2, 64, 64, 16, 16, "", "bool[64, 64]")).source;
  EXPECT_TRUE(contains(keep, "st = tl.where(mv != 0, st, float(\"-inf\"))"));
  EXPECT_TRUE(contains(keep, "s = tl.where(mv != 0, s, float(\"-inf\"))"));

  // Tk = 0: lse -inf and dq 0 without a loop, in the forward and in a logsumexp kernel of its
  // own; Tq = 0: dk and dv 0 without a loop.
  const std::string no_key_step = backward_graph("f32", 1, 2, 2, 5, 0, 16, 16, "");
  TritonModule no_key = cuda_module(no_key_step);
  const TritonKernelSource* fwd = forward_of(no_key);
  const TritonKernelSource* dq = kernel_of(no_key, "grad_q");
  ASSERT_TRUE(fwd && dq) << no_key.source;
  EXPECT_FALSE(contains(fwd->code, "for start_n"));
  EXPECT_TRUE(contains(fwd->code, "lse = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)"));
  EXPECT_FALSE(contains(dq->code, "for start_n"));
  TritonModule no_key_apart = cuda_module(lse_apart(no_key_step));
  const TritonKernelSource* lse = kernel_of(no_key_apart, "lse");
  ASSERT_TRUE(lse) << no_key_apart.source;
  EXPECT_FALSE(contains(lse->code, "for start_n"));
  EXPECT_TRUE(contains(lse->code, "lse = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)"));
  TritonModule no_query = cuda_module(backward_graph("f32", 1, 2, 2, 0, 7, 16, 16, ""));
  const TritonKernelSource* dk = kernel_of(no_query, "grad_kv");
  ASSERT_TRUE(dk) << no_query.source;
  EXPECT_TRUE(contains(dk->code, "tl.store(out_ptr1"));
  EXPECT_FALSE(contains(dk->code, "for start_m"));
  EXPECT_TRUE(contains(dk->code, "# no query"));
}

TEST(TritonAttentionBackward, F64AndHeadDimsAbove256AreWrittenOut) {
  for (const auto& text : {backward_graph("f64", 1, 2, 2, 16, 16, 16, 16, ""),
                           backward_graph("f32", 1, 2, 2, 16, 16, 300, 64, ""),
                           backward_graph("f32", 1, 2, 2, 16, 16, 64, 300, "")}) {
    TritonModule m = cuda_module(text);
    for (const auto& k : m.kernels)
      EXPECT_FALSE(contains(k.decorator, "kernel='grad_")) << k.name << "\n" << text;
  }
  // attention_lse reads no V: Dv = 300 leaves it the template's; f64 and D = 300 do not.
  EXPECT_TRUE(kernel_of(cuda_module(backward_graph("f32", 1, 2, 2, 16, 16, 64, 300, "")), "lse"));
  EXPECT_FALSE(kernel_of(cuda_module(backward_graph("f32", 1, 2, 2, 16, 16, 300, 64, "")), "lse"));
  EXPECT_FALSE(kernel_of(cuda_module(backward_graph("f64", 1, 2, 2, 16, 16, 16, 16, "")), "lse"));
  // D = 256 is the template's.
  TritonModule at_limit = cuda_module(backward_graph("bf16", 1, 2, 2, 16, 16, 256, 256, ""));
  EXPECT_TRUE(kernel_of(at_limit, "grad_kv") != nullptr);
}

// Operands the kernels cannot read in place (a computed q, a scaled dO, a bf16 mask that the
// kernels read as f32) are stored once for every attention node (lower_attention.cpp): the
// forward still shares its pass with the logsumexp, dk with dv, and each value is computed once,
// on both devices.
TEST(TritonAttentionBackward, ComputedOperandsAreStoredOnceForEveryAttentionNode) {
  const std::string text =
      "input q0: bf16[1, 4, 64, 32]\ninput k: bf16[1, 2, 64, 32]\ninput v: bf16[1, 2, 64, 32]\n"
      "input dy0: bf16[1, 4, 64, 32]\ninput m: bf16[1, 4, 64, 64]\n"
      "q = mul(q0, q0)\ndy = neg(dy0)\n"
      "y = attention(q, k, v, m) {causal=true}\nl = attention_lse(q, k, m) {causal=true}\n"
      "dq = attention_grad(q, k, v, y, dy, l, m) {wrt=\"q\", causal=true}\n"
      "dk = attention_grad(q, k, v, y, dy, l, m) {wrt=\"k\", causal=true}\n"
      "dv = attention_grad(q, k, v, y, dy, l, m) {wrt=\"v\", causal=true}\n"
      "output y\noutput l\noutput dq\noutput dk\noutput dv\n";
  TritonModule m = cuda_module(text);
  EXPECT_NE(kernel_of(m, "grad_kv"), nullptr) << m.source;
  EXPECT_EQ(kernel_of(m, "grad_k"), nullptr);
  EXPECT_EQ(kernel_of(m, "lse"), nullptr) << m.source;  // the forward stores it
  CompileOptions o;
  o.device = "cpu";
  GeneratedProgram cpu = generate_program(parse_graph(text, "<test>"), o);
  const std::string& src = cpu.module.source;
  EXPECT_EQ(count(src, "coil::attention::backward_kv("), 1u) << src;
  EXPECT_EQ(count(src, "coil::attention::backward("), 1u);  // dq
  EXPECT_EQ(count(src, "coil::attention::logsumexp("), 0u);
  // q * q, -dy and the mask's f32 copy: one computation each.
  size_t pointwise = 0;
  for (const auto& c : cpu.program.computations) pointwise += c.attention == nullptr;
  EXPECT_EQ(pointwise, 3u) << src;
}

TEST(TritonAttentionBackward, LargeTensorsIndexWith64Bits) {
  const std::string code =
      cuda_module(backward_graph("bf16", 64, 32, 32, 8192, 8192, 128, 128, "")).source;
  EXPECT_TRUE(contains(code, "bkv = tl.program_id(1).to(tl.int64)"));
  EXPECT_TRUE(contains(code, "rm0 = tl.arange(0, BLOCK_M).to(tl.int64)"));
}

}  // namespace
}  // namespace coil

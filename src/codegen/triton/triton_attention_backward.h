// The flash-attention backward templates of the GPU backend: attention_lse and attention_grad
// (ir.h AttentionSpec with kernel logsumexp, grad_q, grad_k or grad_v), one triton_tem kernel
// per graph node, FlashAttention-2's backward loops without atomics (each gradient row is summed
// by one program in a fixed order). The score matrix never exists: each kernel recomputes the
// scores of its blocks from q and k.
//
//   lse     grid (cdiv(Tq, BLOCK_M), B * H): the forward's key loop without V (running max and
//           sum in exp2), stored as (m + log2(l)) * ln 2 (natural log), -inf for a row that
//           sees no key (m = -inf, l = 0)
//   grad_q  grid (cdiv(Tq, BLOCK_M), B * H): Q, dO, out and lse of the query block loaded once,
//           delta = rowsum(dO * out) in f32; per key block s = q k^T * scale (mask, causal as
//           the forward), p = exp2(s - lse), dp = dO v^T, ds = p (dp - delta), dq += ds k;
//           dq * scale stored in q's dtype
//   grad_k  grid (cdiv(Tk, BLOCK_N), B * Hkv): K and V of the key block loaded once; for each
//   grad_v  query head of the kv head's group and each query block that sees the block's keys
//           (causal: from the first such block; the blocks that see every key without the
//           causal mask), the transposed scores s^T = k q^T, p^T, and dv += p^T dO (grad_v) or
//           dp^T = v dO^T, ds^T = p^T (dp^T - delta), dk += ds^T q (grad_k, delta recomputed
//           per query block); dk * scale or dv stored in k's or v's dtype
//   grad_kv grad_k's kernel when the gradient of v of the same call shares its kernel group
//           (sched/fusion.h attention_pairs_with_grad_v): dv += p^T dO from the same p^T, into
//           out_ptr1 (dK out_ptr0): 4 products per (key block, query block), not 3 + 2
//   delta   grid (cdiv(B * H * Tq, BLOCK_M)): delta = rowsum(dO * out) of BLOCK_M query rows
//           (0 for a row with lse = -inf: its out is NaN) into a [B, H, Tq] f32 buffer, launched
//           before grad_k / grad_kv, which then load a query block's delta instead of its out
//           rows (FlashAttention-2's preprocessing kernel: a third less to load per step)
//
// A row with lse = -inf (it sees no key; its out is NaN) contributes nothing: it subtracts +inf
// (p = exp2(s - inf) = 0) and its delta is 0. Query rows past Tq load q = dO = out = 0 and
// lse = -inf, so they add exactly 0 to dk and dv; key rows past Tk are never stored. Dots run
// in the input dtype (p and ds rounded to it for bf16/f16, as flash kernels do; f32 IEEE or
// TF32 as the forward), accumulation in f32. Head dims are padded as the forward's
// (triton_attention.h), bounds masks only where some block may cross a length.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "codegen/triton/triton_kernel.h"

namespace coil {

/// Prints kernel `k` of `plan` (a Template kernel whose `attention` is a backward kernel:
/// logsumexp, grad_q, grad_k or grad_v).
TritonKernelSource generate_triton_attention_backward_kernel(const TritonProgramPlan& plan,
                                                             size_t k, int index);

/// A gradient of k's kernel plan (grad_k, grad_kv: the only ones that read out) as two: a
/// `delta` kernel storing rowsum(dO * out) into a new [B, H, Tq] f32 buffer (appended to
/// `buffers`, named like the other partials), and the gradient kernel reading it. nullopt for
/// other kernels and when no (key, query) pair exists (static Tq or Tk 0).
std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> attention_delta_kernels(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers);

}  // namespace coil

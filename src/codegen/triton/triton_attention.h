// The flash-attention forward template of the GPU backend (the Triton fused-attention tutorial's
// shape; Inductor calls aten's flash kernels instead): one program per (block of BLOCK_M query
// rows, batch x head), its Q tile in registers, a loop over BLOCK_N keys with both products on
// the tensor cores (`tl.dot` in the input dtype, f32 accumulation; f32 inputs as IEEE or TF32 by
// CompileOptions::precision) and the online softmax in f32 (running max and sum, the earlier
// output rescaled). The score matrix never exists.
//
//   grid  (cdiv(Tq, BLOCK_M), B * H): heuristics.attention's AttentionAutotuner; a decoding
//         shape of grouped-query heads packs the group's Tq x G rows into one tile instead:
//         (cdiv(Tq * G, BLOCK_M), B * Hkv) (triton_attention_decode.h attention_packed_heads)
//   q, k, v  read through their (batch, head, row) strides; kv head = h / (H / Hkv) (GQA)
//   mask     bool (false: -inf) or f32 (added), read through broadcast strides (0 on
//            broadcast dims) of [B, H, Tq, Tk]
//   causal   bottom-right aligned (query i sees keys j <= i + Tk - Tq): the keys every row of
//            the block sees run without masks, the diagonal blocks with the causal mask, the
//            blocks past the last row's last key are skipped
//   D, Dv    padded to powers of two >= 16 (BLOCK_D, BLOCK_DV), the padding masked to 0
//   edges    a row that sees no key ends with sum 0 and gives 0 / 0 = NaN, as coil's reference
//            (softmax over all -inf); Tk = 0 stores zeros (a sum over no key)
//
// Blocks are powers of two in [16, 128] (python/coil_runtime/configs.py ATTENTION_*): a length
// that every such block divides needs no bounds mask.
#pragma once

#include "codegen/triton/triton_kernel.h"

namespace coil {

/// Prints kernel `k` of `plan` (a Template kernel with `attention` set).
TritonKernelSource generate_triton_attention_kernel(const TritonProgramPlan& plan, size_t k,
                                                    int index);

}  // namespace coil

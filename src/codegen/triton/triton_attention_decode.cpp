#include "codegen/triton/triton_attention_decode.h"

#include <algorithm>

#include "codegen/triton/triton_attention_common.h"
#include "support/check.h"

namespace coil {

int64_t attention_decode_splits(int64_t query_programs, int64_t kv_len, bool kv_len_symbolic) {
  if (query_programs <= 0) return 1;
  int64_t splits = std::min(kDecodeMaxSplits, kDecodeTargetPrograms / query_programs);
  if (!kv_len_symbolic) {
    if (kv_len < kDecodeMinKeys) return 1;
    splits = std::min(splits, kv_len / kDecodeMinChunkKeys);
  }
  return splits >= 2 ? splits : 1;
}

int64_t attention_packed_block(int64_t rows) {
  return std::max<int64_t>(kDecodeQueryBlock, next_power_of_2(rows));
}

int64_t attention_packed_heads(const TritonKernelPlan& k,
                               const std::vector<TritonBuffer>& buffers) {
  if (!k.attention || k.attention->kernel != AttentionKernel::forward) return 0;
  const AttentionSpec& a = *k.attention;
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0) return 0;
  const int64_t group = a.heads / a.kv_heads;
  if (group < 2 || a.q_len < 1 || a.q_len * group > kPackMaxRows) return 0;
  // Static B, H and Tq (the result's first dims) and Hkv (k's head dim, where k is a plain
  // [B, Hkv, Tk, D] buffer; a view's head count comes from H and G, both static).
  const TritonBuffer& out = buffers[static_cast<size_t>(k.attention_out)];
  for (size_t d = 0; d < 3 && d < out.size_exprs.size(); ++d)
    if (is_symbolic(out.size_exprs[d])) return 0;
  const TritonBuffer& kb = buffers[static_cast<size_t>(a.k)];
  if (kb.size_exprs.size() == 4 && is_symbolic(kb.size_exprs[1])) return 0;
  return group;
}

namespace {

using triton_attention::padded_dim;
using triton_attention::py_float;

constexpr double kLn2 = 0.69314718055994530942;

bool any_symbolic(const std::vector<sym::Expr>& v) {
  return std::any_of(v.begin(), v.end(), [](const sym::Expr& e) { return is_symbolic(e); });
}

/// A contiguous f32 partial buffer (named like split reductions' partials: part0, part1, ...).
int add_partial_buffer(std::vector<TritonBuffer>& buffers, std::vector<int64_t> sizes) {
  int count = 0;
  for (const TritonBuffer& b : buffers) count += b.name.rfind("part", 0) == 0;
  TritonBuffer b;
  b.name = fmt::format("part{}", count);
  b.dtype = DType::F32;
  b.strides.assign(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) b.strides[d - 1] = b.strides[d] * sizes[d];
  b.sizes = std::move(sizes);
  buffers.push_back(std::move(b));
  return static_cast<int>(buffers.size()) - 1;
}

/// The partial kernel: the forward's program over its chunk of keys, storing the chunk's
/// unnormalized output and running max and sum.
class DecodePartialPrinter : public triton_attention::AttentionTextBase {
 public:
  DecodePartialPrinter(const TritonProgramPlan& plan, size_t k, int index)
      : AttentionTextBase(plan, k, index), split_(k_.attention_split) {}

  TritonKernelSource generate() {
    TritonKernelSource out = named_source();
    add_forward_operands(out);
    // out_ptr*: the autotuner clones what a kernel writes before timing it.
    out.args.push_back({split_.acc, true, "out_ptr0"});
    out.args.push_back({split_.max, true, "out_ptr1"});
    out.args.push_back({split_.sum, true, "out_ptr2"});
    open_kernel(out);
    emit_forward_prologue(
        fmt::format("flash-decoding, partial results of {} chunks of keys", split_.splits));
    const std::string wide = k_.int64_index ? ".to(tl.int64)" : "";
    w_.linef("split = tl.program_id(2){}", wide);
    w_.line("# chunks of a multiple of BLOCK_N keys, so that only TK's partial last block needs a");
    w_.line("# bound; the last chunks may be short or empty (a short TK at run time)");
    w_.linef("chunk = ((TK + {}) // {} + BLOCK_N - 1) // BLOCK_N * BLOCK_N", split_.splits - 1,
             split_.splits);
    w_.line("chunk_lo = split * chunk");
    w_.line("chunk_hi = tl.minimum(chunk_lo + chunk, TK)");
    emit_key_loops([&](bool causal, bool bound) { emit_forward_step(causal, bound); },
                   /*chunk=*/true);
    emit_partial_store();
    w_.dedent();
    finish(out);
    out.decorator = attention_decorator(
        out, fmt::format(", kernel='decode_partial', splits={}", split_.splits));
    return out;
  }

 private:
  void emit_partial_store() {
    const int64_t rows = a_.batch * a_.heads * a_.q_len;
    w_.line("# the chunk's running max and sum (log2 units) and its unnormalized output, for the");
    w_.line("# combine kernel; an empty chunk stores m = -inf, l = 0, acc = 0 (weight 0 there)");
    w_.linef("prow = {}", sum({fmt::format("split * {}", rows), result_rows_base(1), "rm"}));
    const std::string rmask = even_m_ ? "" : fmt::format(", mask=rm < {}", row_bound());
    w_.linef("tl.store(out_ptr1 + prow, m_i{})", rmask);
    w_.linef("tl.store(out_ptr2 + prow, l_i{})", rmask);
    const std::string amask = mask_of({row_mask(), pad_dv()});
    w_.linef("tl.store(out_ptr0 + (prow[:, None] * {} + rdv[None, :]), acc{})", a_.value_dim,
             amask.empty() ? "" : ", mask=" + amask);
  }

  const AttentionSplitPlan& split_;
};

/// The combine kernel: each (batch, head, query) row's chunks merged, BLOCK_M rows a program.
class DecodeCombinePrinter : public triton_attention::AttentionTextBase {
 public:
  DecodeCombinePrinter(const TritonProgramPlan& plan, size_t k, int index)
      : AttentionTextBase(plan, k, index), split_(k_.attention_split) {}

  TritonKernelSource generate() {
    TritonKernelSource out = named_source();
    out.args.push_back({split_.acc, false, "arg_acc"});
    out.args.push_back({split_.max, false, "arg_max"});
    out.args.push_back({split_.sum, false, "arg_sum"});
    out.args.push_back({k_.attention_out, true, "out_ptr0"});
    if (k_.attention_lse_out >= 0) out.args.push_back({k_.attention_lse_out, true, "out_ptr1"});
    open_row_kernel(out);
    emit_body();
    w_.dedent();
    finish(out);
    out.decorator = attention_decorator(
        out, fmt::format(", kernel='decode_combine', splits={}", split_.splits));
    return out;
  }

 private:
  void emit_body() {
    const int64_t S = split_.splits, rows = a_.batch * a_.heads * a_.q_len, dv = a_.value_dim;
    const bool pad = padded_dim(dv) != dv;
    const bool symbolic_keys = symbolic(a_.kv_len);
    w_.linef("# flash-decoding, combine: the {} chunks of keys of each row of y [{}, {}, {}, {}]{}",
             S, a_.batch, a_.heads, a_.q_len, dv,
             k_.attention_lse_out >= 0 ? ", and its logsumexp" : "");
    if (symbolic_keys) w_.linef("TK = {}", names(a_.kv_len));
    w_.line("rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (batch, head, query)");
    w_.linef("rdv = tl.arange(0, {})", padded_dim(dv));
    w_.linef("row_mask = rows < {}", rows);
    const std::string mask =
        pad ? fmt::format("row_mask[:, None] & (rdv[None, :] < {})", dv) : "row_mask[:, None]";
    const std::string max_at = fmt::format("arg_max + (s * {} + rows)", rows);
    w_.line("# M: the largest running max of the row's chunks (log2 units); a row that saw no key");
    w_.line("# in any chunk keeps -inf and subtracts 0 (m_safe: exp2 gives 0, not the NaN of");
    w_.line("# -inf - -inf)");
    w_.line("m_max = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)");
    w_.linef("for s in range(0, {}):", S);
    w_.linef("    m_max = tl.maximum(m_max, tl.load({}, mask=row_mask, other=float(\"-inf\")))",
             max_at);
    w_.line("m_safe = tl.where(m_max == float(\"-inf\"), 0.0, m_max)");
    w_.line("# chunk s weighs w = exp2(m_s - M): L = sum l_s w, O = sum acc_s w / L");
    w_.line("l_sum = tl.zeros([BLOCK_M], dtype=tl.float32)");
    w_.linef("acc = tl.zeros([BLOCK_M, {}], dtype=tl.float32)", padded_dim(dv));
    w_.linef("for s in range(0, {}):", S);
    w_.linef("    w = tl.math.exp2(tl.load({}, mask=row_mask, other=float(\"-inf\")) - m_safe)",
             max_at);
    w_.linef("    l_sum += tl.load(arg_sum + (s * {} + rows), mask=row_mask, other=0.0) * w", rows);
    w_.linef(
        "    acc += tl.load(arg_acc + (s * {} + rows[:, None] * {} + rdv[None, :]), mask={}, "
        "other=0.0) * w[:, None]",
        rows * dv, dv, mask);
    w_.line("# a row that saw no key has L = 0: 0 / 0 = NaN, coil's reference (softmax over all");
    w_.line("# -inf)");
    w_.line("o = acc / l_sum[:, None]");
    if (symbolic_keys) {
      w_.line("# no key at all (TK = 0 at run time): a sum over no key is 0, as coil's reference");
      w_.line("o = tl.where(TK == 0, 0.0, o)");
    }
    w_.linef("tl.store(out_ptr0 + (rows[:, None] * {} + rdv[None, :]), o.to({}), mask={})", dv,
             triton_dtype(a_.dtype), mask);
    if (k_.attention_lse_out >= 0) {
      w_.line("# the logsumexp in natural log: (M + log2(L)) * ln(2); -inf for a row with no key");
      w_.linef("lse = (m_max + tl.math.log2(l_sum)) * {}", py_float(kLn2));
      w_.line("tl.store(out_ptr1 + rows, lse, mask=row_mask)");
    }
  }

  const AttentionSplitPlan& split_;
};

}  // namespace

std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> split_attention_decode(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers) {
  if (!k.attention || k.attention->kernel != AttentionKernel::forward ||
      k.attention_split.splits > 0)
    return std::nullopt;
  const AttentionSpec& a = *k.attention;
  // The program count must be static: B, H and Tq (the result's first dims) are numbers.
  const TritonBuffer& out = buffers[static_cast<size_t>(k.attention_out)];
  for (size_t d = 0; d < 3 && d < out.size_exprs.size(); ++d)
    if (is_symbolic(out.size_exprs[d])) return std::nullopt;
  bool symbolic_keys = false;
  for (int b : {a.k, a.v, a.mask})
    if (b >= 0)
      symbolic_keys = symbolic_keys || any_symbolic(buffers[static_cast<size_t>(b)].size_exprs);
  // Packed: a program per (batch, kv head), its tile covering the group's rows.
  const int64_t G = k.attention_packed_heads;
  const int64_t programs =
      G > 0 ? a.batch * a.kv_heads
            : (a.q_len + kDecodeQueryBlock - 1) / kDecodeQueryBlock * a.batch * a.heads;
  const int64_t S = attention_decode_splits(programs, a.kv_len, symbolic_keys);
  if (S < 2) return std::nullopt;

  const int64_t bh = a.batch * a.heads;
  AttentionSplitPlan split;
  split.splits = S;
  split.acc = add_partial_buffer(buffers, {S, bh, a.q_len, a.value_dim});
  split.max = add_partial_buffer(buffers, {S, bh, a.q_len});
  split.sum = add_partial_buffer(buffers, {S, bh, a.q_len});
  // The bodies only name what each kernel loads and stores (the planner keeps those buffers in
  // memory): the partial kernel the forward's operands and the partials, the combine kernel
  // the partials and the forward's results.
  TritonKernelPlan partial = k, combine = k;
  partial.attention_split = split;
  partial.attention_lse_out = -1;
  partial.body = LoopBody();
  int operand = -1;
  for (const BodyOp& op : k.body.ops()) {
    if (op.op != LoopOp::load) continue;
    const int at = partial.body.append(op);
    if (operand < 0) operand = at;
  }
  for (int b : {split.acc, split.max, split.sum}) partial.body.store(b, sym::Expr(0), operand);
  split.combine = true;
  combine.attention_split = split;
  combine.body = LoopBody();
  const int partial_value = combine.body.load(split.acc, sym::Expr(0), DType::F32);
  combine.body.load(split.max, sym::Expr(0), DType::F32);
  combine.body.load(split.sum, sym::Expr(0), DType::F32);
  for (BodyOp op : k.body.ops()) {
    if (op.op != LoopOp::store) continue;
    op.args[0] = partial_value;
    combine.body.append(std::move(op));
  }
  for (TritonKernelPlan* p : {&partial, &combine}) {
    p->op_nest.assign(p->body.ops().size(), 0);
    p->reused.assign(p->body.ops().size(), false);
  }
  return std::make_pair(std::move(partial), std::move(combine));
}

TritonKernelSource generate_triton_attention_decode_kernel(const TritonProgramPlan& plan, size_t k,
                                                           int index) {
  const TritonKernelPlan& kp = plan.kernels[k];
  COIL_ASSERT(kp.attention != nullptr && kp.attention_split.splits > 0,
              "kernel {} is not a split attention kernel", k);
  if (kp.attention_split.combine) return DecodeCombinePrinter(plan, k, index).generate();
  return DecodePartialPrinter(plan, k, index).generate();
}

}  // namespace coil

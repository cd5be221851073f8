#include "codegen/triton/triton_attention_backward.h"

#include <cmath>

#include "codegen/kernel_names.h"
#include "codegen/triton/triton_attention_common.h"
#include "support/check.h"

namespace coil {
namespace {

using triton_attention::every_block_divides;
using triton_attention::padded_dim;
using triton_attention::py_float;

const char* kernel_label(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::logsumexp:
      return "lse";
    case AttentionKernel::grad_q:
      return "grad_q";
    case AttentionKernel::grad_k:
      return "grad_k";
    case AttentionKernel::grad_v:
      return "grad_v";
    case AttentionKernel::forward:
      break;
  }
  return "forward";
}

class AttentionBackwardPrinter : public triton_attention::AttentionTextBase {
 public:
  AttentionBackwardPrinter(const TritonProgramPlan& plan, size_t k, int index)
      : AttentionTextBase(plan, k, index) {}

  TritonKernelSource generate() {
    if (k_.attention_delta_kernel) return generate_delta();
    TritonKernelSource out;
    out.name = fused_kernel_name("triton_tem_fused", k_.provenance, index_);
    out.origins = k_.origins;
    const AttentionKernel kind = a_.kernel;
    out.args.push_back({a_.q, false, "arg_Q"});
    out.args.push_back({a_.k, false, "arg_K"});
    if (kind == AttentionKernel::grad_q || kind == AttentionKernel::grad_k)
      out.args.push_back({a_.v, false, "arg_V"});
    if (kind == AttentionKernel::grad_q || (kind == AttentionKernel::grad_k && !delta_buffer()))
      out.args.push_back({a_.out, false, "arg_O"});
    if (delta_buffer()) out.args.push_back({k_.attention_delta, false, "arg_DELTA"});
    if (kind != AttentionKernel::logsumexp) {
      out.args.push_back({a_.grad_out, false, "arg_DO"});
      out.args.push_back({a_.lse, false, "arg_LSE"});
    }
    if (a_.mask >= 0) out.args.push_back({a_.mask, false, "arg_mask"});
    out.args.push_back({k_.attention_out, true, "out_ptr0"});
    // grad_kv: the gradient of v from the same key-block loop as k's (sched/fusion.h).
    const bool both = kind == AttentionKernel::grad_k && k_.attention_grad_v_out >= 0;
    if (both) out.args.push_back({k_.attention_grad_v_out, true, "out_ptr1"});
    open_kernel(out);
    bd_ = padded_dim(a_.head_dim);
    bdv_ = padded_dim(a_.value_dim);
    wide_ = k_.int64_index ? ".to(tl.int64)" : "";
    group_ = a_.kv_heads > 0 ? a_.heads / a_.kv_heads : 1;
    emit_header();
    if (kind == AttentionKernel::logsumexp)
      emit_lse();
    else if (kind == AttentionKernel::grad_q)
      emit_grad_q();
    else
      emit_grad_kv(kind == AttentionKernel::grad_k, both);
    w_.dedent();
    finish(out);
    out.decorator = attention_decorator(
        out, fmt::format(", kernel='{}'", both ? "grad_kv" : kernel_label(a_.kernel)));
    return out;
  }

 private:
  bool delta_buffer() const { return k_.attention_delta >= 0; }

  /// The delta kernel: rowsum(dO * out) of BLOCK_M of the B * H * Tq query rows, 0 for a row
  /// that sees no key (lse -inf: its out is NaN), stored f32 for the gradient of k's kernel.
  TritonKernelSource generate_delta() {
    TritonKernelSource out = named_source();
    out.args.push_back({a_.out, false, "arg_O"});
    out.args.push_back({a_.grad_out, false, "arg_DO"});
    out.args.push_back({a_.lse, false, "arg_LSE"});
    out.args.push_back({k_.attention_delta, true, "out_ptr0"});
    open_row_kernel(out);
    const int64_t dv = a_.value_dim, bdv = padded_dim(dv);
    w_.linef(
        "# attention_grad's delta = rowsum(dO * out) of each (batch, head, query) row of [{}, "
        "{}, {}], 0 for",
        names(a_.batch), names(a_.heads), names(a_.q_len));
    w_.line("# a row that sees no key (lse -inf: its out is NaN); read by the gradient of k's");
    w_.line("# kernel instead of out");
    // The decorator's shape names every length: a size-generic kernel takes Tk too.
    if (symbolic(a_.kv_len)) w_.linef("TK = {}  # (not needed here)", names(a_.kv_len));
    w_.linef("rows = tl.program_id(0){} * BLOCK_M + tl.arange(0, BLOCK_M)",
             k_.int64_index ? ".to(tl.int64)" : "");
    w_.linef("rdv = tl.arange(0, {})", bdv);
    w_.linef("row_mask = rows < {} * {} * {}", names(a_.batch), names(a_.heads), names(a_.q_len));
    const std::string mask = bdv != dv ? fmt::format("row_mask[:, None] & (rdv[None, :] < {})", dv)
                                       : std::string("row_mask[:, None]");
    const std::string at = fmt::format("rows[:, None] * {} + rdv[None, :]", names(dv));
    w_.linef("do = tl.load(arg_DO + ({}), mask={}, other=0.0)", at, mask);
    w_.linef("o = tl.load(arg_O + ({}), mask={}, other=0.0)", at, mask);
    w_.line("delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)");
    w_.line("lse = tl.load(arg_LSE + rows, mask=row_mask, other=0.0)");
    w_.line("delta = tl.where(lse == float(\"-inf\"), 0.0, delta)");
    w_.line("tl.store(out_ptr0 + rows, delta, mask=row_mask)");
    w_.dedent();
    finish(out);
    out.decorator = attention_decorator(out, ", kernel='delta'");
    return out;
  }

  void emit_header() {
    static const char* what[] = {"", "attention_lse", "attention_grad wrt q",
                                 "attention_grad wrt k", "attention_grad wrt v"};
    const bool both = k_.attention_grad_v_out >= 0;
    emit_shapes_and_lengths(
        std::string("flash ") + (both ? "attention_grad wrt k and v" : what[int(a_.kernel)]),
        a_.kernel != AttentionKernel::logsumexp);
  }

  // --- per query block: attention_lse and grad_q ---------------------------------------------

  /// lse and delta of the rows `rm` (lse -inf past Tq: those rows add nothing), `lse2` in log2
  /// units with +inf for a row that sees no key (exp2(s - inf) = 0, not the NaN of
  /// exp(-inf - -inf)).
  void emit_row_lse(bool bound) {
    w_.linef("lse = tl.load(LSE + rm{})", bound ? ", mask=rm < TQ, other=float(\"-inf\")" : "");
    w_.line("no_key = lse == float(\"-inf\")");
    w_.linef("lse2 = tl.where(no_key, float(\"inf\"), lse * {})", py_float(M_LOG2E));
  }
  /// do (and out, delta = rowsum(dO * out) in f32, 0 for a row with no key: its out is NaN)
  /// of the rows `rm` along `rows` ("rm[:, None]").
  void emit_row_grad_out(bool bound, bool with_delta) {
    std::string omask = mask_of({bound ? "rm[:, None] < TQ" : "", pad_dv()});
    const std::string at = sum({term("rm[:, None]", a_.value_dim, true), "rdv[None, :]"});
    w_.linef("do = tl.load(DO + ({}){})", at, masked(omask, "0.0"));
    if (!with_delta) return;
    if (delta_buffer()) {  // the delta kernel's (0 for a row with no key)
      w_.linef("delta = tl.load(DELTA + rm{})", bound ? ", mask=rm < TQ, other=0.0" : "");
      return;
    }
    w_.linef("o = tl.load(O + ({}){})", at, masked(omask, "0.0"));
    w_.line("delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)");
    w_.line("delta = tl.where(no_key, 0.0, delta)");
  }

  void emit_lse() {
    emit_query_block_start(false);
    if (a_.kv_len > 0) {
      emit_q_load();
      w_.line("m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)");
      w_.line("l_i = tl.zeros([BLOCK_M], dtype=tl.float32)");
      w_.line("# online max and sum in log2 units, as the forward's; a row with no visible key");
      w_.line("# so far keeps m = -inf and subtracts 0 instead (m_safe: exp2 gives 0, not the");
      w_.line("# NaN of -inf - -inf)");
      emit_key_loops([&](bool causal, bool bound) {
        w_.indent();
        emit_scores_of_key_block(causal, bound);
        w_.line("m_new = tl.maximum(m_i, tl.max(s, 1))");
        w_.line("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)");
        w_.line(
            "l_i = l_i * tl.math.exp2(m_i - m_safe) + tl.sum(tl.math.exp2(s - m_safe[:, None]), "
            "1)");
        w_.line("m_i = m_new");
        w_.dedent();
      });
    }
    emit_lse_store("out_ptr0");
  }

  void emit_grad_q() {
    emit_query_block_start(true);
    if (a_.kv_len > 0) {
      base("DO", "arg_DO", {term("bh", a_.q_len * a_.value_dim)});
      base("O", "arg_O", {term("bh", a_.q_len * a_.value_dim)});
      base("LSE", "arg_LSE", {term("bh", a_.q_len)});
      emit_q_load();
      w_.line("# p = exp(s - lse) in log2 units; a row that sees no key (lse -inf, out NaN)");
      w_.line("# subtracts +inf (p = 0) and has delta 0: it contributes nothing");
      emit_row_lse(!even_m_);
      emit_row_grad_out(!even_m_, true);
    }
    w_.linef("dq = tl.zeros([BLOCK_M, {}], dtype=tl.float32)", bd_);
    if (a_.kv_len > 0) {
      emit_key_loops([&](bool causal, bool bound) {
        w_.indent();
        emit_scores_of_key_block(causal, bound);
        w_.line("p = tl.math.exp2(s - lse2[:, None])");
        std::string vmask = mask_of({bound ? "rn[:, None] < TK" : "", pad_dv()});
        w_.linef("v = tl.load(V + ({}){})",
                 sum({term("rn[:, None]", a_.v_strides[2], true), "rdv[None, :]"}),
                 masked(vmask, "0.0"));
        w_.linef("dp = tl.dot(do, tl.trans(v){})", dot_precision());
        w_.line("ds = p * (dp - delta[:, None])");
        if (a_.dtype == DType::F32)
          w_.linef("dq += tl.dot(ds, k{})", dot_precision());
        else
          w_.line("dq += tl.dot(ds.to(k.dtype), k)");
        w_.dedent();
      });
    } else {
      w_.line("# no key: dq is 0 (a sum over no key)");
    }
    std::string omask = mask_of({even_m_ ? "" : "rm[:, None] < TQ", pad_d()});
    w_.linef(
        "tl.store(out_ptr0 + ({}), (dq * {}).to({}){})",
        sum({term("bh", a_.q_len * a_.head_dim), term("rm[:, None]", a_.head_dim), "rd[None, :]"}),
        py_float(a_.scale), triton_dtype(a_.dtype), omask.empty() ? "" : ", mask=" + omask);
  }

  // --- per key block: grad_k and grad_v ------------------------------------------------------

  /// dK (wrt_k) or dV, or both (`both`: dK into out_ptr0, dV into out_ptr1, P computed once).
  void emit_grad_kv(bool wrt_k, bool both) {
    const int64_t width = wrt_k ? bd_ : bdv_;
    w_.linef("pid_n = tl.program_id(0){}", wide_);
    w_.linef("bkv = tl.program_id(1){}", wide_);
    w_.linef("b = bkv // {}", names(a_.kv_heads));
    w_.linef("kvh = bkv % {}", names(a_.kv_heads));
    w_.line("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)");
    w_.linef("rm0 = tl.arange(0, BLOCK_M){}", wide_);
    w_.linef("rd = tl.arange(0, {})", bd_);
    w_.linef("rdv = tl.arange(0, {})", bdv_);
    w_.linef("acc = tl.zeros([BLOCK_N, {}], dtype=tl.float32)", width);
    if (both) w_.linef("acc_v = tl.zeros([BLOCK_N, {}], dtype=tl.float32)", bdv_);
    if (a_.q_len > 0) {
      base("K", "arg_K",
           {a_.k_offset ? names(a_.k_offset) : "", term("b", a_.k_strides[0]),
            term("kvh", a_.k_strides[1])});
      std::string kmask = mask_of({even_n_ ? "" : "rn[:, None] < TK", pad_d()});
      w_.linef("k = tl.load(K + ({}){})",
               sum({term("rn[:, None]", a_.k_strides[2], true), "rd[None, :]"}),
               masked(kmask, "0.0"));
      if (wrt_k) {
        base("V", "arg_V",
             {a_.v_offset ? names(a_.v_offset) : "", term("b", a_.v_strides[0]),
              term("kvh", a_.v_strides[1])});
        std::string vmask = mask_of({even_n_ ? "" : "rn[:, None] < TK", pad_dv()});
        w_.linef("v = tl.load(V + ({}){})",
                 sum({term("rn[:, None]", a_.v_strides[2], true), "rdv[None, :]"}),
                 masked(vmask, "0.0"));
      }
      w_.linef("qk_scale = {}  # scale {} * log2(e)", py_float(a_.scale * M_LOG2E),
               py_float(a_.scale));
      w_.line("# the transposed scores s^T [BLOCK_N keys, BLOCK_M queries] of each query block;");
      w_.line("# key rows past TK are never stored (each key's gradient is its own row), query");
      w_.line("# rows past TQ load q = dO = 0 and lse = -inf and add exactly 0");
      if (a_.causal) {
        w_.line("# causal: query i sees key j if j <= i + TK - TQ. Query blocks below `lo` see");
        w_.line("# none of the block's keys (skipped); from `full` on every row sees all of");
        w_.line("# them (no causal mask)");
        w_.line("lo = tl.maximum(pid_n * BLOCK_N - (TK - TQ), 0)");
        w_.line("lo = (lo // BLOCK_M) * BLOCK_M");
        w_.line("full = tl.maximum(tl.minimum((pid_n + 1) * BLOCK_N, TK) - 1 - (TK - TQ), 0)");
        w_.line("full = ((full + BLOCK_M - 1) // BLOCK_M) * BLOCK_M");
      }
      if (group_ > 1) {
        w_.linef("for g in range(0, {}):  # grouped-query: the kv head's {} query heads", group_,
                 group_);
        w_.indent();
        w_.linef("h = kvh * {} + g", group_);
      } else {
        w_.line("h = kvh");
      }
      w_.linef("bh = b * {} + h", names(a_.heads));
      base("Q", "arg_Q",
           {a_.q_offset ? names(a_.q_offset) : "", term("b", a_.q_strides[0]),
            term("h", a_.q_strides[1])});
      base("DO", "arg_DO", {term("bh", a_.q_len * a_.value_dim)});
      if (wrt_k && delta_buffer())
        base("DELTA", "arg_DELTA", {term("bh", a_.q_len)});
      else if (wrt_k)
        base("O", "arg_O", {term("bh", a_.q_len * a_.value_dim)});
      base("LSE", "arg_LSE", {term("bh", a_.q_len)});
      if (a_.mask >= 0)
        base("M", "arg_mask", {term("b", a_.mask_strides[0]), term("h", a_.mask_strides[1])});
      emit_query_loops(wrt_k, both);
      if (group_ > 1) w_.dedent();
    } else {
      w_.line("# no query: the gradient is 0 (a sum over no query)");
    }
    emit_grad_kv_store(wrt_k, "acc", "out_ptr0");
    if (both) emit_grad_kv_store(false, "acc_v", "out_ptr1");
  }

  /// Stores a key block's rows of dK (times the scale) or dV from `acc` into `ptr`.
  void emit_grad_kv_store(bool wrt_k, const std::string& acc, const std::string& ptr) {
    std::string smask = mask_of({even_n_ ? "" : "rn[:, None] < TK", wrt_k ? pad_d() : pad_dv()});
    const int64_t dim = wrt_k ? a_.head_dim : a_.value_dim;
    w_.linef("tl.store({} + ({}), {}.to({}){})", ptr,
             sum({term("bkv", a_.kv_len * dim), term("rn[:, None]", dim),
                  wrt_k ? "rd[None, :]" : "rdv[None, :]"}),
             wrt_k ? fmt::format("({} * {})", acc, py_float(a_.scale)) : acc,
             triton_dtype(a_.dtype), smask.empty() ? "" : ", mask=" + smask);
  }

  void emit_query_loops(bool wrt_k, bool both) {
    auto step = [&](bool causal, bool bound) {
      w_.indent();
      emit_kv_step(wrt_k, both, causal, bound);
      w_.dedent();
    };
    const std::string whole = even_m_ ? "TQ" : "(TQ // BLOCK_M) * BLOCK_M";
    if (a_.causal) {
      w_.line("for start_m in range(lo, tl.minimum(full, TQ), BLOCK_M):");
      step(true, !even_m_);
      w_.linef("for start_m in range(full, {}, BLOCK_M):", whole);
      step(false, false);
      if (!even_m_) {
        w_.line("for start_m in range(tl.maximum(full, (TQ // BLOCK_M) * BLOCK_M), TQ, BLOCK_M):");
        step(false, true);
      }
      return;
    }
    if (even_m_) {
      w_.line("for start_m in range(0, TQ, BLOCK_M):");
      step(false, false);
      return;
    }
    w_.line("# whole query blocks without masks, then the partial last block");
    w_.line("for start_m in range(0, (TQ // BLOCK_M) * BLOCK_M, BLOCK_M):");
    step(false, false);
    w_.line("for start_m in range((TQ // BLOCK_M) * BLOCK_M, TQ, BLOCK_M):");
    step(false, true);
  }

  /// One query block of a key block's program: s^T, p^T, and dv += p^T dO or dk += ds^T q
  /// (both: dv into acc_v, dk into acc).
  void emit_kv_step(bool wrt_k, bool both, bool causal, bool bound) {
    w_.line("rm = start_m + rm0");
    std::string qmask = mask_of({bound ? "rm[:, None] < TQ" : "", pad_d()});
    w_.linef("q = tl.load(Q + ({}){})",
             sum({term("rm[:, None]", a_.q_strides[2], true), "rd[None, :]"}),
             masked(qmask, "0.0"));
    emit_row_lse(bound);
    w_.linef("st = tl.dot(k, tl.trans(q){}) * qk_scale", dot_precision());
    if (a_.mask >= 0) {
      std::string mmask =
          mask_of({even_n_ ? "" : "rn[:, None] < TK", bound ? "rm[None, :] < TQ" : ""});
      w_.linef("mv = tl.load(M + ({} + {}){})", term("rn[:, None]", a_.mask_strides[3], true),
               term("rm[None, :]", a_.mask_strides[2], true),
               masked(mmask, a_.bool_mask ? "0" : "0.0"));
      if (a_.bool_mask)
        w_.line("st = tl.where(mv != 0, st, float(\"-inf\"))");
      else
        w_.linef("st = st + mv * {}", py_float(M_LOG2E));
    }
    if (causal)
      w_.line("st = tl.where(rn[:, None] <= rm[None, :] + (TK - TQ), st, float(\"-inf\"))");
    w_.line("pt = tl.math.exp2(st - lse2[None, :])");
    emit_row_grad_out(bound, wrt_k);
    if (!wrt_k || both) {
      const char* acc = both ? "acc_v" : "acc";
      if (a_.dtype == DType::F32)
        w_.linef("{} += tl.dot(pt, do{})", acc, dot_precision());
      else
        w_.linef("{} += tl.dot(pt.to(do.dtype), do)", acc);
      if (!wrt_k) return;
    }
    w_.linef("dpt = tl.dot(v, tl.trans(do){})", dot_precision());
    w_.line("dst = pt * (dpt - delta[None, :])");
    if (a_.dtype == DType::F32)
      w_.linef("acc += tl.dot(dst, q{})", dot_precision());
    else
      w_.line("acc += tl.dot(dst.to(q.dtype), q)");
  }

  int64_t bd_ = 16, bdv_ = 16, group_ = 1;
  std::string wide_;
};

}  // namespace

TritonKernelSource generate_triton_attention_backward_kernel(const TritonProgramPlan& plan,
                                                             size_t k, int index) {
  COIL_ASSERT(plan.kernels[k].attention != nullptr &&
                  plan.kernels[k].attention->kernel != AttentionKernel::forward,
              "kernel {} is not an attention backward kernel", k);
  return AttentionBackwardPrinter(plan, k, index).generate();
}

}  // namespace coil

namespace coil {

std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> attention_delta_kernels(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers) {
  if (!k.attention || k.attention->kernel != AttentionKernel::grad_k || k.attention_delta >= 0)
    return std::nullopt;
  const AttentionSpec& a = *k.attention;
  if (a.q_len == 0 || a.kv_len == 0 || a.lse < 0) return std::nullopt;
  // delta has lse's shape and layout ([B, H, Tq] f32, contiguous; symbolic sizes included).
  TritonBuffer d = buffers[static_cast<size_t>(a.lse)];
  int count = 0;
  for (const TritonBuffer& b : buffers) count += b.name.rfind("part", 0) == 0;
  d.name = fmt::format("part{}", count);
  d.kind = BufferKind::Intermediate;
  d.external_index = -1;
  buffers.push_back(std::move(d));
  const int delta = static_cast<int>(buffers.size()) - 1;
  // The bodies name what each kernel loads and stores (the planner keeps those buffers in
  // memory): the delta kernel out, grad_out and lse into delta; the gradient kernel its own
  // operands and delta.
  TritonKernelPlan pre = k, grad = k;
  pre.attention_delta = delta;
  pre.attention_delta_kernel = true;
  pre.attention_grad_v_out = -1;
  pre.body = LoopBody();
  int first = -1;
  for (int b : {a.out, a.grad_out, a.lse}) {
    const int v = pre.body.load(b, sym::Expr(0), DType::F32);
    if (first < 0) first = v;
  }
  pre.body.store(delta, sym::Expr(0), first);
  grad.attention_delta = delta;
  grad.body = LoopBody();
  for (const BodyOp& op : k.body.ops())
    if (op.op == LoopOp::load) grad.body.append(op);
  grad.body.load(delta, sym::Expr(0), DType::F32);
  for (const BodyOp& op : k.body.ops())  // its store still names the first load
    if (op.op == LoopOp::store) grad.body.append(op);
  for (TritonKernelPlan* p : {&pre, &grad}) {
    p->op_nest.assign(p->body.ops().size(), 0);
    p->reused.assign(p->body.ops().size(), false);
  }
  return std::make_pair(std::move(pre), std::move(grad));
}

}  // namespace coil

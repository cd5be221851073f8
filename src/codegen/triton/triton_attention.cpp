#include "codegen/triton/triton_attention.h"

#include <cmath>

#include "codegen/kernel_names.h"
#include "codegen/triton/triton_attention_common.h"
#include "support/check.h"

namespace coil {
namespace {

using triton_attention::every_block_divides;
using triton_attention::padded_dim;
using triton_attention::py_float;

class AttentionPrinter : public triton_attention::AttentionTextBase {
 public:
  AttentionPrinter(const TritonProgramPlan& plan, size_t k, int index)
      : AttentionTextBase(plan, k, index) {}

  TritonKernelSource generate() {
    TritonKernelSource out;
    out.name = fused_kernel_name("triton_tem_fused", k_.provenance, index_);
    out.origins = k_.origins;
    out.args.push_back({a_.q, false, "arg_Q"});
    out.args.push_back({a_.k, false, "arg_K"});
    out.args.push_back({a_.v, false, "arg_V"});
    if (a_.mask >= 0) out.args.push_back({a_.mask, false, "arg_mask"});
    out.args.push_back({k_.attention_out, true, "out_ptr0"});
    open_kernel(out);
    emit_body();
    w_.dedent();
    finish(out);
    out.decorator = fmt::format(
        "@heuristics.attention(shape={{'batch': {}, 'heads': {}, 'kv_heads': {}, 'q_len': {}, "
        "'kv_len': {}, 'head_dim': {}, 'value_dim': {}}}, causal={}, dtype='{}', name='{}', "
        "kernel_hash='{}')",
        shape_text(a_.batch), shape_text(a_.heads), shape_text(a_.kv_heads), shape_text(a_.q_len),
        shape_text(a_.kv_len), a_.head_dim, a_.value_dim, a_.causal ? "True" : "False",
        torch_dtype(a_.dtype).substr(6), out.name, out.hash);
    return out;
  }

 private:
  void emit_body() {
    const int64_t bd = padded_dim(a_.head_dim), bdv = padded_dim(a_.value_dim);
    const std::string wide = k_.int64_index ? ".to(tl.int64)" : "";
    w_.linef("# flash attention: q [{}, {}, {}, {}], k [{}, {}, {}, {}], v [..., {}]{}{}",
             names(a_.batch), names(a_.heads), names(a_.q_len), a_.head_dim, names(a_.batch),
             names(a_.kv_heads), names(a_.kv_len), a_.head_dim, a_.value_dim,
             a_.causal ? ", causal (bottom-right)" : "",
             a_.mask < 0    ? ""
             : a_.bool_mask ? ", bool mask"
                            : ", additive mask");
    w_.linef("TQ = {}", names(a_.q_len));
    w_.linef("TK = {}", names(a_.kv_len));
    if (a_.causal) {
      // The last query blocks see the most keys: launched first, the short ones fill the tail.
      w_.line("# causal: the last query blocks (the most keys) first");
      w_.linef("pid_m = (TQ + BLOCK_M - 1) // BLOCK_M - 1 - tl.program_id(0){}", wide);
    } else {
      w_.linef("pid_m = tl.program_id(0){}", wide);
    }
    w_.linef("bh = tl.program_id(1){}", wide);
    w_.linef("b = bh // {}", names(a_.heads));
    w_.linef("h = bh % {}", names(a_.heads));
    const int64_t group = a_.kv_heads > 0 ? a_.heads / a_.kv_heads : 1;
    std::string kvh = "h";
    if (group > 1) {
      w_.linef("kvh = h // {}  # grouped-query: {} query heads per kv head", group, group);
      kvh = "kvh";
    }
    w_.line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)");
    w_.linef("rn0 = tl.arange(0, BLOCK_N){}", wide);
    w_.linef("rd = tl.arange(0, {})", bd);
    w_.linef("rdv = tl.arange(0, {})", bdv);
    base("Q", "arg_Q",
         {a_.q_offset ? names(a_.q_offset) : "", term("b", a_.q_strides[0]),
          term("h", a_.q_strides[1])});
    base("K", "arg_K",
         {a_.k_offset ? names(a_.k_offset) : "", term("b", a_.k_strides[0]),
          term(kvh, a_.k_strides[1])});
    base("V", "arg_V",
         {a_.v_offset ? names(a_.v_offset) : "", term("b", a_.v_strides[0]),
          term(kvh, a_.v_strides[1])});
    if (a_.mask >= 0)
      base("M", "arg_mask", {term("b", a_.mask_strides[0]), term("h", a_.mask_strides[1])});
    std::string qmask = mask_of({even_m_ ? "" : "rm[:, None] < TQ",
                                 pad_d_ ? fmt::format("rd[None, :] < {}", a_.head_dim) : ""});
    w_.linef("q = tl.load(Q + ({}){})",
             sum({term("rm[:, None]", a_.q_strides[2], true), "rd[None, :]"}),
             masked(qmask, "0.0"));
    // exp2 instead of exp: the scores are kept in log2 units (scale * log2(e)).
    w_.linef("qk_scale = {}  # scale {} * log2(e)", py_float(a_.scale * M_LOG2E),
             py_float(a_.scale));
    w_.line("m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)");
    w_.line("l_i = tl.zeros([BLOCK_M], dtype=tl.float32)");
    w_.linef("acc = tl.zeros([BLOCK_M, {}], dtype=tl.float32)", bdv);
    w_.line("# online softmax in log2 units: m_i the running max, l_i the running sum; a row with");
    w_.line(
        "# no visible key so far keeps m = -inf and subtracts 0 instead (m_safe: exp2 gives 0,");
    w_.line("# not the NaN of -inf - -inf)");
    if (a_.kv_len > 0) emit_key_loops([&](bool causal, bool bound) { emit_step(causal, bound); });
    emit_store();
  }

  /// One block of BLOCK_N keys: scores, mask, online softmax, P V.
  void emit_step(bool causal, bool bound) {
    w_.indent();
    emit_scores_of_key_block(causal, bound);
    w_.line("m_new = tl.maximum(m_i, tl.max(s, 1))");
    w_.line("m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)");
    w_.line("alpha = tl.math.exp2(m_i - m_safe)");
    w_.line("p = tl.math.exp2(s - m_safe[:, None])");
    w_.line("l_i = l_i * alpha + tl.sum(p, 1)");
    std::string vmask = mask_of({bound ? "rn[:, None] < TK" : "",
                                 pad_dv_ ? fmt::format("rdv[None, :] < {}", a_.value_dim) : ""});
    w_.linef("v = tl.load(V + ({}){})",
             sum({term("rn[:, None]", a_.v_strides[2], true), "rdv[None, :]"}),
             masked(vmask, "0.0"));
    if (a_.dtype == DType::F32)
      w_.linef("acc = acc * alpha[:, None] + tl.dot(p, v{})", dot_precision());
    else
      w_.line("acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)");
    w_.line("m_i = m_new");
    w_.dedent();
  }

  void emit_store() {
    if (a_.kv_len == 0) {
      w_.line("o = acc  # no key: a sum over no key is 0 (coil's reference)");
    } else {
      w_.line("# rows that saw no key (all masked, or causal with Tq > Tk) have l_i = 0 and");
      w_.line("# give 0 / 0 = NaN, what coil's reference gives (softmax over all -inf)");
      w_.line("o = acc / l_i[:, None]");
    }
    std::string omask = mask_of({even_m_ ? "" : "rm[:, None] < TQ",
                                 pad_dv_ ? fmt::format("rdv[None, :] < {}", a_.value_dim) : ""});
    w_.linef("tl.store(out_ptr0 + ({}), o.to({}){})",
             sum({term("bh", a_.q_len * a_.value_dim), term("rm[:, None]", a_.value_dim),
                  "rdv[None, :]"}),
             triton_dtype(a_.dtype), omask.empty() ? "" : ", mask=" + omask);
  }
};

}  // namespace

TritonKernelSource generate_triton_attention_kernel(const TritonProgramPlan& plan, size_t k,
                                                    int index) {
  COIL_ASSERT(plan.kernels[k].attention != nullptr, "kernel {} is not an attention kernel", k);
  return AttentionPrinter(plan, k, index).generate();
}

}  // namespace coil

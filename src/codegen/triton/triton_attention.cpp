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
    TritonKernelSource out = named_source();
    add_forward_operands(out);
    out.args.push_back({k_.attention_out, true, "out_ptr0"});
    if (k_.attention_lse_out >= 0) out.args.push_back({k_.attention_lse_out, true, "out_ptr1"});
    open_kernel(out);
    emit_body();
    w_.dedent();
    finish(out);
    out.decorator = attention_decorator(out);
    return out;
  }

 private:
  void emit_body() {
    emit_forward_prologue(k_.attention_lse_out >= 0 ? "flash attention and its logsumexp"
                                                    : "flash attention");
    if (a_.kv_len > 0)
      emit_key_loops([&](bool causal, bool bound) { emit_forward_step(causal, bound); });
    emit_store();
  }

  void emit_store() {
    if (a_.kv_len == 0) {
      w_.line("o = acc  # no key: a sum over no key is 0 (coil's reference)");
    } else {
      w_.line("# rows that saw no key (all masked, or causal with Tq > Tk) have l_i = 0 and");
      w_.line("# give 0 / 0 = NaN, what coil's reference gives (softmax over all -inf)");
      w_.line("o = acc / l_i[:, None]");
    }
    std::string omask = mask_of({row_mask(), pad_dv()});
    w_.linef(
        "tl.store(out_ptr0 + ({}), o.to({}){})",
        sum({result_rows_base(a_.value_dim), term("rm[:, None]", a_.value_dim), "rdv[None, :]"}),
        triton_dtype(a_.dtype), omask.empty() ? "" : ", mask=" + omask);
    // A training forward's logsumexp, from this pass's running max and sum (its attention_lse
    // node shares the kernel): the backward kernels read it.
    if (k_.attention_lse_out >= 0) emit_lse_store("out_ptr1");
  }
};

}  // namespace

TritonKernelSource generate_triton_attention_kernel(const TritonProgramPlan& plan, size_t k,
                                                    int index) {
  COIL_ASSERT(plan.kernels[k].attention != nullptr, "kernel {} is not an attention kernel", k);
  return AttentionPrinter(plan, k, index).generate();
}

}  // namespace coil

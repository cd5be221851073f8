// What the flash-attention templates of the GPU backend share: the forward
// (triton_attention.cpp) and the backward (triton_attention_backward.cpp, attention_lse and
// attention_grad). Block sizes, padded head dims, and a printer base that names the spec's sizes
// (numbers, or the size expressions of a size-generic module), prints strided addresses and load
// masks, and finishes a kernel's source (its size arguments, hash).
#pragma once

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "codegen/code_writer.h"
#include "codegen/triton/triton_kernel.h"
#include "codegen/triton/triton_printer.h"
#include "support/hash.h"
#include "sym/size_hints.h"

namespace coil::triton_attention {

/// Whether every block the runtime may pick for a length divides it: blocks are powers of two
/// in [16, 128], clamped to max(16, next_pow2(length)) (configs.attention_block).
inline bool every_block_divides(int64_t length) {
  if (length % 128 == 0) return true;
  return length >= 16 && next_power_of_2(length) == length;
}

/// A padded head dim: a power of two, at least 16 (tl.dot's smallest K and N).
inline int64_t padded_dim(int64_t d) {
  return std::max<int64_t>(16, next_power_of_2(d));
}

/// Full precision for Python floats (the scale).
inline std::string py_float(double v) {
  return fmt::format("{:.17g}", v);
}

/// The printer state and helpers of one attention kernel (plan kernel `k`, its AttentionSpec).
class AttentionTextBase {
 protected:
  AttentionTextBase(const TritonProgramPlan& plan, size_t k, int index)
      : plan_(plan), k_(plan.kernels[k]), a_(*k_.attention), index_(index) {
    // A size-generic module: the spec's numbers at the hints, printed as the size expressions
    // of the operands that have their values (generate_gpu_program checks the text is the same
    // at other sizes, so a coincidence of values is refused, never trusted).
    auto add = [&](const sym::Expr& e) {
      if (is_symbolic(e))
        names_.push_back(e);
      else if (e.defined())
        constants_.insert(e.const_value());
    };
    for (int b : {a_.q, a_.k, a_.v, a_.mask, a_.out, a_.grad_out, a_.lse, k_.attention_out}) {
      if (b < 0) continue;
      const TritonBuffer& t = buf(b);
      sym::Expr inner = 1, outer = 1;
      for (size_t d = t.size_exprs.size(); d-- > 0;) {
        add(t.size_exprs[d]);
        add(t.stride_exprs[d]);
        add(inner = inner * t.size_exprs[d]);
      }
      for (const sym::Expr& d : t.size_exprs) add(outer = outer * d);
    }
  }

  static constexpr const char* kSizeArgs = "@SIZE_ARGS@";

  const TritonBuffer& buf(int b) const { return plan_.buffers[static_cast<size_t>(b)]; }

  /// Adds the pointer arguments' layouts and byte counts to `out`; returns their names.
  std::vector<std::string> add_arg_layouts(TritonKernelSource& out) const {
    std::vector<std::string> params;
    for (const auto& arg : out.args) {
      const TritonBuffer& b = buf(arg.buffer);
      (arg.is_output ? out.bytes_written : out.bytes_read) += b.nbytes();
      out.arg_layouts.push_back({b.dtype, b.sizes, b.strides});
      params.push_back(arg.name);
    }
    return params;
  }

  /// The printed text as out.code, its size arguments (ks0, ...: the symbols it printed) in
  /// place of kSizeArgs, and its hash.
  void finish(TritonKernelSource& out) const {
    out.code = w_.str();
    out.size_args.assign(used_.begin(), used_.end());
    std::stable_sort(
        out.size_args.begin(), out.size_args.end(),
        [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
    std::string size_params;
    for (const std::string& s : out.size_args) {
      size_params += s + ", ";
      out.size_arg_values.push_back(sym::hint(sym::make_symbol(s)).value_or(kTritonNominalSize));
    }
    out.code.replace(out.code.find(kSizeArgs), std::string(kSizeArgs).size(), ", " + size_params);
    out.hash = checksum(out.code);
  }

  /// The decorator's shape entry: the number, or a symbolic length as a string of the kernel's
  /// size arguments that the runtime evaluates per call (heuristics.attention).
  std::string shape_text(int64_t v) const {
    std::string t = names(v);
    return t == std::to_string(v) ? t : "'" + t + "'";
  }

  /// A number of the spec as printed: the size expression with its value in a size-generic
  /// module (parenthesized unless a lone symbol), else the number.
  std::string names(int64_t v) const {
    if (constants_.count(v)) return std::to_string(v);  // a constant of that value first
    for (const sym::Expr& e : names_)
      if (sym::hint(e) == v) {
        for (const sym::Expr& s : sym::free_symbols(e)) used_.insert(sym::to_string(s));
        std::string t = triton_size_text(e, v);
        return e.is_symbol() ? t : "(" + t + ")";
      }
    return std::to_string(v);
  }
  bool symbolic(int64_t v) const { return names(v) != std::to_string(v); }

  /// "x * s", "x" for stride 1, nothing for stride 0 (unless `keep`: a row or key term that
  /// gives the address its tile shape; a view of one row may have any row stride).
  std::string term(const std::string& x, int64_t stride, bool keep = false) const {
    if (stride == 1) return x;
    if (stride == 0 && !keep) return "";
    return fmt::format("{} * {}", x, names(stride));
  }
  static std::string sum(std::vector<std::string> parts) {
    std::vector<std::string> kept;
    for (auto& p : parts)
      if (!p.empty() && p != "0") kept.push_back(std::move(p));
    return kept.empty() ? "0" : fmt::format("{}", fmt::join(kept, " + "));
  }

  /// "(a < A) & (b < B)" of the bounds that some block may cross, or "".
  static std::string mask_of(std::vector<std::string> parts) {
    std::vector<std::string> kept;
    for (auto& p : parts)
      if (!p.empty()) kept.push_back("(" + p + ")");
    return fmt::format("{}", fmt::join(kept, " & "));
  }
  static std::string masked(const std::string& mask, const std::string& other) {
    return mask.empty() ? "" : fmt::format(", mask={}, other={}", mask, other);
  }

  /// "Q = arg_Q + (b * 8192 + h * 2048)": the (batch, head) block's first element.
  void base(const std::string& name, const std::string& arg, std::vector<std::string> parts) {
    const std::string offset = sum(std::move(parts));
    if (offset == "0")
      w_.linef("{} = {}", name, arg);
    else
      w_.linef("{} = {} + ({})", name, arg, offset);
  }

  /// ", input_precision='ieee'" (f32 under --precision highest), "'tf32'" (high), or "" for
  /// bf16/f16 (tensor-core dots in the input dtype).
  std::string dot_precision() const {
    if (a_.dtype != DType::F32) return "";
    return fmt::format(", input_precision='{}'",
                       plan_.fp32_precision == Fp32Precision::highest ? "ieee" : "tf32");
  }

  /// Prints `@triton.jit` and the kernel's def line for out.args (their layouts added to
  /// `out`), indents into the body, and sets the block flags every body reads.
  void open_kernel(TritonKernelSource& out) {
    std::vector<std::string> params = add_arg_layouts(out);
    w_.line("@triton.jit");
    // The size arguments (ks0, ...) are known once the body is printed: a placeholder.
    w_.linef("def {}({}{}BLOCK_M : tl.constexpr, BLOCK_N : tl.constexpr):", out.name,
             fmt::join(params, ", "), kSizeArgs);
    w_.indent();
    // A symbolic length may be any: masked.
    even_m_ = !symbolic(a_.q_len) && every_block_divides(a_.q_len);
    even_n_ = !symbolic(a_.kv_len) && every_block_divides(a_.kv_len);
    pad_d_ = padded_dim(a_.head_dim) != a_.head_dim;
    pad_dv_ = padded_dim(a_.value_dim) != a_.value_dim;
  }

  /// "rd[None, :] < D" where the head dim is padded (empty otherwise); pad_dv for Dv.
  std::string pad_d(const std::string& rd = "rd[None, :]") const {
    return pad_d_ ? fmt::format("{} < {}", rd, a_.head_dim) : "";
  }
  std::string pad_dv() const {
    return pad_dv_ ? fmt::format("rdv[None, :] < {}", a_.value_dim) : "";
  }

  /// In a key loop of a query block: rn, the K block, and the scores s [BLOCK_M, BLOCK_N] in
  /// log2 units with the mask, the bound and the causal limit applied.
  void emit_scores_of_key_block(bool causal, bool bound) {
    w_.line("rn = start_n + rn0");
    std::string kmask = mask_of({bound ? "rn[:, None] < TK" : "", pad_d()});
    w_.linef("k = tl.load(K + ({}){})",
             sum({term("rn[:, None]", a_.k_strides[2], true), "rd[None, :]"}),
             masked(kmask, "0.0"));
    w_.linef("s = tl.dot(q, tl.trans(k){}) * qk_scale", dot_precision());
    if (a_.mask >= 0) {
      // Broadcast dims have stride 0; both terms stay so that the address is a full tile.
      std::string mmask =
          mask_of({even_m_ ? "" : "rm[:, None] < TQ", bound ? "rn[None, :] < TK" : ""});
      w_.linef("mv = tl.load(M + ({} + {}){})", term("rm[:, None]", a_.mask_strides[2], true),
               term("rn[None, :]", a_.mask_strides[3], true),
               masked(mmask, a_.bool_mask ? "0" : "0.0"));
      if (a_.bool_mask)
        w_.line("s = tl.where(mv != 0, s, float(\"-inf\"))");
      else
        w_.linef("s = s + mv * {}", py_float(M_LOG2E));
    }
    // Causal implies the bound for every stored row (j <= i + Tk - Tq < Tk); padding rows
    // past Tq are never stored.
    if (bound && !causal) w_.line("s = tl.where(rn[None, :] < TK, s, float(\"-inf\"))");
    if (causal) w_.line("s = tl.where(rn[None, :] <= rm[:, None] + (TK - TQ), s, float(\"-inf\"))");
  }

  /// The key loops of a query block: causal blocks split into those every row sees (no mask),
  /// the diagonal ones (masked) and the skipped ones past `hi`; otherwise whole blocks, then the
  /// partial last one. `step(causal, bound)` prints one block's body.
  template <typename Step>
  void emit_key_loops(Step step) {
    if (a_.causal) {
      w_.line("# causal: row i sees keys j <= i + TK - TQ. Keys below `full` are seen by every");
      w_.line("# row of the block (no mask); the block's last row sees keys below `hi`; the");
      w_.line("# blocks past it are skipped");
      w_.line("hi = tl.minimum((pid_m + 1) * BLOCK_M + (TK - TQ), TK)");
      w_.line("full = tl.minimum(tl.maximum(pid_m * BLOCK_M + (TK - TQ) + 1, 0), TK)");
      w_.line("full = (full // BLOCK_N) * BLOCK_N");
      w_.line("for start_n in range(0, full, BLOCK_N):");
      step(false, false);
      w_.line("for start_n in range(full, hi, BLOCK_N):");
      step(true, !even_n_);
      return;
    }
    if (even_n_) {
      w_.line("for start_n in range(0, TK, BLOCK_N):");
      step(false, false);
      return;
    }
    w_.line("# whole key blocks without masks, then the partial last block");
    w_.line("for start_n in range(0, (TK // BLOCK_N) * BLOCK_N, BLOCK_N):");
    step(false, false);
    w_.line("for start_n in range((TK // BLOCK_N) * BLOCK_N, TK, BLOCK_N):");
    step(false, true);
  }

  const TritonProgramPlan& plan_;
  const TritonKernelPlan& k_;
  const AttentionSpec& a_;
  int index_;
  CodeWriter w_;
  /// Lengths every block divides (no bounds masks) and head dims that need padding.
  bool even_m_ = true, even_n_ = true, pad_d_ = false, pad_dv_ = false;
  std::vector<sym::Expr> names_;        // what names() may print
  std::set<int64_t> constants_;         // constant sizes and strides of the operands
  mutable std::set<std::string> used_;  // the size symbols it printed
};

}  // namespace coil::triton_attention

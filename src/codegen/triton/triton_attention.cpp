#include "codegen/triton/triton_attention.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/kernel_names.h"
#include "codegen/triton/triton_printer.h"
#include "support/check.h"
#include "support/hash.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

/// Whether every block the runtime may pick for a length divides it: blocks are powers of two
/// in [16, 128], clamped to max(16, next_pow2(length)) (configs.attention_configs).
bool every_block_divides(int64_t length) {
  if (length % 128 == 0) return true;
  return length >= 16 && next_power_of_2(length) == length;
}

/// A padded head dim: a power of two, at least 16 (tl.dot's smallest K and N).
int64_t padded_dim(int64_t d) {
  return std::max<int64_t>(16, next_power_of_2(d));
}

/// Full precision for Python floats (the scale).
std::string py_float(double v) {
  return fmt::format("{:.17g}", v);
}

class AttentionPrinter {
 public:
  AttentionPrinter(const TritonProgramPlan& plan, size_t k, int index)
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
    for (int b : {a_.q, a_.k, a_.v, a_.mask, k_.attention_out}) {
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

  TritonKernelSource generate() {
    TritonKernelSource out;
    out.name = fused_kernel_name("triton_tem_fused", k_.provenance, index_);
    out.origins = k_.origins;
    out.args.push_back({a_.q, false, "arg_Q"});
    out.args.push_back({a_.k, false, "arg_K"});
    out.args.push_back({a_.v, false, "arg_V"});
    if (a_.mask >= 0) out.args.push_back({a_.mask, false, "arg_mask"});
    out.args.push_back({k_.attention_out, true, "out_ptr0"});
    std::vector<std::string> params;
    for (const auto& arg : out.args) {
      const TritonBuffer& b = buf(arg.buffer);
      (arg.is_output ? out.bytes_written : out.bytes_read) += b.nbytes();
      out.arg_layouts.push_back({b.dtype, b.sizes, b.strides});
      params.push_back(arg.name);
    }
    w_.line("@triton.jit");
    // The size arguments (ks0, ...) are known once the body is printed: a placeholder.
    w_.linef("def {}({}{}BLOCK_M : tl.constexpr, BLOCK_N : tl.constexpr):", out.name,
             fmt::join(params, ", "), kSizeArgs);
    w_.indent();
    emit_body();
    w_.dedent();
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
    // A symbolic length is the expression of the kernel's size arguments, as a string the
    // runtime evaluates per call (heuristics.attention).
    auto shape = [&](int64_t v) {
      std::string t = names(v);
      return t == std::to_string(v) ? t : "'" + t + "'";
    };
    out.decorator = fmt::format(
        "@heuristics.attention(shape={{'batch': {}, 'heads': {}, 'kv_heads': {}, 'q_len': {}, "
        "'kv_len': {}, 'head_dim': {}, 'value_dim': {}}}, causal={}, dtype='{}', name='{}', "
        "kernel_hash='{}')",
        shape(a_.batch), shape(a_.heads), shape(a_.kv_heads), shape(a_.q_len), shape(a_.kv_len),
        a_.head_dim, a_.value_dim, a_.causal ? "True" : "False", torch_dtype(a_.dtype).substr(6),
        out.name, out.hash);
    return out;
  }

 private:
  static constexpr const char* kSizeArgs = "@SIZE_ARGS@";

  const TritonBuffer& buf(int b) const { return plan_.buffers[static_cast<size_t>(b)]; }

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

  std::string dot_precision() const {
    if (a_.dtype != DType::F32) return "";
    return fmt::format(", input_precision='{}'",
                       plan_.fp32_precision == Fp32Precision::highest ? "ieee" : "tf32");
  }

  void emit_body() {
    const int64_t bd = padded_dim(a_.head_dim), bdv = padded_dim(a_.value_dim);
    // A symbolic length may be any: masked.
    even_m_ = !symbolic(a_.q_len) && every_block_divides(a_.q_len);
    even_n_ = !symbolic(a_.kv_len) && every_block_divides(a_.kv_len);
    pad_d_ = bd != a_.head_dim;
    pad_dv_ = bdv != a_.value_dim;
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
    if (a_.kv_len > 0) emit_key_loops();
    emit_store();
  }

  void emit_key_loops() {
    if (a_.causal) {
      w_.line("# causal: row i sees keys j <= i + TK - TQ. Keys below `full` are seen by every");
      w_.line("# row of the block (no mask); the block's last row sees keys below `hi`; the");
      w_.line("# blocks past it are skipped");
      w_.line("hi = tl.minimum((pid_m + 1) * BLOCK_M + (TK - TQ), TK)");
      w_.line("full = tl.minimum(tl.maximum(pid_m * BLOCK_M + (TK - TQ) + 1, 0), TK)");
      w_.line("full = (full // BLOCK_N) * BLOCK_N");
      w_.line("for start_n in range(0, full, BLOCK_N):");
      emit_step(false, false);
      w_.line("for start_n in range(full, hi, BLOCK_N):");
      emit_step(true, !even_n_);
      return;
    }
    if (even_n_) {
      w_.line("for start_n in range(0, TK, BLOCK_N):");
      emit_step(false, false);
      return;
    }
    w_.line("# whole key blocks without masks, then the partial last block");
    w_.line("for start_n in range(0, (TK // BLOCK_N) * BLOCK_N, BLOCK_N):");
    emit_step(false, false);
    w_.line("for start_n in range((TK // BLOCK_N) * BLOCK_N, TK, BLOCK_N):");
    emit_step(false, true);
  }

  /// One block of BLOCK_N keys: scores, mask, online softmax, P V.
  void emit_step(bool causal, bool bound) {
    w_.indent();
    w_.line("rn = start_n + rn0");
    std::string kmask = mask_of({bound ? "rn[:, None] < TK" : "",
                                 pad_d_ ? fmt::format("rd[None, :] < {}", a_.head_dim) : ""});
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

  const TritonProgramPlan& plan_;
  const TritonKernelPlan& k_;
  const AttentionSpec& a_;
  int index_;
  CodeWriter w_;
  std::vector<sym::Expr> names_;        // what names() may print
  std::set<int64_t> constants_;         // constant sizes and strides of the operands
  mutable std::set<std::string> used_;  // the size symbols it printed
  bool even_m_ = true, even_n_ = true, pad_d_ = false, pad_dv_ = false;
};

}  // namespace

TritonKernelSource generate_triton_attention_kernel(const TritonProgramPlan& plan, size_t k,
                                                    int index) {
  COIL_ASSERT(plan.kernels[k].attention != nullptr, "kernel {} is not an attention kernel", k);
  return AttentionPrinter(plan, k, index).generate();
}

}  // namespace coil

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
#include "codegen/kernel_names.h"
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
      : plan_(plan),
        k_(plan.kernels[k]),
        a_(*k_.attention),
        index_(index),
        // The combine kernel of a split forward reads rows, whatever the partial's tile.
        packed_(k_.attention_split.combine ? 0 : k_.attention_packed_heads) {
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
      out.size_arg_values.push_back(sym::hint(sym::make_symbol(s)).value_or(sym::kNominalSize));
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

  /// The kernel's `@heuristics.attention(...)` line: the spec's shape, causal flag and dtype,
  /// `extra` (", kernel='grad_q'"), a packed kernel's group (", packed_heads=4": its grid and
  /// BLOCK_M), the kernel's name and hash. Call it after finish().
  std::string attention_decorator(const TritonKernelSource& out,
                                  const std::string& extra = "") const {
    return fmt::format(
        "@heuristics.attention(shape={{'batch': {}, 'heads': {}, 'kv_heads': {}, 'q_len': {}, "
        "'kv_len': {}, 'head_dim': {}, 'value_dim': {}}}, causal={}, dtype='{}'{}{}, name='{}', "
        "kernel_hash='{}')",
        shape_text(a_.batch), shape_text(a_.heads), shape_text(a_.kv_heads), shape_text(a_.q_len),
        shape_text(a_.kv_len), a_.head_dim, a_.value_dim, a_.causal ? "True" : "False",
        torch_dtype(a_.dtype).substr(6), extra,
        packed_ > 0 ? fmt::format(", packed_heads={}", packed_) : "", out.name, out.hash);
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

  /// open_kernel of a kernel over rows (B * H * Tq of them, BLOCK_M a program) rather than
  /// query and key blocks: the split path's combine, the backward's delta.
  void open_row_kernel(TritonKernelSource& out) {
    std::vector<std::string> params = add_arg_layouts(out);
    w_.line("@triton.jit");
    w_.linef("def {}({}{}BLOCK_M : tl.constexpr):", out.name, fmt::join(params, ", "), kSizeArgs);
    w_.indent();
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
    // A symbolic length may be any: masked. Packed: the tile's rows are the group's Tq * G.
    even_m_ = packed_ > 0 ? every_block_divides(a_.q_len * packed_)
                          : !symbolic(a_.q_len) && every_block_divides(a_.q_len);
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

  /// What the tile's rows rm count up to: TQ, or ROWS (Tq * G) where a grouped-query group's
  /// heads are packed into the tile.
  const char* row_bound() const { return packed_ > 0 ? "ROWS" : "TQ"; }
  /// "rm[:, None] < TQ" where a row block may cross the rows (empty otherwise).
  std::string row_mask() const {
    return even_m_ ? "" : fmt::format("rm[:, None] < {}", row_bound());
  }
  /// The first of the program's rows in a contiguous [B * H * Tq, per_row] result (the output,
  /// the logsumexp, the split partials): "bh * Tq * per_row"; packed, the kv head's group of
  /// rows, which are contiguous there: "bkv * (Tq * G * per_row)".
  std::string result_rows_base(int64_t per_row) const {
    if (packed_ > 0) return fmt::format("bkv * {}", a_.q_len * packed_ * per_row);
    return term("bh", a_.q_len * per_row);
  }
  /// The rows' offset in a [B, H, Tq, ...] operand of head and row strides `head_stride` and
  /// `row_stride`, a [BLOCK_M, 1] column: rm's row term (the head is in the operand's base), or
  /// packed, each row's query head hq and query row iq (none for Tq = 1).
  std::string rows_offset(int64_t head_stride, int64_t row_stride) const {
    if (packed_ == 0) return term("rm[:, None]", row_stride, true);
    std::string t = sum(
        {term("hq[:, None]", head_stride), a_.q_len > 1 ? term("iq[:, None]", row_stride) : ""});
    return t == "0" ? "rm[:, None] * 0" : t;  // broadcast: still a column
  }

  /// After a query block's key loops: the rows' logsumexp from the running max m_i and sum l_i
  /// (log2 units) stored into `ptr` ([B * H, Tq] f32), as the natural log torch's logsumexp
  /// is; a row that saw no key has m = -inf, l = 0 and stores -inf.
  void emit_lse_store(const std::string& ptr) {
    if (a_.kv_len > 0) {
      w_.line("# natural log: (m + log2(l)) * ln(2); a row that saw no key has m = -inf, l = 0:");
      w_.line("# -inf");
      w_.linef("lse = (m_i + tl.math.log2(l_i)) * {}", py_float(0.69314718055994530942));
    } else {
      w_.line("lse = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)  # no key: log(0)");
    }
    w_.linef("tl.store({} + ({}), lse{})", ptr, sum({result_rows_base(1), "rm"}),
             even_m_ ? "" : fmt::format(", mask=rm < {}", row_bound()));
  }

  /// A kernel's source named after the plan kernel's graph nodes (triton_tem_fused_...).
  TritonKernelSource named_source() const {
    TritonKernelSource out;
    out.name = fused_kernel_name("triton_tem_fused", k_.provenance, index_);
    out.origins = k_.origins;
    return out;
  }

  /// The forward's operands as arguments: q, k, v and the mask.
  void add_forward_operands(TritonKernelSource& out) const {
    out.args.push_back({a_.q, false, "arg_Q"});
    out.args.push_back({a_.k, false, "arg_K"});
    out.args.push_back({a_.v, false, "arg_V"});
    if (a_.mask >= 0) out.args.push_back({a_.mask, false, "arg_mask"});
  }

  /// pid_m, (b, h, kvh), the row and column ranges, and the Q, K (V, mask) bases.
  void emit_query_block_start(bool with_v) {
    if (packed_ > 0) return emit_packed_block_start(with_v);
    const std::string wide = k_.int64_index ? ".to(tl.int64)" : "";
    const int64_t group = a_.kv_heads > 0 ? a_.heads / a_.kv_heads : 1;
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
    const std::string kvh = group > 1 ? "kvh" : "h";
    if (group > 1)
      w_.linef("kvh = h // {}  # grouped-query: {} query heads per kv head", group, group);
    w_.line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)");
    w_.linef("rn0 = tl.arange(0, BLOCK_N){}", wide);
    w_.linef("rd = tl.arange(0, {})", padded_dim(a_.head_dim));
    if (with_v) w_.linef("rdv = tl.arange(0, {})", padded_dim(a_.value_dim));
    base("Q", "arg_Q",
         {a_.q_offset ? names(a_.q_offset) : "", term("b", a_.q_strides[0]),
          term("h", a_.q_strides[1])});
    base("K", "arg_K",
         {a_.k_offset ? names(a_.k_offset) : "", term("b", a_.k_strides[0]),
          term(kvh, a_.k_strides[1])});
    if (with_v)
      base("V", "arg_V",
           {a_.v_offset ? names(a_.v_offset) : "", term("b", a_.v_strides[0]),
            term(kvh, a_.v_strides[1])});
    if (a_.mask >= 0)
      base("M", "arg_mask", {term("b", a_.mask_strides[0]), term("h", a_.mask_strides[1])});
  }

  /// emit_query_block_start of a packed kernel (attention_packed_heads): a program per (batch,
  /// kv head) whose rows r are the group's (query head hq, query row iq) pairs; q and the mask
  /// are addressed per row (their bases hold the batch only), K and V per kv head.
  void emit_packed_block_start(bool with_v) {
    const std::string wide = k_.int64_index ? ".to(tl.int64)" : "";
    w_.linef("pid_m = tl.program_id(0){}", wide);
    w_.linef("bkv = tl.program_id(1){}  # batch x kv head", wide);
    w_.linef("b = bkv // {}", names(a_.kv_heads));
    w_.linef("kvh = bkv % {}", names(a_.kv_heads));
    w_.linef("# grouped-query, packed: the tile's ROWS rows are kv head kvh's {} query heads x TQ",
             packed_);
    w_.linef("# query rows: row r is query head hq = kvh * {} + r // TQ, query row iq = r % TQ;",
             packed_);
    w_.line("# K and V are read once for the group");
    w_.line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)");
    if (a_.q_len == 1) {
      w_.linef("hq = kvh * {} + rm", packed_);
    } else {
      w_.linef("hq = kvh * {} + rm // TQ", packed_);
      w_.line("iq = rm % TQ");
    }
    w_.linef("rn0 = tl.arange(0, BLOCK_N){}", wide);
    w_.linef("rd = tl.arange(0, {})", padded_dim(a_.head_dim));
    if (with_v) w_.linef("rdv = tl.arange(0, {})", padded_dim(a_.value_dim));
    base("Q", "arg_Q", {a_.q_offset ? names(a_.q_offset) : "", term("b", a_.q_strides[0])});
    base("K", "arg_K",
         {a_.k_offset ? names(a_.k_offset) : "", term("b", a_.k_strides[0]),
          term("kvh", a_.k_strides[1])});
    if (with_v)
      base("V", "arg_V",
           {a_.v_offset ? names(a_.v_offset) : "", term("b", a_.v_strides[0]),
            term("kvh", a_.v_strides[1])});
    if (a_.mask >= 0) base("M", "arg_mask", {term("b", a_.mask_strides[0])});
  }

  /// The query block's Q tile and the scale in log2 units.
  void emit_q_load() {
    std::string qmask = mask_of({row_mask(), pad_d()});
    w_.linef("q = tl.load(Q + ({}){})",
             sum({rows_offset(a_.q_strides[1], a_.q_strides[2]), "rd[None, :]"}),
             masked(qmask, "0.0"));
    // exp2 instead of exp: the scores are kept in log2 units (scale * log2(e)).
    w_.linef("qk_scale = {}  # scale {} * log2(e)", py_float(a_.scale * M_LOG2E),
             py_float(a_.scale));
  }

  /// Every attention kernel's first lines: "# `title`: q [..], k [..](, v [.., Dv]), causal,
  /// mask" and the lengths TQ and TK.
  void emit_shapes_and_lengths(const std::string& title, bool with_v) {
    w_.linef("# {}: q [{}, {}, {}, {}], k [{}, {}, {}, {}]{}{}{}", title, names(a_.batch),
             names(a_.heads), names(a_.q_len), a_.head_dim, names(a_.batch), names(a_.kv_heads),
             names(a_.kv_len), a_.head_dim,
             with_v ? fmt::format(", v [..., {}]", a_.value_dim) : std::string(),
             a_.causal ? ", causal (bottom-right)" : "",
             a_.mask < 0    ? ""
             : a_.bool_mask ? ", bool mask"
                            : ", additive mask");
    w_.linef("TQ = {}", names(a_.q_len));
    w_.linef("TK = {}", names(a_.kv_len));
  }

  /// The forward's program up to its key loops (the forward template, and the partial kernel of
  /// the split decoding path: triton_attention_decode.h): `title` in the header comment, TQ and
  /// TK, the query block (causal: the last blocks first), batch, head and kv head, the ranges,
  /// the Q, K, V (mask) bases, the Q tile, and the running max, sum and accumulator.
  void emit_forward_prologue(const std::string& title) {
    emit_shapes_and_lengths(title, true);
    if (packed_ > 0)
      w_.linef("ROWS = {}  # TQ * {} heads: the rows of a kv head's group", a_.q_len * packed_,
               packed_);
    emit_query_block_start(true);
    emit_q_load();
    w_.line("m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)");
    w_.line("l_i = tl.zeros([BLOCK_M], dtype=tl.float32)");
    w_.linef("acc = tl.zeros([BLOCK_M, {}], dtype=tl.float32)", padded_dim(a_.value_dim));
    w_.line("# online softmax in log2 units: m_i the running max, l_i the running sum; a row with");
    w_.line(
        "# no visible key so far keeps m = -inf and subtracts 0 instead (m_safe: exp2 gives 0,");
    w_.line("# not the NaN of -inf - -inf)");
  }

  /// One block of BLOCK_N keys of the forward: scores, mask, online softmax, P V.
  void emit_forward_step(bool causal, bool bound) {
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
      std::string mmask = mask_of({row_mask(), bound ? "rn[None, :] < TK" : ""});
      w_.linef("mv = tl.load(M + ({} + {}){})", rows_offset(a_.mask_strides[1], a_.mask_strides[2]),
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
    if (causal) {
      // Packed: each row's own query row (all 0 for Tq = 1).
      const std::string row = packed_ == 0   ? "rm[:, None] + "
                              : a_.q_len > 1 ? "iq[:, None] + "
                                             : "";
      w_.linef("s = tl.where(rn[None, :] <= {}(TK - TQ), s, float(\"-inf\"))", row);
    }
  }

  /// The key loops of a query block: causal blocks split into those every row sees (no mask),
  /// the diagonal ones (masked) and the skipped ones past `hi`; otherwise whole blocks, then the
  /// partial last one. `step(causal, bound)` prints one block's body. With `chunk`, only the
  /// keys in [chunk_lo, chunk_hi) (the split decoding path's partial kernel: chunk_lo a multiple
  /// of BLOCK_N, chunk_hi one or TK, so that only TK's partial last block needs a bound).
  template <typename Step>
  void emit_key_loops(Step step, bool chunk = false) {
    const std::string lo = chunk ? "chunk_lo" : "0";
    if (a_.causal) {
      w_.line("# causal: row i sees keys j <= i + TK - TQ. Keys below `full` are seen by every");
      w_.line("# row of the block (no mask); the block's last row sees keys below `hi`; the");
      w_.line("# blocks past it are skipped");
      if (packed_ > 0) {
        // The tile's rows hold query rows 0..TQ - 1 of several heads: the first row and the
        // last see what the group's first and last query rows see.
        w_.line("hi = TK");
        if (symbolic(a_.kv_len))
          w_.line("full = tl.maximum(TK - TQ + 1, 0)");
        else
          w_.linef("full = {}  # TK - TQ + 1", std::max<int64_t>(a_.kv_len - a_.q_len + 1, 0));
      } else {
        w_.line("hi = tl.minimum((pid_m + 1) * BLOCK_M + (TK - TQ), TK)");
        w_.line("full = tl.minimum(tl.maximum(pid_m * BLOCK_M + (TK - TQ) + 1, 0), TK)");
      }
      w_.line("full = (full // BLOCK_N) * BLOCK_N");
      if (chunk) {
        w_.line("# only this program's chunk of keys");
        w_.line("hi = tl.minimum(hi, chunk_hi)");
        w_.line("full = tl.minimum(tl.maximum(full, chunk_lo), chunk_hi)");
      }
      w_.linef("for start_n in range({}, full, BLOCK_N):", lo);
      step(false, false);
      w_.line("for start_n in range(full, hi, BLOCK_N):");
      step(true, !even_n_);
      return;
    }
    const std::string end = chunk ? "chunk_hi" : "TK";
    if (even_n_) {
      w_.linef("for start_n in range({}, {}, BLOCK_N):", lo, end);
      step(false, false);
      return;
    }
    const std::string whole = "(TK // BLOCK_N) * BLOCK_N";
    w_.line("# whole key blocks without masks, then the partial last block");
    w_.linef("for start_n in range({}, {}, BLOCK_N):", lo,
             chunk ? "tl.minimum(chunk_hi, " + whole + ")" : whole);
    step(false, false);
    w_.linef("for start_n in range({}, {}, BLOCK_N):",
             chunk ? "tl.maximum(chunk_lo, " + whole + ")" : whole, end);
    step(false, true);
  }

  const TritonProgramPlan& plan_;
  const TritonKernelPlan& k_;
  const AttentionSpec& a_;
  int index_;
  /// G where a grouped-query group's heads are packed into the tile's rows (rows_offset), else 0.
  int64_t packed_ = 0;
  CodeWriter w_;
  /// Lengths every block divides (no bounds masks) and head dims that need padding.
  bool even_m_ = true, even_n_ = true, pad_d_ = false, pad_dv_ = false;
  std::vector<sym::Expr> names_;        // what names() may print
  std::set<int64_t> constants_;         // constant sizes and strides of the operands
  mutable std::set<std::string> used_;  // the size symbols it printed
};

}  // namespace coil::triton_attention

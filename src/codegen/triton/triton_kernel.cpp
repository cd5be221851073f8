#include "codegen/triton/triton_kernel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/kernel_names.h"
#include "codegen/triton/triton_attention.h"
#include "codegen/triton/triton_attention_backward.h"
#include "codegen/triton/triton_attention_decode.h"
#include "codegen/triton/triton_printer.h"
#include "ir/loop_extents.h"
#include "support/check.h"
#include "support/hash.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

bool is_arg_reduction(ReductionType t) {
  return t == ReductionType::argmax || t == ReductionType::argmin;
}

/// An integer constant as its dtype holds it: the CPU's static_cast and the reference's
/// store wrap (full(value=-3) of u8 is 253), while tl.full takes only a value inside the
/// dtype's range (builder.get_uint8(-3) is a CompilationError).
int64_t wrapped_integer(int64_t v, DType t) {
  switch (t) {
    case DType::I8:
      return static_cast<int8_t>(v);
    case DType::U8:
      return static_cast<uint8_t>(v);
    case DType::I32:
      return static_cast<int32_t>(v);
    case DType::I16:
      return static_cast<int16_t>(v);
    case DType::U16:
      return static_cast<uint16_t>(v);
    case DType::U32:
      return static_cast<uint32_t>(v);
    case DType::Bool:
      return v != 0;
    default:
      return v;
  }
}

/// An index variable of the kernel: xindex or a quotient/remainder of it ("x1 = xindex % 128").
struct IndexAtom {
  std::string name;
  sym::Expr expr;
  sym::Expr symbol;
};

class TritonKernelPrinter {
 public:
  TritonKernelPrinter(const TritonProgramPlan& plan, size_t k, int index)
      : plan_(plan), k_(plan.kernels[k]), body_(k_.body), index_(index) {}

  TritonKernelSource generate() {
    analyze();
    TritonKernelSource out;
    out.name = kernel_name();
    out.origins = k_.origins;
    out.args = args_;
    for (const auto& a : args_) {
      const TritonBuffer& b = plan_.buffers[static_cast<size_t>(a.buffer)];
      (a.is_output ? out.bytes_written : out.bytes_read) += b.nbytes();
      out.arg_layouts.push_back({b.dtype, b.sizes, b.strides});
    }
    std::vector<std::string> params;
    for (const auto& a : args_) params.push_back(a.name);
    // Gathers at run-time indices record an index out of range here (index_check below).
    out.index_sites = index_sites_;
    if (!index_sites_.empty()) params.push_back("index_check");
    // Size symbols the index expressions read (Inductor's ks0, ...), after the pointers.
    out.size_args = size_args_;
    for (const std::string& a : size_args_)
      out.size_arg_values.push_back(sym::hint(sym::make_symbol(a)).value_or(sym::kNominalSize));
    params.insert(params.end(), size_args_.begin(), size_args_.end());
    if (k_.kind == TritonKernelKind::Template) {
      // M, N, K are constants of the body; the runtime knows them from the decorator.
      params.insert(params.end(), {"BLOCK_M : tl.constexpr", "BLOCK_N : tl.constexpr",
                                   "BLOCK_K : tl.constexpr", "GROUP_M : tl.constexpr"});
    } else if (k_.kind == TritonKernelKind::Tiled) {
      params.insert(params.end(), {"ynumel", "xnumel"});
      out.numels = {k_.ynumel, k_.xnumel};
      out.numel_exprs = {k_.ynumel_expr, k_.xnumel_expr};
    } else {
      params.push_back("xnumel");
      out.numels = {k_.xnumel};
      out.numel_exprs = {k_.xnumel_expr};
    }
    if (k_.is_reduction()) {
      params.push_back("r0_numel");
      out.numels.push_back(k_.r0_numel);
      out.numel_exprs.push_back(k_.r0_numel_expr);
    }
    if (k_.kind == TritonKernelKind::Tiled) params.push_back("YBLOCK : tl.constexpr");
    if (k_.kind != TritonKernelKind::Template) params.push_back("XBLOCK : tl.constexpr");
    if (k_.is_reduction()) params.push_back("R0_BLOCK : tl.constexpr");

    w_.line("@triton.jit");
    w_.linef("def {}({}):", out.name, fmt::join(params, ", "));
    w_.indent();
    if (k_.kind != TritonKernelKind::Template) emit_prelude();
    switch (k_.kind) {
      case TritonKernelKind::Template:
        emit_template_mainloop();
        emit_atoms('x');
        for (int i = 0; i < n(); ++i)
          if (live_[static_cast<size_t>(i)]) emit_op(i);
        break;
      case TritonKernelKind::Pointwise:
      case TritonKernelKind::Tiled:
      case TritonKernelKind::Persistent:
        for (int i = 0; i < n(); ++i)
          if (live_[static_cast<size_t>(i)]) emit_op(i);
        break;
      case TritonKernelKind::Looped:
        emit_looped();
        break;
    }
    w_.dedent();
    out.code = w_.str();
    out.hash = checksum(out.code);
    out.helpers.assign(helpers_.begin(), helpers_.end());
    out.decorator = decorator(out);
    return out;
  }

 private:
  int n() const { return static_cast<int>(body_.ops().size()); }
  const BodyOp& op(int i) const { return body_.op(i); }
  bool two_d() const { return k_.kind != TritonKernelKind::Pointwise; }
  std::string block_shape() const {
    return k_.kind == TritonKernelKind::Tiled ? "[YBLOCK, XBLOCK]" : "[XBLOCK, R0_BLOCK]";
  }
  std::string index_dtype() const { return k_.int64_index ? "tl.int64" : "tl.int32"; }

  // ---- analysis ------------------------------------------------------------------------

  void analyze() {
    const size_t count = body_.ops().size();
    rdep_.assign(count, false);
    users_.assign(count, {});
    for (int i = 0; i < n(); ++i) {
      const BodyOp& o = op(i);
      bool d = o.op != LoopOp::reduction && o.index.defined() &&
               sym::depends_on(o.index, triton_rindex());
      for (int a : o.args) {
        if (a < 0) continue;
        users_[static_cast<size_t>(a)].push_back(i);
        if (o.op != LoopOp::reduction && rdep_[static_cast<size_t>(a)]) d = true;
      }
      rdep_[static_cast<size_t>(i)] = d;
    }
    live_.assign(count, false);
    for (int i = n(); i-- > 0;) {
      const BodyOp& o = op(i);
      if (o.op == LoopOp::store && !dropped(i)) live_[static_cast<size_t>(i)] = true;
      if (!live_[static_cast<size_t>(i)]) continue;
      for (int a : o.args)
        if (a >= 0) live_[static_cast<size_t>(a)] = true;
    }
    for (int i = 0; i < n(); ++i)
      if (live_[static_cast<size_t>(i)] && op(i).op == LoopOp::indirect_index) {
        COIL_SUPPORTED_CHECK(k_.kind != TritonKernelKind::Template,
                             "--device cuda: a gather at run-time indices inside a matmul "
                             "template's prologue or epilogue");
        index_sites_.push_back({op(i).site, op(i).ivalue});
      }
    // Arguments: loaded buffers in first-use order, then stored ones.
    std::map<int, std::string> names;
    int n_in = 0, n_out = 0;
    if (k_.kind == TritonKernelKind::Template) {
      args_.push_back({k_.matmul->a.buffer, false, "arg_A"});
      args_.push_back({k_.matmul->b.buffer, false, "arg_B"});
    }
    for (int i = 0; i < n(); ++i) {
      const BodyOp& o = op(i);
      if (o.op != LoopOp::load || !live_[static_cast<size_t>(i)] || names.count(o.buffer)) continue;
      if (o.buffer == k_.acc_buffer) continue;  // the accumulator tile
      names[o.buffer] = fmt::format("in_ptr{}", n_in++);
      args_.push_back({o.buffer, false, names[o.buffer]});
    }
    for (int i = 0; i < n(); ++i) {
      const BodyOp& o = op(i);
      if (o.op != LoopOp::store || !live_[static_cast<size_t>(i)]) continue;
      names[o.buffer] = fmt::format("out_ptr{}", n_out++);
      args_.push_back({o.buffer, true, names[o.buffer]});
    }
    ptr_ = std::move(names);
    // Masks (inductor.md §3.2).
    xmask_ = triton_needs_mask(k_.xnumel_expr, kTritonMaxXBlock);
    if (k_.kind == TritonKernelKind::Template)
      xmask_ = !template_even(k_.matmul->m) || !template_even(k_.matmul->n);
    ymask_ =
        k_.kind == TritonKernelKind::Tiled && triton_needs_mask(k_.ynumel_expr, kTritonMaxYBlock);
    // Persistent R0_BLOCK is next_pow2(r0_numel): the same rule.
    if (k_.is_reduction()) rmask_ = triton_needs_mask(k_.r0_numel_expr, kTritonMaxLoopedR0Block);
    row_mask_ = k_.row_index.defined();
    // Index variables, numbered in order of first use.
    sym::bind_size_hints(ka_, /*exact=*/false);  // size symbols are >= 1, nothing more
    sym::bind_size_hints(pa_, /*exact=*/false);
    bind_index(triton_xindex(), k_.xnumel_expr, k_.xnumel);
    bind_index(triton_yindex(), k_.ynumel_expr, k_.ynumel);
    bind_index(triton_rindex(), k_.r0_numel_expr, k_.r0_numel);
    std::set<std::string> sizes;
    for (int i = 0; i < n(); ++i)
      if (live_[static_cast<size_t>(i)] && op(i).index.defined()) {
        collect_atoms(op(i).index);
        collect_sizes(op(i).index, &sizes);
      } else if (live_[static_cast<size_t>(i)] && op(i).extent.defined()) {
        collect_sizes(op(i).extent, &sizes);  // a size-generic gather's dim
      }
    if (row_mask_) {
      collect_atoms(k_.row_index);
      collect_sizes(k_.row_index, &sizes);
      if (k_.row_numel_expr.defined()) collect_sizes(k_.row_numel_expr, &sizes);
    }
    size_args_.assign(sizes.begin(), sizes.end());
    // ks10 after ks9: numeric order, not the names' (sizes are few; a stable sort by length).
    std::stable_sort(
        size_args_.begin(), size_args_.end(),
        [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
    names_.resize(count);
    for (int i = 0; i < n(); ++i) names_[static_cast<size_t>(i)] = fmt::format("tmp{}", i);
    counter_ = n();
  }

  /// [0, numel): the number where the numel is constant, else the expression of the sizes (a
  /// size-generic kernel's simplifications must hold at every size, not only the hints').
  void bind_index(const sym::Expr& index, const sym::Expr& numel, int64_t value) {
    if (is_symbolic(numel))
      ka_.bind_loop_var(index, numel);
    else
      ka_.bind(index, 0, std::max<int64_t>(value - 1, 0));
  }

  /// The size symbols (ks0, ...) in `e`.
  static void collect_sizes(const sym::Expr& e, std::set<std::string>* out) {
    for (const sym::Expr& s : sym::free_symbols(e)) {
      const std::string name = sym::to_string(s);
      if (name.rfind("ks", 0) == 0) out->insert(name);
    }
  }

  bool dropped(int i) const {
    return op(i).op == LoopOp::store && !plan_.in_memory[static_cast<size_t>(op(i).buffer)];
  }

  static char space_of(const sym::Expr& e) {
    auto syms = sym::free_symbols(e);
    if (syms.size() != 1) return 0;
    if (syms[0] == triton_xindex()) return 'x';
    if (syms[0] == triton_yindex()) return 'y';
    if (syms[0] == triton_rindex()) return 'r';
    return 0;
  }

  void collect_atoms(const sym::Expr& e) {
    bool candidate =
        e.is_symbol() || e.kind() == sym::ExprKind::FloorDiv || e.kind() == sym::ExprKind::Mod;
    char space = space_of(e);
    if (candidate && space) {
      if (atom_of_.count(e)) return;
      int& count = space == 'x' ? nx_ : space == 'y' ? ny_ : nr_;
      std::string name =
          space == 'r' ? fmt::format("r0_{}", count++) : fmt::format("{}{}", space, count++);
      sym::Expr symbol = sym::make_symbol(name);
      sym::Range r = ka_.bounds(e);
      pa_.bind(symbol, r.lo, r.hi);
      atom_of_[e] = symbol;
      atoms_.push_back({name, e, symbol});
      return;
    }
    for (const sym::Expr& o : e.operands()) collect_atoms(o);
  }

  std::string index(const sym::Expr& e) const {
    return triton_index(sym::substitute(e, atom_of_), pa_);
  }

  void emit_atoms(char space) {
    for (const IndexAtom& a : atoms_)
      if (space_of(a.expr) == space) w_.linef("{} = {}", a.name, triton_index(a.expr, ka_));
  }

  std::string kernel_name() const {
    return fused_kernel_name(k_.prefix() + "_fused", k_.provenance, index_);
  }

  std::string decorator(const TritonKernelSource& s) const {
    if (k_.kind == TritonKernelKind::Template) {
      const MatmulSpec& ms = *k_.matmul;
      int64_t batch = product(ms.batch);
      return fmt::format(
          "@heuristics.template(mm={{'m': {}, 'n': {}, 'k': {}, 'batch': {}}}, dtype='{}', "
          "name='{}', kernel_hash='{}')",
          ms.m, ms.n, ms.k, batch, torch_dtype(ms.dtype).substr(6), s.name, s.hash);
    }
    // A symbolic numel's hint is nominal (triton_plan.h): the text holds for every size.
    auto hint = [](const sym::Expr& e, int64_t value) {
      return triton_size_hint(is_symbolic(e) ? sym::nominal_value(e) : value);
    };
    std::string hints;
    if (k_.kind == TritonKernelKind::Tiled)
      hints = fmt::format("'y': {}, 'x': {}", hint(k_.ynumel_expr, k_.ynumel),
                          hint(k_.xnumel_expr, k_.xnumel));
    else
      hints = fmt::format("'x': {}", hint(k_.xnumel_expr, k_.xnumel));
    if (k_.is_reduction()) hints += fmt::format(", 'r0_': {}", hint(k_.r0_numel_expr, k_.r0_numel));
    std::string what = k_.kind == TritonKernelKind::Persistent ? "persistent_reduction"
                       : k_.kind == TritonKernelKind::Looped   ? "reduction"
                                                               : "pointwise";
    std::string extra = k_.kind == TritonKernelKind::Tiled ? ", tile_hint='TILE'" : "";
    if (k_.is_reduction())
      extra = fmt::format(", reduction_hint='{}'", reduction_hint_name(k_.hint));
    // The numels that are size symbols' (a size-generic module's): the runtime fits configs
    // to their nominal hint and to a large size, and picks per size bucket among both.
    std::vector<std::string> dynamic;
    if (k_.kind == TritonKernelKind::Tiled && is_symbolic(k_.ynumel_expr)) dynamic.push_back("'y'");
    if (is_symbolic(k_.xnumel_expr)) dynamic.push_back("'x'");
    if (k_.is_reduction() && is_symbolic(k_.r0_numel_expr)) dynamic.push_back("'r0_'");
    if (!dynamic.empty())
      extra +=
          fmt::format(", dynamic=({}{})", fmt::join(dynamic, ", "), dynamic.size() == 1 ? "," : "");
    return fmt::format("@heuristics.{}(size_hints={{{}}}{}, name='{}', kernel_hash='{}')", what,
                       hints, extra, s.name, s.hash);
  }

  // ---- matmul template (Inductor's triton_mm.py.jinja) -----------------------------------

  /// Whether every block the runtime may pick for a dim of `size` divides it: blocks are powers
  /// of two in [16, 128], clamped to max(16, next_pow2(size)) (heuristics.template).
  static bool template_even(int64_t size) {
    if (size % 128 == 0) return true;
    return size >= 16 && next_power_of_2(size) == size;
  }

  /// The offset of batch `bid` in an operand: its batch strides over the decomposed index.
  static std::string batch_offset(const std::vector<int64_t>& batch,
                                  const std::vector<int64_t>& strides, int64_t offset) {
    std::vector<std::string> parts;
    if (offset != 0) parts.push_back(std::to_string(offset));
    int64_t inner = 1;
    for (size_t i = batch.size(); i-- > 0;) {
      if (batch[i] != 1 && strides[i] != 0) {
        std::string q = inner == 1 ? "bid" : fmt::format("(bid // {})", inner);
        if (i != 0) q = fmt::format("({} % {})", q, batch[i]);
        parts.push_back(fmt::format("{} * {}", q, strides[i]));
      }
      inner *= batch[i];
    }
    return parts.empty() ? "0" : fmt::format("{}", fmt::join(parts, " + "));
  }

  void emit_template_mainloop() {
    const MatmulSpec& ms = *k_.matmul;
    const TritonBuffer& ab = plan_.buffers[static_cast<size_t>(ms.a.buffer)];
    const TritonBuffer& bb = plan_.buffers[static_cast<size_t>(ms.b.buffer)];
    const bool even_m = template_even(ms.m), even_n = template_even(ms.n),
               even_k = template_even(ms.k);
    int64_t batch = product(ms.batch);
    w_.linef("M = {}", ms.m);
    w_.linef("N = {}", ms.n);
    w_.linef("K = {}", ms.k);
    w_.line("# program id with GROUP_M swizzle: GROUP_M row blocks share the B tiles in L2");
    w_.line("pid = tl.program_id(0)");
    w_.line("grid_m = (M + BLOCK_M - 1) // BLOCK_M");
    w_.line("grid_n = (N + BLOCK_N - 1) // BLOCK_N");
    w_.line("width = GROUP_M * grid_n");
    w_.line("group_id = pid // width");
    w_.line("group_size = min(grid_m - group_id * GROUP_M, GROUP_M)");
    w_.line("pid_m = group_id * GROUP_M + (pid % group_size)");
    w_.line("pid_n = (pid % width) // (group_size)");
    std::string wide = k_.int64_index ? ".to(tl.int64)" : "";
    w_.linef("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M){}", wide);
    w_.linef("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N){}", wide);
    // Rows/cols past the end wrap around (valid addresses, results masked at the store).
    w_.line(even_m ? "ram = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)"
                   : "ram = rm % M");
    w_.line(even_n ? "rbn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)"
                   : "rbn = rn % N");
    std::string a_off = fmt::format("{}", ms.a.offset), b_off = fmt::format("{}", ms.b.offset);
    if (batch > 1) {
      w_.linef("bid = tl.program_id(1){}", wide);
      a_off = batch_offset(ms.batch, ms.a.batch_strides, ms.a.offset);
      b_off = batch_offset(ms.batch, ms.b.batch_strides, ms.b.offset);
    }
    w_.line("rk = tl.arange(0, BLOCK_K)");
    auto term = [](const std::string& idx, int64_t stride) {
      return stride == 1 ? idx : fmt::format("{} * {}", idx, stride);
    };
    auto base = [](const std::string& off) { return off == "0" ? "" : off + " + "; };
    w_.linef("A = arg_A + ({}{} + {})", base(a_off), term("ram[:, None]", ms.a.row_stride),
             term("rk[None, :]", ms.a.col_stride));
    w_.linef("B = arg_B + ({}{} + {})", base(b_off), term("rk[:, None]", ms.b.row_stride),
             term("rbn[None, :]", ms.b.col_stride));
    w_.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)");
    w_.line("for k in range(K, 0, -BLOCK_K):");
    w_.indent();
    std::string dt = triton_dtype(ms.dtype);
    std::string a_conv = ab.dtype != ms.dtype ? fmt::format(".to({})", dt) : "";
    std::string b_conv = bb.dtype != ms.dtype ? fmt::format(".to({})", dt) : "";
    if (even_k) {
      w_.linef("a = tl.load(A){}", a_conv);
      w_.linef("b = tl.load(B){}", b_conv);
    } else {
      w_.linef("a = tl.load(A, mask=rk[None, :] < k, other=0.0){}", a_conv);
      w_.linef("b = tl.load(B, mask=rk[:, None] < k, other=0.0){}", b_conv);
    }
    // f32 inputs multiply in full f32 unless the precision is "high" (Inductor's default:
    // torch.backends.cuda.matmul.allow_tf32 is False, so ALLOW_TF32=False); bf16/f16 use the
    // tensor cores as they are.
    if (ms.dtype == DType::F32)
      w_.linef("acc = tl.dot(a, b, acc, input_precision='{}')",
               plan_.fp32_precision == Fp32Precision::highest ? "ieee" : "tf32");
    else
      w_.line("acc = tl.dot(a, b, acc)");
    w_.linef("A += {}", term("BLOCK_K", ms.a.col_stride));
    w_.linef("B += {}", term("BLOCK_K", ms.b.row_stride));
    w_.dedent();
    w_.line("# the epilogue on the accumulator tile: xindex = the flat output index");
    w_.line("idx_m = rm[:, None]");
    w_.line("idx_n = rn[None, :]");
    if (xmask_) w_.line("xmask = (idx_m < M) & (idx_n < N)");
    w_.linef("xindex = {}idx_n + N * idx_m", batch > 1 ? "M * N * bid + " : "");
  }

  // ---- masks ---------------------------------------------------------------------------

  /// The mask of an access at `e`: the masks of the index spaces it depends on.
  std::string mask_for(const sym::Expr& e) const {
    std::vector<std::string> parts;
    bool r = sym::depends_on(e, triton_rindex());
    if (r && (rmask_ || row_mask_)) parts.push_back("r0_mask");
    if (xmask_ && (sym::depends_on(e, triton_xindex()) || (r && row_mask_)))
      parts.push_back("xmask");
    if (ymask_ && sym::depends_on(e, triton_yindex())) parts.push_back("ymask");
    return fmt::format("{}", fmt::join(parts, " & "));
  }
  /// The mask of a reduction's lanes.
  std::string reduction_mask() const {
    std::vector<std::string> parts;
    if (rmask_ || row_mask_) parts.push_back("r0_mask");
    if (xmask_) parts.push_back("xmask");
    return fmt::format("{}", fmt::join(parts, " & "));
  }

  // ---- prelude -------------------------------------------------------------------------

  /// `xnumel = 10000`: a constant numel overrides the argument, so that Triton folds it; a
  /// symbolic one is the argument itself.
  void numel_line(const char* name, const sym::Expr& e, int64_t value) {
    if (!is_symbolic(e)) w_.linef("{} = {}", name, value);
  }

  void emit_prelude() {
    std::string pid0 = k_.int64_index ? "tl.program_id(0).to(tl.int64)" : "tl.program_id(0)";
    if (k_.kind == TritonKernelKind::Tiled) {
      std::string pid1 = k_.int64_index ? "tl.program_id(1).to(tl.int64)" : "tl.program_id(1)";
      numel_line("ynumel", k_.ynumel_expr, k_.ynumel);
      numel_line("xnumel", k_.xnumel_expr, k_.xnumel);
      w_.linef("yoffset = {} * YBLOCK", pid1);
      w_.line("yindex = yoffset + tl.arange(0, YBLOCK)[:, None]");
      if (ymask_) w_.line("ymask = yindex < ynumel");
      w_.linef("xoffset = {} * XBLOCK", pid0);
      w_.line("xindex = xoffset + tl.arange(0, XBLOCK)[None, :]");
      if (xmask_) w_.line("xmask = xindex < xnumel");
      emit_atoms('y');
      emit_atoms('x');
      return;
    }
    numel_line("xnumel", k_.xnumel_expr, k_.xnumel);
    if (k_.is_reduction()) numel_line("r0_numel", k_.r0_numel_expr, k_.r0_numel);
    w_.linef("xoffset = {} * XBLOCK", pid0);
    w_.linef("xindex = xoffset + tl.arange(0, XBLOCK){}", two_d() ? "[:, None]" : "[:]");
    if (xmask_) w_.line("xmask = xindex < xnumel");
    if (k_.kind == TritonKernelKind::Persistent) {
      w_.linef("r0_index = tl.arange(0, R0_BLOCK)[None, :]{}",
               k_.int64_index ? ".to(tl.int64)" : "");
      w_.line("r0_offset = 0");
      emit_rmask();
    }
    if (k_.kind == TritonKernelKind::Looped)
      w_.linef("r0_base = tl.arange(0, R0_BLOCK)[None, :]{}",
               k_.int64_index ? ".to(tl.int64)" : "");
    emit_atoms('x');
    if (k_.kind == TritonKernelKind::Persistent) emit_atoms('r');
  }

  /// r0_mask: inside r0_numel, and inside the row for a split reduction's chunks.
  void emit_rmask() {
    std::vector<std::string> parts;
    if (rmask_) parts.push_back(row_mask_ ? "(r0_index < r0_numel)" : "r0_index < r0_numel");
    if (row_mask_) {
      // The row index mixes x and r variables, which are defined by now.
      std::string row = triton_index(k_.row_index, ka_);
      const bool symbolic = k_.row_numel_expr.defined() && is_symbolic(k_.row_numel_expr);
      parts.push_back(fmt::format(
          "({} < {})", row,
          symbolic ? triton_index(k_.row_numel_expr, ka_) : std::to_string(k_.row_numel)));
    }
    if (!parts.empty()) w_.linef("r0_mask = {}", fmt::join(parts, " & "));
  }

  // ---- ops -----------------------------------------------------------------------------

  /// A float32 constant prints as a Python literal, like Inductor's, where every user is an
  /// arithmetic op or comparison with a tensor operand (which gives the literal its type);
  /// elsewhere constants are tl.full([1], value, dtype) tensors.
  bool literal(int i) const {
    const BodyOp& o = op(i);
    if (o.op != LoopOp::constant || o.dtype != DType::F32) return false;
    // Triton types a subnormal Python float as fp64, which tl.div_rn (fp32 only) rejects.
    if (std::fpclassify(static_cast<float>(o.fvalue)) == FP_SUBNORMAL) return false;
    for (int u : users_[static_cast<size_t>(i)]) {
      const BodyOp& uo = op(u);
      switch (uo.op) {
        case LoopOp::add:
        case LoopOp::sub:
        case LoopOp::mul:
        case LoopOp::div:
        case LoopOp::maximum:
        case LoopOp::minimum:
        case LoopOp::eq:
        case LoopOp::ne:
        case LoopOp::lt:
        case LoopOp::le:
        case LoopOp::gt:
        case LoopOp::ge:
          for (int a : uo.args)
            if (a >= 0 && a != i && op(a).op == LoopOp::constant) return false;
          if (uo.args[0] == uo.args[1]) return false;
          break;
        case LoopOp::where:
          if (uo.args[0] == i || op(uo.args[0]).op == LoopOp::constant) return false;
          break;
          COIL_LOOP_SOURCE_OPS(COIL_LOOP_OP_CASE)
          COIL_LOOP_EFFECT_OPS(COIL_LOOP_OP_CASE)
        case LoopOp::to_dtype:
        case LoopOp::round_to_bf16:
        case LoopOp::round_to_f16:
        case LoopOp::abs:
        case LoopOp::neg:
        case LoopOp::exp:
        case LoopOp::log:
        case LoopOp::log1p:
        case LoopOp::expm1:
        case LoopOp::sqrt:
        case LoopOp::rsqrt:
        case LoopOp::reciprocal:
        case LoopOp::relu:
        case LoopOp::sigmoid:
        case LoopOp::tanh:
        case LoopOp::erf:
        case LoopOp::sin:
        case LoopOp::cos:
        case LoopOp::floor:
        case LoopOp::ceil:
        case LoopOp::round:
        case LoopOp::sign:
        case LoopOp::logical_not:
        case LoopOp::isnan:
        case LoopOp::pow:
        case LoopOp::fmod:
        case LoopOp::logical_and:
        case LoopOp::logical_or:
          return false;
      }
    }
    return true;
  }

  std::string value(int i) const {
    auto it = loop_names_.find(i);
    return it != loop_names_.end() ? it->second : names_[static_cast<size_t>(i)];
  }
  std::string fresh() { return fmt::format("tmp{}", counter_++); }
  std::string scalar_shape() const { return two_d() ? "[1, 1]" : "[1]"; }

  /// The name op `i` gets when printed now: its own inside the first loop (or outside any),
  /// a fresh one when a later loop recomputes it.
  std::string define(int i) {
    if (!in_loop_) return names_[static_cast<size_t>(i)];
    std::string name = printed_.count(i) ? fresh() : names_[static_cast<size_t>(i)];
    loop_names_[i] = name;
    return name;
  }

  void emit_op(int i) {
    const BodyOp& o = op(i);
    switch (o.op) {
      case LoopOp::load:
        return emit_load(i);
      case LoopOp::store:
        return emit_store(i);
      case LoopOp::reduction:
        return emit_inline_reduction(i);
      case LoopOp::constant: {
        std::string name = define(i);
        if (literal(i)) {
          w_.linef("{} = {}", name, python_float_literal(o.fvalue, o.dtype));
        } else {
          std::string v = is_floating(o.dtype) ? python_float_literal(o.fvalue, o.dtype)
                          : o.dtype == DType::U64  // the int64's bits, read unsigned
                              ? std::to_string(static_cast<uint64_t>(o.ivalue))
                              : std::to_string(wrapped_integer(o.ivalue, o.dtype));
          w_.linef("{} = tl.full({}, {}, {})", name, scalar_shape(), v, triton_dtype(o.dtype));
        }
        break;
      }
      case LoopOp::index_expr: {
        std::string name = define(i);
        if (auto c = o.index.as_const()) {
          w_.linef("{} = tl.full({}, {}, {})", name, scalar_shape(), wrapped_integer(*c, o.dtype),
                   triton_dtype(o.dtype));
        } else {
          std::string e = index(o.index);
          bool same = (o.dtype == DType::I64) == k_.int64_index &&
                      (o.dtype == DType::I64 || o.dtype == DType::I32);
          w_.linef("{} = {}", name,
                   same ? e : fmt::format("({}).to({})", e, triton_dtype(o.dtype)));
        }
        break;
      }
      case LoopOp::indirect_index:
        return emit_indirect_index(i);
        COIL_LOOP_MATH_OPS(COIL_LOOP_OP_CASE) {
          std::vector<std::string> args;
          std::vector<DType> dts;
          for (int a = 0; a < loop_op_arity(o.op); ++a) {
            args.push_back(value(o.args[static_cast<size_t>(a)]));
            dts.push_back(body_.dtype_of(o.args[static_cast<size_t>(a)]));
          }
          std::string name = define(i);
          if (std::string h = triton_op_helper(o); !h.empty()) helpers_.insert(h);
          w_.linef("{} = {}", name, triton_op(o, args, dts));
        }
    }
    printed_.insert(i);
  }

  /// An integer value as an index into a dim of o.ivalue elements (a gather at run-time
  /// indices): wrapped once where negative (numpy/ONNX), then an index still out of range is
  /// recorded in index_check (0, its site, the index, the dim's size: the wrapper raises it, as
  /// the C++ kernels' coil::checked_index does) and clamped, so that no lane reads out of
  /// bounds.
  void emit_indirect_index(int i) {
    const BodyOp& o = op(i);
    const std::string v = value(o.args[0]);
    const std::string name = define(i);
    // A size-generic gather's dim is its size expression (ks0), a kernel argument.
    const std::string size = o.extent.defined() ? index(o.extent) : std::to_string(o.ivalue);
    w_.linef("{0} = tl.where({1} < 0, {1} + {2}, {1})", name, v, size);
    // Only the lanes the value is computed for: a masked-off lane's index is undefined.
    std::vector<std::string> lanes;
    if (rdep_[static_cast<size_t>(o.args[0])] && (rmask_ || row_mask_)) lanes.push_back("r0_mask");
    if (xmask_) lanes.push_back("xmask");
    if (ymask_) lanes.push_back("ymask");
    lanes.push_back(fmt::format("(({0} < 0) | ({0} >= {1}))", name, size));
    const std::string bad = name + "_bad";
    w_.linef("{} = {}", bad, fmt::join(lanes, " & "));
    // A pointer per lane (one address): tl.store's mask keeps the lanes that are out of range.
    const std::string at = fmt::format("index_check + {}.to(tl.int32) * 0", bad);
    w_.linef("tl.store({}, 0, {})", at, bad);
    w_.linef("tl.store({} + 1, {}, {})", at, o.site, bad);
    w_.linef("tl.store({} + 2, {}.to(tl.int64), {})", at, v, bad);
    w_.linef("tl.store({} + 3, {}, {})", at, size, bad);
    const std::string last = o.extent.defined() ? size + " - 1" : std::to_string(o.ivalue - 1);
    w_.linef("{0} = tl.minimum(tl.maximum({0}, 0), {1}).to({2})", name, last, index_dtype());
    printed_.insert(i);
  }

  void emit_load(int i) {
    const BodyOp& o = op(i);
    const TritonBuffer& b = plan_.buffers[static_cast<size_t>(o.buffer)];
    if (o.buffer == k_.acc_buffer && k_.kind == TritonKernelKind::Template) {
      // The product, rounded to its buffer's dtype as the stored product would be.
      std::string v = "acc";
      if (b.dtype != DType::F32) v += fmt::format(".to({})", triton_dtype(b.dtype));
      if (o.dtype != b.dtype) v += fmt::format(".to({})", triton_dtype(o.dtype));
      w_.linef("{} = {}", define(i), v);
      printed_.insert(i);
      return;
    }
    // A gather's index names its indirect_index's value (already clamped in range).
    const sym::Expr at =
        is_indirect_load(o)
            ? sym::substitute(o.index, {{indirect_var(), sym::make_symbol(value(o.args[0]))}})
            : o.index;
    std::string mask = mask_for(at);
    std::string call = fmt::format("tl.load({} + ({})", ptr_.at(o.buffer), index(at));
    std::string policy = eviction_policy(i);
    if (!mask.empty() || !policy.empty()) call += ", " + (mask.empty() ? "None" : mask);
    if (!policy.empty()) call += fmt::format(", eviction_policy='{}'", policy);
    // Masked-out lanes of a reduction kernel read a defined value (they are excluded from
    // every reduction by tl.where, but stay finite on the way there).
    if (!mask.empty() && k_.is_reduction())
      call += is_floating(b.dtype) ? ", other=0.0" : ", other=0";
    call += ")";
    if (o.dtype != b.dtype) call += fmt::format(".to({})", triton_dtype(o.dtype));
    std::string name = define(i);
    w_.linef("{} = {}", name, call);
    printed_.insert(i);
  }

  /// evict_last for data read again (a broadcast operand, or a row a later loop re-reads),
  /// evict_first for data a looped reduction streams through once.
  std::string eviction_policy(int i) const {
    bool reused = k_.reused[static_cast<size_t>(i)];
    if (k_.kind != TritonKernelKind::Looped) return reused ? "evict_last" : "";
    if (!rdep_[static_cast<size_t>(i)]) return "evict_last";
    return reused || loops_using_[static_cast<size_t>(i)] > 1 ? "evict_last" : "evict_first";
  }

  void emit_store(int i) {
    const BodyOp& o = op(i);
    if (dropped(i)) return;
    const TritonBuffer& b = plan_.buffers[static_cast<size_t>(o.buffer)];
    std::string v = value(o.args[0]);
    if (body_.dtype_of(o.args[0]) != b.dtype) v += fmt::format(".to({})", triton_dtype(b.dtype));
    std::string idx, mask;
    if (auto c = o.index.as_const()) {
      // A store of one element (a full reduction): the pointer takes the value's shape.
      std::string shape = k_.kind == TritonKernelKind::Tiled ? "[YBLOCK, XBLOCK]"
                          : two_d()                          ? "[XBLOCK, 1]"
                                                             : "[XBLOCK]";
      idx = fmt::format("tl.full({}, {}, {})", shape, *c, index_dtype());
      mask = xmask_ ? "xmask" : "";
    } else {
      idx = index(o.index);
      mask = mask_for(o.index);
    }
    w_.linef("tl.store({} + ({}), {}, {})", ptr_.at(o.buffer), idx, v,
             mask.empty() ? "None" : mask);
    printed_.insert(i);
  }

  /// A reduction of a pointwise kernel (over one element) or of a persistent one (the whole
  /// row is in the block).
  void emit_inline_reduction(int i) {
    const BodyOp& o = op(i);
    int v = o.args[0];
    std::string val = value(v);
    std::string name = names_[static_cast<size_t>(i)];
    bool arg = is_arg_reduction(o.reduction);
    if (k_.kind == TritonKernelKind::Pointwise) {
      if (arg) {
        w_.linef("{} = tl.full([1], 0, tl.int64)", name);
      } else {
        w_.linef("{} = {}", name,
                 body_.dtype_of(v) == o.dtype
                     ? val
                     : fmt::format("{}.to({})", val, triton_dtype(o.dtype)));
      }
      printed_.insert(i);
      return;
    }
    std::string b = broadcast_value(i);
    std::string mask = reduction_mask();
    if (!mask.empty()) {
      std::string t = fresh();
      w_.linef("{} = tl.where({}, {}, {})", t, mask, b,
               reduction_identity(o.reduction, value_dtype(i)));
      b = t;
    }
    std::string helper = reduction_helper(o.reduction, value_dtype(i));
    if (!helper.empty()) helpers_.insert(helper);
    if (!arg) {
      w_.linef("{} = {}", name, reduction_over_axis(o.reduction, o.dtype, b));
    } else {
      std::string idx = fresh(), vals = fresh();
      w_.linef("{} = tl.broadcast_to(r0_index, [XBLOCK, R0_BLOCK])", idx);
      w_.linef("{}, {} = tl.reduce(({}, {}), 1, {})", vals, name, b, idx, helper);
      w_.linef("{0} = {0}[:, None].to({1})", name, triton_dtype(o.dtype));
    }
    printed_.insert(i);
  }

  /// The dtype a reduction combines in: the value's for argmax/argmin, the result's otherwise.
  DType value_dtype(int i) const {
    const BodyOp& o = op(i);
    return is_arg_reduction(o.reduction) ? body_.dtype_of(o.args[0]) : o.dtype;
  }

  /// tmpN = tl.broadcast_to(value, [XBLOCK, R0_BLOCK]), converted to the combine dtype.
  std::string broadcast_value(int i) {
    const BodyOp& o = op(i);
    std::string val = value(o.args[0]);
    if (body_.dtype_of(o.args[0]) != value_dtype(i))
      val += fmt::format(".to({})", triton_dtype(value_dtype(i)));
    std::string b = fresh();
    w_.linef("{} = tl.broadcast_to({}, [XBLOCK, R0_BLOCK])", b, val);
    return b;
  }

  // ---- looped reductions ---------------------------------------------------------------

  /// Per op: the r loop (nest) whose cone needs it, as a set per loop.
  std::vector<std::vector<bool>> loop_cones() const {
    std::vector<std::vector<bool>> cones(static_cast<size_t>(k_.num_nests));
    for (int l = 0; l < k_.num_nests; ++l) {
      auto& cone = cones[static_cast<size_t>(l)];
      cone.assign(body_.ops().size(), false);
      for (int i = 0; i < n(); ++i) {
        const BodyOp& o = op(i);
        if (op_nest(i) != l || !live_[static_cast<size_t>(i)]) continue;
        if (o.op == LoopOp::reduction || (o.op == LoopOp::store && rdep_[static_cast<size_t>(i)]))
          cone[static_cast<size_t>(i)] = true;
      }
      for (int i = n(); i-- > 0;) {
        if (!cone[static_cast<size_t>(i)]) continue;
        for (int a : op(i).args) {
          if (a < 0 || op(a).op == LoopOp::reduction) continue;  // results of earlier loops
          cone[static_cast<size_t>(a)] = true;
        }
      }
    }
    return cones;
  }
  int op_nest(int i) const { return k_.op_nest[static_cast<size_t>(i)]; }

  bool args_printed(int i) const {
    for (int a : op(i).args)
      if (a >= 0 && !printed_.count(a)) return false;
    return true;
  }

  void emit_looped() {
    auto cones = loop_cones();
    loops_using_.assign(body_.ops().size(), 0);
    for (const auto& cone : cones)
      for (int i = 0; i < n(); ++i)
        if (cone[static_cast<size_t>(i)] && rdep_[static_cast<size_t>(i)])
          ++loops_using_[static_cast<size_t>(i)];
    for (int l = 0; l < k_.num_nests; ++l) {
      const auto& cone = cones[static_cast<size_t>(l)];
      std::vector<int> reductions;
      bool any = false;
      for (int i = 0; i < n(); ++i) {
        if (!cone[static_cast<size_t>(i)]) continue;
        any = true;
        // Row-invariant operands are computed once, before the loop.
        if (!rdep_[static_cast<size_t>(i)] && op(i).op != LoopOp::reduction && !printed_.count(i))
          emit_op(i);
        if (op(i).op == LoopOp::reduction && op_nest(i) == l) reductions.push_back(i);
      }
      if (any) emit_loop(cone, reductions);
      flush_row_ops(l);
    }
    flush_row_ops(k_.num_nests);
  }

  /// Row-invariant ops of nests up to `last` whose operands are ready (per-row epilogues and
  /// their stores), in body order.
  void flush_row_ops(int last) {
    for (int i = 0; i < n(); ++i) {
      if (!live_[static_cast<size_t>(i)] || rdep_[static_cast<size_t>(i)] || printed_.count(i))
        continue;
      if (op(i).op == LoopOp::reduction || op_nest(i) > last || !args_printed(i)) continue;
      emit_op(i);
    }
  }

  void emit_loop(const std::vector<bool>& cone, const std::vector<int>& reductions) {
    for (int r : reductions) {
      const BodyOp& o = op(r);
      std::string acc = "_" + names_[static_cast<size_t>(r)];
      DType vt = value_dtype(r);
      w_.linef("{} = tl.full([XBLOCK, R0_BLOCK], {}, {})", acc, reduction_identity(o.reduction, vt),
               triton_dtype(vt));
      if (is_arg_reduction(o.reduction))
        w_.linef("{}_index = tl.full([XBLOCK, R0_BLOCK], {}, {})", acc,
                 k_.int64_index ? "9223372036854775807" : "2147483647", index_dtype());
    }
    w_.line("for r0_offset in range(0, r0_numel, R0_BLOCK):");
    w_.indent();
    w_.line("r0_index = r0_offset + r0_base");
    emit_rmask();
    emit_atoms('r');
    in_loop_ = true;
    loop_names_.clear();
    for (int i = 0; i < n(); ++i) {
      if (!cone[static_cast<size_t>(i)] || !rdep_[static_cast<size_t>(i)]) continue;
      emit_op(i);
    }
    std::string mask = reduction_mask();
    for (int r : reductions) {
      const BodyOp& o = op(r);
      std::string acc = "_" + names_[static_cast<size_t>(r)];
      std::string b = broadcast_value(r);
      std::string helper = reduction_helper(o.reduction, value_dtype(r));
      if (!helper.empty()) helpers_.insert(helper);
      if (is_arg_reduction(o.reduction)) {
        std::string v = fresh(), ix = fresh();
        w_.linef("{}, {} = {}({}, {}_index, {}, r0_index)", v, ix, helper, acc, acc, b);
        if (mask.empty()) {
          w_.linef("{} = {}", acc, v);
          w_.linef("{}_index = {}", acc, ix);
        } else {
          w_.linef("{0} = tl.where({1}, {2}, {0})", acc, mask, v);
          w_.linef("{0}_index = tl.where({1}, {2}, {0}_index)", acc, mask, ix);
        }
      } else {
        std::string c = fresh();
        w_.linef("{} = {}", c, reduction_combine(o.reduction, o.dtype, acc, b));
        if (mask.empty())
          w_.linef("{} = {}", acc, c);
        else
          w_.linef("{0} = tl.where({1}, {2}, {0})", acc, mask, c);
      }
    }
    in_loop_ = false;
    loop_names_.clear();
    w_.dedent();
    for (int r : reductions) {
      const BodyOp& o = op(r);
      std::string acc = "_" + names_[static_cast<size_t>(r)];
      std::string name = names_[static_cast<size_t>(r)];
      if (is_arg_reduction(o.reduction)) {
        w_.linef("{}, {} = tl.reduce(({}, {}_index), 1, {})", fresh(), name, acc, acc,
                 reduction_helper(o.reduction, value_dtype(r)));
        w_.linef("{0} = {0}[:, None].to({1})", name, triton_dtype(o.dtype));
      } else {
        w_.linef("{} = {}", name, reduction_over_axis(o.reduction, o.dtype, acc));
      }
      printed_.insert(r);
    }
  }

  const TritonProgramPlan& plan_;
  const TritonKernelPlan& k_;
  const LoopBody& body_;
  int index_;
  CodeWriter w_;
  std::vector<bool> rdep_, live_;
  std::vector<std::vector<int>> users_;
  std::vector<KernelArg> args_;
  std::map<int, std::string> ptr_;  // buffer -> in_ptrN / out_ptrN
  bool xmask_ = false, ymask_ = false, rmask_ = false, row_mask_ = false;
  std::vector<std::string> size_args_;  // ks0, ... the kernel reads (size-generic modules)
  std::vector<std::pair<int, int64_t>> index_sites_;  // gathers: (run-check site, dim size)
  sym::Analyzer ka_;                                  // kernel index symbols
  sym::Analyzer pa_;                                  // index variables (for printing)
  std::map<sym::Expr, sym::Expr> atom_of_;
  std::vector<IndexAtom> atoms_;
  int nx_ = 0, ny_ = 0, nr_ = 0;
  std::vector<std::string> names_;
  std::map<int, std::string> loop_names_;  // ops recomputed in the current loop
  std::set<int> printed_;
  std::vector<int> loops_using_;
  std::set<std::string> helpers_;
  bool in_loop_ = false;
  int counter_ = 0;
};

}  // namespace

TritonKernelSource generate_triton_kernel(const TritonProgramPlan& plan, size_t k, int index) {
  if (const auto& a = plan.kernels[k].attention) {
    if (plan.kernels[k].attention_split.splits > 0)
      return generate_triton_attention_decode_kernel(plan, k, index);
    if (a->kernel != AttentionKernel::forward)
      return generate_triton_attention_backward_kernel(plan, k, index);
    return generate_triton_attention_kernel(plan, k, index);
  }
  return TritonKernelPrinter(plan, k, index).generate();
}

}  // namespace coil

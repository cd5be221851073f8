// CppMatmulKernel (the matmul template) and extern calls: the kernels that are not loop nests.
//
// A template kernel calls coil::gemm::matmul (kernels/coil_gemm.h: packing, cache and thread
// blocking, register-blocked micro-kernels) and hands it the epilogue as a lambda: for each
// finished output block the lambda walks its rows and runs the fused pointwise body along
// the row with explicit SIMD, reading the product from the accumulator tile (kAccumulatorBuffer)
// while it is in cache. A product that outlives the kernel is stored by the same lambda.
// A constant B (a weight) is packed once when the module is loaded (coil_graph_pack), never
// per call; any other B is packed at the start of each call. A constant f32 A that every batch
// shares (a 1x1 convolution's weight in W @ x) is packed at load time too; any other A is
// packed by coil::gemm block by block during the call.
//
// Extern kernels call a library (kernels/coil_extern.h): dnnl_sgemm / cblas_sgemm for matmuls
// that autotuning gave to a library, oneDNN's convolution for conv2d.
#include "codegen/cpp/cpp_template.h"

#include "codegen/cpp/cpp_plan.h"
#include "codegen/cpp/cpp_printer.h"
#include "support/check.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

std::string elem_type(DType t) {
  return t == DType::BF16 ? "coil::bfloat16" : "float";
}

/// The numbers of a template's or library call's spec as the kernel prints them. In a
/// size-generic module a number that a size expression of the buffers the call touches has at
/// these sizes prints as that expression (the strides of a view over a symbolic batch, the
/// count of batches, a length), else as itself; a constant candidate of the same value wins.
/// Whichever expression is picked, the text is right at these sizes, and a module is reused
/// only at sizes that print the same text (sym/size_hints.h): a coincidence costs reuse,
/// never a wrong value.
class SizeNames {
 public:
  SizeNames() = default;
  SizeNames(const IrProgram& p, std::initializer_list<int> buffers,
            const std::vector<sym::Expr>& extra = {}) {
    auto add = [&](const sym::Expr& e) {
      if (!e.defined()) return;
      symbolic_ = symbolic_ || !e.is_const();
      exprs_.push_back(e);
    };
    for (const sym::Expr& e : extra) add(e);
    for (int b : buffers) {
      if (b < 0) continue;
      const Layout& l = p.buffer(b).layout;
      sym::Expr inner = 1, outer = 1;
      for (size_t d = l.sizes.size(); d-- > 0;) {
        add(l.sizes[d]);
        add(l.strides[d]);
        inner = inner * l.sizes[d];
        add(inner);
      }
      for (const sym::Expr& d : l.sizes) add(outer = outer * d);
    }
  }
  std::string operator()(int64_t v) const {
    if (!symbolic_) return std::to_string(v);
    for (const sym::Expr& e : exprs_)
      if (e.is_const() && e.const_value() == v) return std::to_string(v);
    // The candidates' values, once: a pair's product is tried by its value (an attention
    // call of a 12-layer decoder has ~50 candidates: building and evaluating each of the
    // 1,275 products per number took 54% of the whole compile's front half).
    if (hints_.size() != exprs_.size())
      for (size_t i = hints_.size(); i < exprs_.size(); ++i) hints_.push_back(sym::hint(exprs_[i]));
    for (size_t i = 0; i < exprs_.size(); ++i)
      if (!exprs_[i].is_const() && hints_[i] == v) return extent_text(exprs_[i], v);
    for (size_t i = 0; i < exprs_.size(); ++i)
      for (size_t j = i; j < exprs_.size(); ++j) {
        int64_t product = 0;
        if (!hints_[i] || !hints_[j] || __builtin_mul_overflow(*hints_[i], *hints_[j], &product) ||
            product != v)
          continue;
        const sym::Expr e = exprs_[i] * exprs_[j];
        if (!e.is_const()) return extent_text(e, v);
      }
    return std::to_string(v);
  }

 private:
  std::vector<sym::Expr> exprs_;
  mutable std::vector<std::optional<int64_t>> hints_;  // sym::hint of each of exprs_
  bool symbolic_ = false;
};

/// `base + offset + sum(batch index_d * stride_d)` for flat batch index `b`, as C++.
std::string batch_offset(const std::string& base, const StridedOperand& op,
                         const std::vector<int64_t>& batch, const SizeNames& names = {}) {
  std::string e = op.offset == 0 ? base : fmt::format("{} + {}", base, names(op.offset));
  int64_t inner = 1;
  for (size_t d = batch.size(); d-- > 0;) {
    if (op.batch_strides[d] != 0 && batch[d] > 1) {
      std::string idx = inner == 1 ? "b" : fmt::format("b / {}", names(inner));
      if (d > 0) idx = fmt::format("({}) % {}", idx, names(batch[d]));
      e += fmt::format(" + ({}) * {}", idx, names(op.batch_strides[d]));
    }
    inner *= batch[d];
  }
  return e;
}

/// The product's rows m as the kernel prints it: in a size-generic module the expression of
/// the output's row dims (all but the last; per batch, the one before the last) when it has
/// the value m here, else the number.
std::string m_text(const ComputedBuffer& t) {
  const MatmulSpec& s = *t.matmul;
  const size_t last = t.ranges.size() - 1;
  sym::Expr m = 1;
  if (s.batch.empty()) {
    for (size_t d = 0; d < last; ++d) m = m * t.ranges[d];
  } else if (last >= 1) {
    m = t.ranges[last - 1];
  }
  return extent_text(m, s.m);
}

/// Whether batch_offset's expression reads the batch index `b`.
bool reads_batch(const StridedOperand& op, const std::vector<int64_t>& batch) {
  for (size_t d = 0; d < batch.size(); ++d)
    if (op.batch_strides[d] != 0 && batch[d] > 1) return true;
  return false;
}

bool batch_invariant(const StridedOperand& op) {
  for (int64_t s : op.batch_strides)
    if (s != 0) return false;
  return true;
}

}  // namespace

Nest epilogue_nest(const ComputedBuffer& t, int product_buffer, bool product_narrowed,
                   const Nest* fused, bool store_product, int tmp_base) {
  Nest e;
  e.ranges = static_extents(t.ranges);
  e.range_text = extent_texts(t.ranges, e.ranges);
  sym::Expr index;
  for (const BodyOp& op : t.body.ops())
    if (op.op == LoopOp::store) index = op.index;
  int acc = e.body.load(kAccumulatorBuffer, index, DType::F32);
  if (store_product) e.body.store(product_buffer, index, acc);
  if (fused) {
    std::vector<int> remap;
    for (BodyOp op : fused->body.ops()) {
      for (int& a : op.args)
        if (a >= 0) a = remap[static_cast<size_t>(a)];
      // A product stored in a narrower dtype (bf16) is read back from memory, rounded, as
      // any consumer of the stored value sees it.
      if (op.op == LoopOp::load && op.buffer == product_buffer && !product_narrowed) {
        COIL_ASSERT(op.index == index, "epilogue reads the product away from its element");
        remap.push_back(acc);
        continue;
      }
      remap.push_back(e.body.append(std::move(op)));
    }
  }
  e.after.assign(e.body.ops().size(), false);
  e.tmp_base = tmp_base;
  return e;
}

namespace {

void emit_epilogue_lambda(NestPrinter& p, const ComputedBuffer& t, const Nest& e,
                          const CppNestPlan& ep) {
  CodeWriter& w = p.writer();
  std::vector<int64_t> rows(e.ranges.begin(), e.ranges.end() - 1);  // all dims but the last
  size_t last = e.ranges.size() - 1;
  const std::vector<sym::Expr> row_exprs(t.ranges.begin(), t.ranges.end() - 1);
  // The batch index names only where a row of several dims reads it (flat_row).
  w.linef(
      "[&](int64_t{}, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc, "
      "int64_t ld) {{",
      rows.size() == 1 ? "" : " b");
  w.indent();
  w.line("for (int64_t row = m0; row < m1; row++)");
  w.open();
  w.line("const float* acc_row = acc + (row - m0) * ld;");
  // The output row (b, row) as the epilogue's loop variables x0 .. x{last-1}.
  if (rows.size() == 1) {
    w.line("const int64_t x0 = row;");
  } else {
    w.linef("const int64_t flat_row = b * {} + row;", m_text(t));
    int64_t inner = 1;
    sym::Expr inner_expr = 1;
    for (size_t d = rows.size(); d-- > 0;) {
      std::string v =
          inner == 1 ? "flat_row" : fmt::format("flat_row / {}", extent_text(inner_expr, inner));
      w.linef("const int64_t x{} = {};", d,
              d == 0 ? v : fmt::format("({}) % {}", v, e.range_text[d]));
      inner *= rows[d];
      inner_expr = inner_expr * row_exprs[d];
    }
    for (size_t d = 0; d < rows.size(); ++d) w.linef("(void)x{};", d);
  }
  if (ep.kind == CppNestKind::Vector) {
    emit_vec_segment(p, e, ep, "n0", "n1");
  } else {
    w.linef("for (int64_t x{0} = n0; x{0} < n1; x{0}++)", last);
    w.open();
    p.emit_scalar_ops(e, nest_analyzer(e), [](int) { return true; });
    w.close();
  }
  w.close();
  w.dedent();
  w.line("});");
}

}  // namespace

std::string accumulator_access(const Nest& n) {
  return fmt::format("acc_row[x{} - n0]", n.ranges.size() - 1);
}

namespace {

// How a matmul template packs B: the element count of the packed panels (a C++ expression),
// and the packing statement with {src} and {dst} left for the caller's pointers.
struct BPacking {
  std::string elements;  // all batches of B
  std::string elements_per_batch;
  std::string statement;
  bool once = true;  // B is the same for every batch: packed once
};

BPacking b_packing(const MatmulSpec& s, const SizeNames& names = {}) {
  const bool bf16 = s.dtype == DType::BF16;
  const int64_t batches = std::max<int64_t>(product(s.batch), 1);
  // Packing splits B's panels over the threads when B is large (serial below 64K elements).
  const std::string pack_fn =
      bf16 ? "coil::gemm::pack_b_bf16_parallel" : "coil::gemm::pack_b_parallel";
  BPacking b;
  b.once = batch_invariant(s.b);
  const int64_t b_batches = b.once ? 1 : batches;
  b.elements_per_batch = fmt::format("coil::gemm::packed_b_elements{}({}, {}, blk)",
                                     bf16 ? "_bf16" : "", names(s.k), names(s.n));
  b.elements =
      b.elements_per_batch + (b_batches == 1 ? "" : fmt::format(" * {}", names(b_batches)));
  b.statement =
      b_batches == 1
          ? fmt::format("{}({}, {}, {}, {}, {}, blk, {});", pack_fn, batch_offset("{src}", s.b, {}),
                        names(s.b.row_stride), names(s.b.col_stride), names(s.k), names(s.n),
                        "{dst}")
          : fmt::format(
                "for (int64_t b = 0; b < {}; b++) {}({}, {}, {}, {}, {}, blk, {} + b * {});",
                names(b_batches), pack_fn, batch_offset("{src}", s.b, s.batch, names),
                names(s.b.row_stride), names(s.b.col_stride), names(s.k), names(s.n), "{dst}",
                b.elements_per_batch);
  return b;
}

/// The blocking of the product with `m` rows (C++); n and k as `names` prints them (a
/// size-generic module's symbols: a product over a symbolic length, e.g. attention's
/// probabilities times V over the sequence, is one module for every length).
std::string blocking_line(const MatmulSpec& s, const std::string& m, const SizeNames& names = {}) {
  return fmt::format(
      "const coil::gemm::Blocking blk = coil::gemm::choose_blocking({}, {}, {}, {});", m,
      names(s.n), names(s.k), s.dtype == DType::BF16 ? 2 : 4);
}

}  // namespace

/// Whether the template reads A packed at load time: an f32 constant, the same for every
/// batch, with as many rows at every size (a size-generic module's m is not a symbol).
bool packs_a_at_load(const IrProgram& p, const ComputedBuffer& t) {
  const MatmulSpec& s = *t.matmul;
  return s.dtype == DType::F32 && p.buffer(s.a.buffer).kind == BufferKind::Constant &&
         batch_invariant(s.a) && m_text(t) == std::to_string(s.m);
}

std::vector<PackedOperand> load_time_packing(const IrProgram& p, const ComputedBuffer& t) {
  std::vector<PackedOperand> out;
  if (t.kind != LoopKind::Template || !t.matmul) return out;
  const MatmulSpec& s = *t.matmul;
  // Packing at load time reads no size symbol: the packed layouts depend on the blocking's
  // nc and kc, which m does not change (coil_gemm.h: choose_blocking), so a symbolic m packs
  // as m = 1 would.
  const std::string m = m_text(t);
  const bool symbolic_m = m != std::to_string(s.m);
  if (packs_a_at_load(p, t)) {
    PackedOperand po;
    po.buffer = s.a.buffer;
    po.elem_type = "float";
    po.setup = blocking_line(s, m);
    po.elements = fmt::format("coil::gemm::packed_a_elements({}, {}, blk)", s.m, s.k);
    po.pack = fmt::format("coil::gemm::pack_a_all({}, {}, {}, {}, {}, blk, {{dst}});",
                          batch_offset("{src}", s.a, {}), s.a.row_stride, s.a.col_stride, s.m, s.k);
    out.push_back(std::move(po));
  }
  if (p.buffer(s.b.buffer).kind == BufferKind::Constant) {
    BPacking b = b_packing(s);
    PackedOperand po;
    po.buffer = s.b.buffer;
    po.elem_type = elem_type(s.dtype);
    po.setup = blocking_line(s, symbolic_m ? "1" : m);
    po.elements = b.elements;
    po.pack = b.statement;
    out.push_back(std::move(po));
  }
  return out;
}

void emit_matmul_template(NestPrinter& p, const CppKernelPlan& plan) {
  CodeWriter& w = p.writer();
  const ComputedBuffer& t = *plan.lead;
  const MatmulSpec& s = *t.matmul;
  COIL_ASSERT(s.impl == MatmulImpl::Template, "emit_matmul_template on a library matmul");
  const std::string et = elem_type(s.dtype);
  const bool bf16 = s.dtype == DType::BF16;
  const int64_t batches = std::max<int64_t>(product(s.batch), 1);
  const SizeNames names(p.program(), {s.a.buffer, s.b.buffer, t.buffer}, t.ranges);
  const BPacking bp = b_packing(s, names);
  // An operand as coil::gemm reads it unpacked: a lambda giving batch b's pointer, then the
  // row and column strides.
  auto operand_reader = [&](const StridedOperand& op) {
    return fmt::format("[&](int64_t{}) {{ return {}; }}, {}, {}",
                       reads_batch(op, s.batch) ? " b" : "",
                       batch_offset(p.plan().pointer(op.buffer), op, s.batch, names),
                       names(op.row_stride), names(op.col_stride));
  };
  w.line(blocking_line(s, m_text(t), names));
  // Each operand packed at load time is plan.packed's entry for its buffer (A's and B's are
  // told apart by what load_time_packing packs: A only when packs_a_at_load).
  const bool a_packed = packs_a_at_load(p.program(), t);
  const PackedOperand *packed = nullptr, *packed_a = nullptr;
  for (const PackedOperand& po : plan.packed) {
    if (a_packed && po.buffer == s.a.buffer && !packed_a) {
      packed_a = &po;
      continue;
    }
    if (po.buffer == s.b.buffer) packed = &po;
  }
  COIL_ASSERT(!a_packed || packed_a, "matmul template: A packed at load time has no slot");
  if (packed_a) {
    w.linef("const float* packed_a = {};  // A packed at load time (coil_graph_pack)",
            packed_a->param);
  }
  if (!packed && !bf16) {
    // B changes every call (an activation): packed inside the call by the threads that read
    // it, each its own column panels (coil_gemm.h: matmul_raw_b).
    w.line("coil::gemm::matmul_raw_b(");
    w.indent();
    w.linef("{}, {}, {}, {},", names(batches), m_text(t), names(s.n), names(s.k));
    if (packed_a) {
      w.line("packed_a, [&](int64_t) { return static_cast<const float*>(nullptr); }, 0, 0,");
    } else {
      w.linef("nullptr, {},", operand_reader(s.a));
    }
    w.linef("{}, blk,", operand_reader(s.b));
    emit_epilogue_lambda(p, t, *plan.epilogue, plan.epilogue_plan);
    w.dedent();
    return;
  }
  if (packed) {
    w.linef("const {}* packed_b = {};  // packed at load time (coil_graph_pack)", et,
            packed->param);
  } else {
    // Packed per call into the calling thread's buffer, shared by the module's kernels.
    w.linef("{0}* packed_b = static_cast<{0}*>(coil::gemm::packed_b_scratch(", et);
    w.linef("    static_cast<int64_t>(sizeof({})) * ({})));", et, bp.elements);
    w.line(subst(subst(bp.statement, "{src}", p.plan().pointer(s.b.buffer)), "{dst}", "packed_b"));
  }
  w.linef("coil::gemm::{}(", packed_a ? "matmul_packed_a" : bf16 ? "matmul_bf16" : "matmul");
  w.indent();
  w.linef("{}, {}, {}, {},", names(batches), m_text(t), names(s.n), names(s.k));
  if (packed_a) {
    w.line("packed_a,");
  } else {
    w.linef("{},", operand_reader(s.a));
  }
  if (bp.once) {
    w.linef("[&](int64_t) {{ return packed_b; }}, blk,");
  } else {
    w.linef("[&](int64_t b) {{ return packed_b + b * {}; }}, blk,", bp.elements_per_batch);
  }
  emit_epilogue_lambda(p, t, *plan.epilogue, plan.epilogue_plan);
  w.dedent();
}

std::string matmul_shape_text(const IrProgram& p, const ComputedBuffer& t) {
  const MatmulSpec& s = *t.matmul;
  const SizeNames names(p, {s.a.buffer, s.b.buffer, t.buffer}, t.ranges);
  std::vector<std::string> batch;
  for (int64_t b : s.batch) batch.push_back(names(b));
  return fmt::format("{} [{}, {}] x [{}, {}]",
                     batch.empty() ? "" : fmt::format(" batch [{}]", fmt::join(batch, ", ")),
                     m_text(t), names(s.k), names(s.k), names(s.n));
}

void emit_library_matmul(NestPrinter& p, const ComputedBuffer& t) {
  CodeWriter& w = p.writer();
  const MatmulSpec& s = *t.matmul;
  const int64_t batches = std::max<int64_t>(product(s.batch), 1);
  auto la = s.a.blas_layout(s.m, s.k), lb = s.b.blas_layout(s.k, s.n);
  COIL_ASSERT(la && lb, "a library matmul needs operands with a unit stride");
  const SizeNames names(p.program(), {s.a.buffer, s.b.buffer, t.buffer}, t.ranges);
  const char* fn =
      s.impl == MatmulImpl::Dnnl ? "coil::ext::sgemm_dnnl" : "coil::ext::sgemm_openblas";
  w.linef("for (int64_t b = 0; b < {}; b++)", names(batches));
  w.open();
  w.linef("{}({}, {}, {}, {}, {}, {}, {}, {}, {}, {} + b * {}, {});", fn, m_text(t), names(s.n),
          names(s.k), batch_offset(p.plan().pointer(s.a.buffer), s.a, s.batch, names),
          names(la->ld), la->transposed,
          batch_offset(p.plan().pointer(s.b.buffer), s.b, s.batch, names), names(lb->ld),
          lb->transposed, p.plan().pointer(t.buffer), names(s.m * s.n), names(s.n));
  w.close();
}

void emit_extern_attention(NestPrinter& p, const ComputedBuffer& t, int second_buffer) {
  CodeWriter& w = p.writer();
  const AttentionSpec& a = *t.attention;
  const char* mask_kind = "none";
  std::string mask = "static_cast<const float*>(nullptr)";
  if (a.mask >= 0) {
    mask_kind = a.bool_mask ? "boolean" : "additive";
    mask = p.plan().pointer(a.mask);
  }
  const SizeNames n(p.program(), {a.q, a.k, a.v, a.mask, a.out, a.grad_out, a.lse, t.buffer});
  auto strides = [&](const std::array<int64_t, 3>& s) {
    return fmt::format("{{{}, {}, {}}}", n(s[0]), n(s[1]), n(s[2]));
  };
  w.linef(
      "const coil::attention::Params params{{{}, {}, {}, {}, {}, {}, {}, {}, {}, "
      "coil::attention::MaskKind::{}, {{{}, {}, {}, {}}}, {}, {}, {}}};",
      n(a.batch), n(a.heads), n(a.kv_heads), n(a.q_len), n(a.kv_len), n(a.head_dim), n(a.value_dim),
      cpp_literal(a.scale, 0, DType::F32), a.causal ? "true" : "false", mask_kind,
      n(a.mask_strides[0]), n(a.mask_strides[1]), n(a.mask_strides[2]), n(a.mask_strides[3]),
      strides(a.q_strides), strides(a.k_strides), strides(a.v_strides));
  // Views are read in place from their element 0.
  auto at = [&](int buffer, int64_t offset) {
    return offset == 0 ? p.plan().pointer(buffer)
                       : fmt::format("{} + {}", p.plan().pointer(buffer), n(offset));
  };
  const std::string q = at(a.q, a.q_offset), k = at(a.k, a.k_offset);
  const std::string y = p.plan().pointer(t.buffer);
  switch (a.kernel) {
    case AttentionKernel::forward:
      w.linef("coil::attention::forward(params, {}, {}, {}, {}, {}{});", q, k, at(a.v, a.v_offset),
              mask, y, second_buffer < 0 ? "" : ", " + p.plan().pointer(second_buffer));
      return;
    case AttentionKernel::logsumexp:
      w.linef("coil::attention::logsumexp(params, {}, {}, {}, {});", q, k, mask, y);
      return;
    case AttentionKernel::grad_q:
    case AttentionKernel::grad_k:
    case AttentionKernel::grad_v: {
      if (second_buffer >= 0) {  // grad_k with the gradient of v: one pass for both
        w.linef("coil::attention::backward_kv(params, {}, {}, {}, {}, {}, {}, {}, {}, {});", q, k,
                at(a.v, a.v_offset), p.plan().pointer(a.out), p.plan().pointer(a.grad_out),
                p.plan().pointer(a.lse), mask, y, p.plan().pointer(second_buffer));
        return;
      }
      const char* wrt = a.kernel == AttentionKernel::grad_q   ? "q"
                        : a.kernel == AttentionKernel::grad_k ? "k"
                                                              : "v";
      w.linef(
          "coil::attention::backward(params, coil::attention::Grad::{}, {}, {}, {}, {}, {}, "
          "{}, {}, {});",
          wrt, q, k, at(a.v, a.v_offset), p.plan().pointer(a.out), p.plan().pointer(a.grad_out),
          p.plan().pointer(a.lse), mask, y);
      return;
    }
  }
}

void emit_extern_index_add(NestPrinter& p, const ComputedBuffer& t) {
  CodeWriter& w = p.writer();
  const IndexAddSpec& a = *t.index_add;
  const SizeNames n(p.program(), {a.x, a.index, a.src, t.buffer});
  const std::string ty(dtype_cpp_type(a.dtype));
  const std::string outer = n(a.outer), rows = n(a.n), k = n(a.k), inner = n(a.inner);
  // Each thread owns a range of the result's rows: it writes them from x (or the fill), then
  // scans the whole index and adds the src rows that land in its range, in index order. So
  // every element sums in the same order at any thread count (deterministic, torch's CPU
  // order), each thread writes contiguous rows, and no two threads touch one element. Rows
  // of a few elements do not pay every thread's scan of the index: one thread.
  w.linef("#pragma omp parallel if ({0} >= 8 && {1} * ({2} + {3}) * {0} > 32768)", inner, outer,
          rows, k);
  w.open();
  w.line("const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();");
  w.linef("const int64_t lo = {0} * me / threads, hi = {0} * (me + 1) / threads;", rows);
  w.linef("for (int64_t o = 0; o < {}; o++)", outer);
  w.open();
  w.linef("{}* __restrict__ y = {} + o * {} * {};", ty, p.plan().pointer(t.buffer), rows, inner);
  if (a.x >= 0) {
    w.linef("const {}* __restrict__ x = {} + o * {} * {};", ty, p.plan().pointer(a.x), rows, inner);
    w.linef("for (int64_t e = lo * {0}; e < hi * {0}; e++) y[e] = x[e];", inner);
  } else {
    w.linef("for (int64_t e = lo * {0}; e < hi * {0}; e++) y[e] = static_cast<{1}>({2});", inner,
            ty, cpp_literal(a.fill, static_cast<int64_t>(a.fill), DType::F64));
  }
  w.linef("for (int64_t j = 0; j < {}; j++)", k);
  w.open();
  w.linef("const int64_t at = static_cast<int64_t>({}[j]);", p.plan().pointer(a.index));
  w.linef("const int64_t row = at < 0 ? at + {} : at;  // negative indices count from the end",
          rows);
  w.linef("if (__builtin_expect(row < 0 || row >= {}, 0))", rows);
  w.open();
  w.linef("if (me == 0) coil_run_error.record({}, at, {});  // the slice is skipped", a.site, rows);
  w.line("continue;");
  w.close();
  w.line("if (row < lo || row >= hi) continue;  // another thread's row");
  w.linef("{0}* __restrict__ dst = y + row * {1};", ty, inner);
  w.linef("const {}* __restrict__ s = {} + (o * {} + j) * {};", ty, p.plan().pointer(a.src), k,
          inner);
  w.line("#pragma omp simd");
  w.linef("for (int64_t c = 0; c < {}; c++) dst[c] = static_cast<{}>(dst[c] + s[c]);", inner, ty);
  w.close();
  w.close();
  w.close();
}

void emit_extern_conv2d(NestPrinter& p, const ComputedBuffer& t) {
  CodeWriter& w = p.writer();
  const Conv2dSpec& c = *t.conv;
  if (runs_on_coil_depthwise(c)) {
    // coil's own kernel over NCHW (kernels/coil_depthwise.h): no reorders, and relu/clamp
    // folded in with NaN kept.
    const int64_t oh =
        (c.h + c.padding[0] + c.padding[2] - c.dilation[0] * (c.kh - 1) - 1) / c.stride[0] + 1;
    const int64_t ow =
        (c.wd + c.padding[1] + c.padding[3] - c.dilation[1] * (c.kw - 1) - 1) / c.stride[1] + 1;
    const std::string dw = fmt::format(
        "{{{}, {}, {}, {}, {}, {}, {{{}, {}}}, {{{}, {}}}, {{{}, {}}}, {}, {}, "
        "coil::depthwise::Activation::{}, {}, {}}}",
        SizeNames(p.program(), {c.x, t.buffer})(c.n), c.c, c.h, c.wd, c.kh, c.kw, c.stride[0],
        c.stride[1], c.padding[0], c.padding[1], c.dilation[0], c.dilation[1], oh, ow,
        activation_name(c.activation), cpp_literal(c.clamp_min, 0, DType::F32),
        cpp_literal(c.clamp_max, 0, DType::F32));
    const std::string bias = c.bias >= 0 ? p.plan().pointer(c.bias) : "nullptr";
    if (c.expand) {
      // The expand conv before it, band by band (kernels/coil_expand_depthwise.h).
      const Conv2dSpec::Expand& e = *c.expand;
      w.linef(
          "const coil::expand_depthwise::Params params{{{}, {}, coil::depthwise::Activation::{}, "
          "{}, {}}};",
          dw, e.c, activation_name(e.activation), cpp_literal(e.clamp_min, 0, DType::F32),
          cpp_literal(e.clamp_max, 0, DType::F32));
      w.linef("coil::expand_depthwise::forward(params, {}, {}, {}, {}, {}, {});",
              p.plan().pointer(c.x), p.plan().pointer(e.w),
              e.bias >= 0 ? p.plan().pointer(e.bias) : "nullptr", p.plan().pointer(c.w), bias,
              p.plan().pointer(t.buffer));
      return;
    }
    w.linef("const coil::depthwise::Params params{};", dw);
    w.linef("coil::depthwise::forward(params, {}, {}, {}, {});", p.plan().pointer(c.x),
            p.plan().pointer(c.w), bias, p.plan().pointer(t.buffer));
    return;
  }
  if (runs_on_coil_direct(c)) {
    // coil's own kernel for few input channels (kernels/coil_direct_conv.h): NCHW, no
    // reorders, the activation applied in registers with NaN kept.
    const int64_t oh =
        (c.h + c.padding[0] + c.padding[2] - c.dilation[0] * (c.kh - 1) - 1) / c.stride[0] + 1;
    const int64_t ow =
        (c.wd + c.padding[1] + c.padding[3] - c.dilation[1] * (c.kw - 1) - 1) / c.stride[1] + 1;
    w.linef(
        "const coil::direct::Params params{{{}, {}, {}, {}, {}, {}, {}, {{{}, {}}}, {{{}, {}}}, "
        "{{{}, {}}}, {}, {}, coil::direct::Activation::{}, {}, {}}};",
        SizeNames(p.program(), {c.x, t.buffer})(c.n), c.c, c.h, c.wd, c.oc, c.kh, c.kw, c.stride[0],
        c.stride[1], c.padding[0], c.padding[1], c.dilation[0], c.dilation[1], oh, ow,
        activation_name(c.activation), cpp_literal(c.clamp_min, 0, DType::F32),
        cpp_literal(c.clamp_max, 0, DType::F32));
    w.linef("coil::direct::forward(params, {}, {}, {}, {});", p.plan().pointer(c.x),
            p.plan().pointer(c.w), c.bias >= 0 ? p.plan().pointer(c.bias) : "nullptr",
            p.plan().pointer(t.buffer));
    return;
  }
  COIL_ASSERT(c.activation != Conv2dSpec::Activation::clamp,
              "conv2d: oneDNN takes no clamp post-op here (it loses NaN)");
  // Built once per call site (thread-safe static): oneDNN's primitive and, for constant
  // weights, their reordered copy.
  w.linef(
      "static coil::ext::Conv2d conv({}, {}, {}, {}, {}, {}, {}, {{{}, {}}}, {{{}, {}, {}, {}}}, "
      "{{{}, {}}}, {}, {}, coil::ext::ConvPostOp::{}, {}{});",
      c.n, c.c, c.h, c.wd, c.oc, c.kh, c.kw, c.stride[0], c.stride[1], c.padding[0], c.padding[1],
      c.padding[2], c.padding[3], c.dilation[0], c.dilation[1], c.groups,
      c.bias >= 0 ? "true" : "false", activation_name(c.activation),
      c.weights_constant ? "true" : "false",
      // channels-last x / y (keep_conv_layouts); omitted when neither, as before
      c.x_nhwc || c.y_nhwc ? fmt::format(", {}, {}", c.x_nhwc, c.y_nhwc) : "");
  w.linef("conv.run({}, {}, {}, {});", p.plan().pointer(c.x), p.plan().pointer(c.w),
          c.bias >= 0 ? p.plan().pointer(c.bias) : "nullptr", p.plan().pointer(t.buffer));
}

}  // namespace coil

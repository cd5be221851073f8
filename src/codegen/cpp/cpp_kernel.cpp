#include "codegen/cpp/cpp_kernel.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/cpp/cpp_nest.h"
#include "codegen/cpp/cpp_plan.h"
#include "codegen/cpp/cpp_printer.h"
#include "codegen/cpp/cpp_template.h"
#include "support/check.h"
#include "support/log.h"
#include "sym/size_hints.h"

namespace coil {

std::string size_symbol_name(int i) {
  return fmt::format("ks{}", i);
}

std::string extent_text(const sym::Expr& e, int64_t value) {
  if (e.is_const() || sym::hint(e) != value) return std::to_string(value);
  // Parenthesized unless a lone symbol, so that printers may use it as an operand anywhere
  // (`flat_row / (ks0*ks1)`).
  return e.kind() == sym::ExprKind::Symbol ? e.symbol_name()
                                           : "(" + cpp_index(e, sym::Analyzer()) + ")";
}

std::vector<std::string> extent_texts(const std::vector<sym::Expr>& e,
                                      const std::vector<int64_t>& values) {
  COIL_ASSERT(e.size() == values.size(), "extent_texts: {} extents, {} values", e.size(),
              values.size());
  std::vector<std::string> out;
  for (size_t i = 0; i < e.size(); ++i) out.push_back(extent_text(e[i], values[i]));
  return out;
}

int decide_parallel_depth(const std::vector<int64_t>& ranges, int64_t total_work, int threads) {
  int64_t par = 1, seq = total_work;
  int depth = 0;
  for (int64_t r : ranges) {
    if (par >= 2 * threads || par == threads) break;
    if (seq / threads < kMinChunkSize) break;
    ++depth;
    par *= r;
    seq /= std::max<int64_t>(r, 1);
  }
  return depth;
}

std::string subst(std::string s, const std::string& key, const std::string& value) {
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + value.size()))
    s.replace(p, key.size(), value);
  return s;
}

ReductionSpec reduction_spec(ReductionType t, DType value_dtype, DType result_dtype) {
  std::string vt = cpp_value_type(value_dtype), rt = cpp_value_type(result_dtype);
  switch (t) {
    case ReductionType::sum:
      return {rt, "0", "{acc} = {acc} + {v};", "{acc} = {acc} + {p};", "{acc}"};
    case ReductionType::prod:
      return {rt, "1", "{acc} = {acc} * {v};", "{acc} = {acc} * {p};", "{acc}"};
    case ReductionType::max:
    case ReductionType::min: {
      bool mx = t == ReductionType::max;
      std::string f = fmt::format("coil::{}", mx ? "maximum" : "minimum");
      return {rt, fmt::format("coil::{}<{}>()", mx ? "lowest" : "highest", rt),
              "{acc} = " + f + "({acc}, {v});", "{acc} = " + f + "({acc}, {p});", "{acc}"};
    }
    case ReductionType::argmax:
    case ReductionType::argmin: {
      std::string f = t == ReductionType::argmax ? "coil::argmax_combine" : "coil::argmin_combine";
      return {fmt::format("coil::IndexValue<{}>", vt), fmt::format("{{{}(0), -1}}", vt),
              f + "({acc}, {v}, {ridx});", f + "({acc}, {p});", "{acc}.index"};
    }
  }
  COIL_UNREACHABLE("bad reduction");
}

sym::Analyzer nest_analyzer(const Nest& n) {
  return loop_analyzer(n.ranges, n.red_ranges);
}

namespace {

class KernelPrinter final : public NestPrinter {
 public:
  KernelPrinter(const IrProgram& p, const Schedule& s, size_t k, const CppTarget& t)
      : p_(p), s_(s), g_(s.kernels[k]), index_(k), t_(t), plan_(plan_cpp_kernel(p, s, k, t)) {}

  CppKernelSource generate() {
    CppKernelSource out;
    out.args = plan_.args;
    out.packed = plan_.packed;
    out.name = kernel_name();
    if (log_enabled(LogChannel::plan)) log_write(LogChannel::plan, to_string(plan_, p_, out.name));
    for (int c : g_.computations())
      for (const auto& o : p_.computations[static_cast<size_t>(c)].origin_names)
        out.origins.push_back(o);
    std::vector<std::string> params;
    for (const auto& a : out.args) {
      params.push_back(fmt::format("{}{}* __restrict__ {}", a.is_output ? "" : "const ",
                                   dtype_cpp_type(p_.buffer(a.buffer).layout.dtype), a.name));
    }
    for (const PackedOperand& po : out.packed)
      params.push_back(fmt::format("const {}* __restrict__ {}", po.elem_type, po.param));
    // Run-time checks report into the calling run's own record (a parameter, not a module
    // global), so that threads running one module at once never see each other's failures.
    out.run_error = !p_.run_checks.empty();
    if (out.run_error) params.push_back("coil::RunError& coil_run_error");
    const ComputedBuffer& head = *plan_.lead;
    if (head.matmul) {
      const MatmulSpec& ms = *head.matmul;
      w_.linef("// {}: {} matmul{}{}", out.name,
               head.kind == LoopKind::Template ? "template" : matmul_impl_name(ms.impl),
               matmul_shape_text(p_, head),
               nests().size() > 1 ? ", epilogue fused on each tile" : "");
    } else if (head.conv && head.conv->expand) {
      w_.linef(
          "// {}: 1x1 expand conv and depthwise convolution, band by band "
          "(coil_expand_depthwise.h)",
          out.name);
    } else if (head.conv && runs_on_coil_depthwise(*head.conv)) {
      w_.linef("// {}: depthwise convolution (coil_depthwise.h)", out.name);
    } else if (head.conv && runs_on_coil_direct(*head.conv)) {
      w_.linef("// {}: direct convolution, few input channels (coil_direct_conv.h)", out.name);
    } else if (head.conv) {
      w_.linef("// {}: oneDNN convolution (extern call)", out.name);
    } else if (head.attention) {
      const AttentionKernel kernel = head.attention->kernel;
      w_.linef("// {}: flash attention{} (coil_attention.h)", out.name,
               kernel == AttentionKernel::forward && g_.nests.size() == 2
                   ? " and its logsumexp, one pass"
               : kernel == AttentionKernel::forward   ? ""
               : kernel == AttentionKernel::logsumexp ? "'s logsumexp"
               : kernel == AttentionKernel::grad_q    ? ", gradient of q"
               : kernel == AttentionKernel::grad_k && g_.nests.size() == 2
                   ? ", gradients of k and v, one pass"
               : kernel == AttentionKernel::grad_k ? ", gradient of k"
                                                   : ", gradient of v");
    } else if (head.index_add) {
      w_.linef("// {}: index_add: rows of src added at rows index[j] of x, j in order", out.name);
    } else {
      w_.linef("// {}: {} loop nest(s){}", out.name, nests().size(),
               g_.nests.size() > 1 ? fmt::format(" sharing {} outer loop(s)", g_.outer_depth) : "");
    }
    w_.linef("// graph nodes: {}", fmt::join(out.origins, ", "));
    out.signature = fmt::format("extern \"C\" void {}({})", out.name, fmt::join(params, ", "));
    w_.line(out.signature);
    w_.open();
    emit_widened_inputs();
    const CppNestKind kind = plan_.nest_plans[0].kind;
    if (kind == CppNestKind::SplitReduction || kind == CppNestKind::RowSplit ||
        kind == CppNestKind::Tile2D)
      w_.linef("// {}", nest_label(nests()[0], plan_.nest_plans[0], 0));
    switch (kind) {
      case CppNestKind::MatmulTemplate:
        emit_matmul_template(*this, plan_);
        break;
      case CppNestKind::ExternConv:
        emit_extern_conv2d(*this, head);
        break;
      case CppNestKind::ExternAttention:
        // nests[1], when there is one, is the forward's logsumexp or the gradient of v beside
        // that of k (sched/fusion.h attention_calls_share_a_pass).
        emit_extern_attention(
            *this, head,
            g_.nests.size() == 2
                ? p_.computations[static_cast<size_t>(g_.nests[1].computations[0])].buffer
                : -1);
        break;
      case CppNestKind::ExternIndexAdd:
        emit_extern_index_add(*this, head);
        break;
      case CppNestKind::LibraryMatmul:
        emit_library_matmul(*this, head);
        break;
      case CppNestKind::SplitReduction:
        emit_split_reduction(nests()[0], plan_.nest_plans[0]);
        break;
      case CppNestKind::RowSplit:
        emit_row_split_reduction(*this, nests()[0], plan_.nest_plans[0]);
        break;
      case CppNestKind::Tile2D:
        emit_tile2d_nest(*this, nests()[0], plan_.nest_plans[0]);
        break;
      case CppNestKind::Scalar:
      case CppNestKind::Vector:
        emit_fused();
        break;
    }
    if (plan_.stream_fence) w_.line("coil::stream_fence();");
    w_.close();
    out.code = w_.str();
    if (t_.size_symbols > 0) add_size_params(out);
    return out;
  }

  /// The size symbols that the printed kernel reads become its last parameters. Found in the
  /// text, so that every printer may print a symbolic size without telling anyone: whatever
  /// the code names is passed.
  void add_size_params(CppKernelSource& out) const {
    const size_t body = out.code.find(out.signature) + out.signature.size();
    for (int i = 0; i < t_.size_symbols; ++i) {
      const std::string name = size_symbol_name(i);
      for (size_t at = out.code.find(name, body); at != std::string::npos;
           at = out.code.find(name, at + 1)) {
        auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        const size_t end = at + name.size();
        if ((at > 0 && ident(out.code[at - 1])) || (end < out.code.size() && ident(out.code[end])))
          continue;
        out.size_params.push_back(name);
        break;
      }
    }
    if (out.size_params.empty()) return;
    std::string sig = out.signature.substr(0, out.signature.size() - 1);
    for (const std::string& p : out.size_params)
      sig += fmt::format("{}const int64_t {}", sig.back() == '(' ? "" : ", ", p);
    sig += ")";
    out.code.replace(out.code.find(out.signature), out.signature.size(), sig);
    out.signature = sig;
    // Each parallel region takes its own copies of the sizes. Shared, they are read from the
    // outlined region's argument block, which GCC reloads after every store through an output
    // pointer (it cannot tell that the store leaves the block alone): f of the CPU suite
    // (x.t() + y, 4096 x 4096) reloaded ks0 after each row's streaming store and ran 5-8%
    // slower than its specialized twin at one thread; with copies, 1-3%
    // (docs/dynamic-shapes.md).
    const std::string copies = fmt::format(" firstprivate({})", fmt::join(out.size_params, ", "));
    for (size_t at = out.code.find("#pragma omp parallel"); at != std::string::npos;
         at = out.code.find("#pragma omp parallel", at + 1))
      out.code.insert(out.code.find('\n', at), copies);
  }

 private:
  const std::vector<Nest>& nests() const { return plan_.nests; }

  std::string kernel_name() const {
    std::vector<Origin> origins;
    for (int c : g_.computations()) {
      const std::vector<Origin>& o = p_.computations[static_cast<size_t>(c)].origins;
      origins.insert(origins.end(), o.begin(), o.end());
    }
    LoopKind kind = p_.computations[static_cast<size_t>(g_.nests[0].computations[0])].kind;
    const char* prefix = kind == LoopKind::Template ? "cpp_template"
                         : kind == LoopKind::Extern ? "cpp_extern"
                                                    : "cpp_fused";
    return fused_kernel_name(prefix, origins, static_cast<int>(index_));
  }

  // ---- emission ------------------------------------------------------------------------

  void open_loops(const char* prefix, const std::vector<std::string>& ranges, size_t first,
                  size_t last, int parallel) {
    for (size_t i = first; i < last; ++i) {
      if (i == first && parallel > 0)
        w_.line(parallel > 1 ? fmt::format("#pragma omp parallel for collapse({})", parallel)
                             : "#pragma omp parallel for");
      w_.linef("for (int64_t {0}{1} = 0; {0}{1} < {2}; {0}{1}++)", prefix, i, ranges[i]);
      w_.open();
    }
  }
  void close_loops(size_t n) {
    for (size_t i = 0; i < n; ++i) w_.close();
  }

  // ---- NestPrinter ------------------------------------------------------------------------

  CodeWriter& writer() override { return w_; }
  const IrProgram& program() const override { return p_; }
  const CppKernelPlan& plan() const override { return plan_; }
  DType storage_dtype(int b) const { return plan_.storage_dtype(p_, b); }
  std::string pointer(int b) const { return plan_.pointer(b); }
  bool store_dropped(int b) const { return plan_.dropped_stores.count(b) > 0; }
  std::string new_acc() override { return fmt::format("tmp_acc{}", acc_counter_++); }
  void emit_scalar_ops(const Nest& n, const sym::Analyzer& a,
                       const std::function<bool(int)>& pick) override {
    emit_ops(n, a, pick);
  }
  std::string tmp(const Nest& n, int i) const override {
    return fmt::format("tmp{}", n.tmp_base + i);
  }

  /// The C++ lvalue of buffer `b` at `index` in nest `n`: a local row element or a pointer.
  std::string access(const Nest& n, int b, const sym::Expr& index,
                     const sym::Analyzer& a) const override {
    if (b == kAccumulatorBuffer) return accumulator_access(n);
    auto it = plan_.local_name.find(b);
    if (it != plan_.local_name.end()) {
      // Rows are planned at the sizes being compiled (a size-generic compile's hints): the
      // row's own index is what the local array is read with.
      const Layout l = layout_at_hints(p_.buffer(b).layout);
      std::vector<sym::Expr> rng, red;
      for (int64_t r : n.ranges) rng.push_back(r);
      for (int64_t r : n.red_ranges) red.push_back(r);
      sym::Expr inner;
      bool ok = row_partitioned(sym::at_hints(index), l, g_.outer_depth, rng, red, &inner);
      // A window split's interior: `a` knows its loop on the interior only, where the folded
      // index (2*x3 - 1, no longer clamped) stays inside the row (plan_window_split).
      ok = ok || row_partitioned(sym::at_hints(index), l, g_.outer_depth, rng, a, &inner);
      COIL_ASSERT(ok, "local buffer {} accessed outside its row at {}", p_.buffer(b).name,
                  sym::to_string(index));
      return fmt::format("{}[{}]", it->second, cpp_index(inner, a));
    }
    return fmt::format("{}[{}]", pointer(b), cpp_index(index, a));
  }

  /// Prints the ops of `n` for which `pick(i)` holds, except reductions.
  template <typename Pick>
  void emit_ops(const Nest& n, const sym::Analyzer& a, Pick pick) {
    for (int i = 0; i < static_cast<int>(n.body.ops().size()); ++i) {
      if (!pick(i)) continue;
      const BodyOp& op = n.body.op(i);
      std::string ty = cpp_value_type(op.dtype);
      switch (op.op) {
        case LoopOp::reduction:
          break;
        case LoopOp::load: {
          // An indirect load's index names the variable of its indirect_index.
          sym::Expr index =
              op.args[0] >= 0
                  ? sym::substitute(op.index,
                                    {{indirect_var(), sym::make_symbol(tmp(n, op.args[0]))}})
                  : op.index;
          std::string e = access(n, op.buffer, index, a);
          if (storage_dtype(op.buffer) != op.dtype) e = fmt::format("static_cast<{}>({})", ty, e);
          w_.linef("{} {} = {};", ty, tmp(n, i), e);
          break;
        }
        case LoopOp::store: {
          if (store_dropped(op.buffer)) break;  // forwarded only
          std::string v = tmp(n, op.args[0]);
          DType storage = p_.buffer(op.buffer).layout.dtype;
          if (storage != op.dtype)
            v = fmt::format("static_cast<{}>({})", dtype_cpp_type(storage), v);
          w_.linef("{} = {};", access(n, op.buffer, op.index, a), v);
          break;
        }
        case LoopOp::index_expr: {
          std::string e = cpp_index(op.index, a);
          w_.linef("{} {} = {};", ty, tmp(n, i),
                   op.dtype == DType::I64 ? e : fmt::format("static_cast<{}>({})", ty, e));
          break;
        }
        default: {
          std::vector<std::string> args;
          std::vector<DType> dts;
          for (int k = 0; k < loop_op_arity(op.op); ++k) {
            args.push_back(tmp(n, op.args[static_cast<size_t>(k)]));
            dts.push_back(n.body.dtype_of(op.args[static_cast<size_t>(k)]));
          }
          w_.linef("{} {} = {};", ty, tmp(n, i), cpp_scalar_op(op, args, dts));
        }
      }
    }
  }

  std::string linear_reduction_index(const Nest& n, const sym::Analyzer& a) const {
    if (n.red_ranges.empty()) return "0";
    sym::Expr lin = 0;
    for (size_t i = 0; i < n.red_ranges.size(); ++i)
      lin = lin * n.red_ranges[i] + reduction_var(static_cast<int>(i));
    return cpp_index(a.simplify(lin), a);
  }

  std::string fill(const std::string& pattern, const std::string& acc, const Nest& n, int red,
                   const sym::Analyzer& a, const std::string& partial = "") {
    std::string s = subst(pattern, "{acc}", acc);
    s = subst(s, "{v}", tmp(n, n.body.op(red).args[0]));
    s = subst(s, "{p}", partial);
    return subst(s, "{ridx}", linear_reduction_index(n, a));
  }

  ReductionSpec spec_of(const Nest& n, int red) const {
    const BodyOp& rop = n.body.op(red);
    return reduction_spec(rop.reduction, n.body.dtype_of(rop.args[0]), rop.dtype);
  }

  /// One nest inside the shared outer loops: its own inner loops, accumulators, body.
  void emit_nest(const Nest& n, const CppNestPlan& np) {
    if (np.kind == CppNestKind::Vector) {
      emit_vec_nest(*this, n, np);
      return;
    }
    const size_t depth = np.first_loop;
    sym::Analyzer a = nest_analyzer(n);
    open_loops("x", n.range_text, depth, n.ranges.size(), 0);
    std::vector<std::string> accs;
    for (int red : n.reductions) {
      accs.push_back(new_acc());
      w_.linef("{} {} = {};", spec_of(n, red).acc_type, accs.back(), spec_of(n, red).init);
    }
    if (!n.reductions.empty()) open_loops("r", n.red_range_text, 0, n.red_ranges.size(), 0);
    emit_ops(n, a, [&](int i) { return !n.after[static_cast<size_t>(i)]; });
    for (size_t k = 0; k < n.reductions.size(); ++k)
      w_.line(fill(spec_of(n, n.reductions[k]).combine, accs[k], n, n.reductions[k], a));
    if (!n.reductions.empty()) close_loops(n.red_ranges.size());
    for (size_t k = 0; k < n.reductions.size(); ++k) {
      int red = n.reductions[k];
      w_.linef("{} {} = {};", cpp_value_type(n.body.op(red).dtype), tmp(n, red),
               subst(spec_of(n, red).finalize, "{acc}", accs[k]));
    }
    emit_ops(n, a, [&](int i) { return n.after[static_cast<size_t>(i)]; });
    close_loops(n.ranges.size() - depth);
  }

  void emit_fused() {
    std::vector<std::string> outer(
        nests()[0].range_text.begin(),
        nests()[0].range_text.begin() + static_cast<int64_t>(plan_.shared_loops));
    const int par = plan_.parallel_depth;
    auto declare_locals = [&](bool heap) {
      for (const CppLocalBuffer& l : plan_.locals) {
        std::string ty(dtype_cpp_type(l.dtype));
        if (heap) {
          w_.linef("coil::ScratchArray<{0}> {1}_storage({2});", ty, l.name, l.elements_text);
          w_.linef("{}* {} = {}_storage.get();", ty, l.name, l.name);
        } else {
          w_.linef("{} {}[{}];", ty, l.name, l.elements_text);
        }
      }
    };
    if (plan_.heap_locals) {
      // Per-thread row buffers, allocated once per thread, not per row.
      if (par > 0) {
        w_.line("#pragma omp parallel");
        w_.open();
      }
      declare_locals(true);
      if (par > 0)
        w_.line(par > 1 ? fmt::format("#pragma omp for collapse({})", par) : "#pragma omp for");
      open_loops("x", outer, 0, outer.size(), 0);
    } else {
      open_loops("x", outer, 0, outer.size(), par);
      declare_locals(false);
    }
    for (size_t i = 0; i < nests().size(); ++i) {
      w_.linef("// {}", nest_label(nests()[i], plan_.nest_plans[i], i));
      emit_nest(nests()[i], plan_.nest_plans[i]);
    }
    close_loops(outer.size());
    if (plan_.heap_locals && par > 0) w_.close();
  }

  /// Small 16-bit inputs that every row reads, converted to f32 once per call (cpp_plan.cpp:
  /// kWidenMinReuse).
  void emit_widened_inputs() {
    for (const CppWidenedInput& wi : plan_.widened) {
      w_.linef("// {} ({}[{}], read {}x per element): widened to f32 once per call", wi.arg,
               dtype_name(wi.dtype), wi.elements, wi.reads_per_element);
      w_.linef("alignas(64) float {}[{}];", wi.name, wi.elements);
      w_.linef("coil::widen({}, {}, {});", wi.arg, wi.name, wi.elements);
    }
  }

  // ---- a lone reduction with too few outputs: fixed chunks of its outermost r loop --------

  void emit_split_reduction(const Nest& n, const CppNestPlan& np) {
    sym::Analyzer a = nest_analyzer(n);
    const int64_t r0 = n.red_ranges[0], chunk = np.split.chunk, chunks = np.split.chunks;
    open_loops("x", n.range_text, 0, n.ranges.size(), 0);
    std::vector<std::string> accs;
    for (int red : n.reductions) {
      accs.push_back(new_acc());
      const ReductionSpec sp = spec_of(n, red);
      w_.linef("{} {} = {};", sp.acc_type, accs.back(), sp.init);
      w_.linef("{} {}_part[{}];", sp.acc_type, accs.back(), chunks);
    }
    // The partials and their combine order depend only on the sizes, so the result is the
    // same for any thread count.
    w_.line("#pragma omp parallel for");
    w_.linef("for (int64_t c = 0; c < {}; c++)", chunks);
    w_.open();
    auto cascade = [&](size_t k) { return np.split.cascade[k]; };
    for (size_t k = 0; k < accs.size(); ++k) {
      if (cascade(k)) {
        w_.linef("coil::CascadeSum<{}> {}_local;", spec_of(n, n.reductions[k]).acc_type, accs[k]);
      } else {
        w_.linef("{} {}_local = {};", spec_of(n, n.reductions[k]).acc_type, accs[k],
                 spec_of(n, n.reductions[k]).init);
      }
    }
    w_.linef("for (int64_t r0 = c * {0}; r0 < std::min<int64_t>(c * {0} + {0}, {1}); r0++)", chunk,
             r0);
    w_.open();
    open_loops("r", n.red_range_text, 1, n.red_ranges.size(), 0);
    emit_ops(n, a, [&](int i) { return !n.after[static_cast<size_t>(i)]; });
    for (size_t k = 0; k < accs.size(); ++k) {
      if (cascade(k)) {
        w_.linef("{}_local.add({});", accs[k], tmp(n, n.body.op(n.reductions[k]).args[0]));
      } else {
        w_.line(
            fill(spec_of(n, n.reductions[k]).combine, accs[k] + "_local", n, n.reductions[k], a));
      }
    }
    close_loops(n.red_ranges.size() - 1);
    w_.close();
    for (size_t k = 0; k < accs.size(); ++k) {
      if (cascade(k)) {
        w_.linef("{0}_part[c] = {0}_local.result();", accs[k]);
      } else {
        w_.linef("{0}_part[c] = {0}_local;", accs[k]);
      }
    }
    w_.close();
    // Cascaded sums combine their partials pairwise (a fixed tree), the others in chunk order.
    for (size_t k = 0; k < accs.size(); ++k) {
      if (!cascade(k)) continue;
      w_.linef("for (int64_t width = 1; width < {}; width *= 2)", chunks);
      w_.open();
      w_.linef(
          "for (int64_t c = 0; c + width < {0}; c += 2 * width) {1}_part[c] = {1}_part[c] + "
          "{1}_part[c + width];",
          chunks, accs[k]);
      w_.close();
      w_.linef("{0} = {0}_part[0];", accs[k]);
    }
    w_.linef("for (int64_t c = 0; c < {}; c++)", chunks);
    w_.open();
    for (size_t k = 0; k < accs.size(); ++k) {
      if (cascade(k)) continue;
      w_.line(fill(spec_of(n, n.reductions[k]).combine_partial, accs[k], n, n.reductions[k], a,
                   accs[k] + "_part[c]"));
    }
    w_.close();
    for (size_t k = 0; k < n.reductions.size(); ++k) {
      int red = n.reductions[k];
      w_.linef("{} {} = {};", cpp_value_type(n.body.op(red).dtype), tmp(n, red),
               subst(spec_of(n, red).finalize, "{acc}", accs[k]));
    }
    emit_ops(n, a, [&](int i) { return n.after[static_cast<size_t>(i)]; });
    close_loops(n.ranges.size());
  }

  const IrProgram& p_;
  const Schedule& s_;
  const KernelGroup& g_;
  size_t index_;
  const CppTarget& t_;
  CppKernelPlan plan_;
  int acc_counter_ = 0;
  CodeWriter w_;
};

}  // namespace

CppKernelSource generate_cpp_kernel(const IrProgram& program, const Schedule& schedule, size_t k,
                                    const CppTarget& target) {
  return KernelPrinter(program, schedule, k, target).generate();
}

}  // namespace coil

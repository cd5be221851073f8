#include "codegen/cpp/cpp_kernel.h"

#include <algorithm>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/cpp/cpp_nest.h"
#include "codegen/cpp/cpp_printer.h"
#include "codegen/cpp/cpp_template.h"
#include "support/check.h"

namespace coil {

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

std::vector<int64_t> static_ranges(const std::vector<sym::Expr>& ranges) {
  std::vector<int64_t> out;
  for (const auto& r : ranges) {
    auto c = r.as_const();
    COIL_ASSERT(c.has_value(), "loop range {} is not static", sym::to_string(r));
    out.push_back(*c);
  }
  return out;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
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
  sym::Analyzer a;
  for (size_t i = 0; i < n.ranges.size(); ++i)
    a.bind_loop_var(loop_var(static_cast<int>(i)), n.ranges[i]);
  for (size_t i = 0; i < n.red_ranges.size(); ++i)
    a.bind_loop_var(reduction_var(static_cast<int>(i)), n.red_ranges[i]);
  return a;
}

namespace {

class KernelPrinter final : public NestPrinter {
 public:
  KernelPrinter(const IrProgram& p, const Schedule& s, size_t k, const CppTarget& t)
      : p_(p), s_(s), g_(s.kernels[k]), index_(k), target_(t) {}

  CppKernelSource generate() {
    CppKernelSource out;
    build_nests();
    assign_args(out);
    out.name = kernel_name();
    for (int c : g_.computations())
      for (const auto& o : p_.computations[static_cast<size_t>(c)].origin_names)
        out.origins.push_back(o);
    std::vector<std::string> params;
    for (const auto& a : out.args) {
      params.push_back(fmt::format("{}{}* __restrict__ {}", a.is_output ? "" : "const ",
                                   dtype_cpp_type(p_.buffer(a.buffer).layout.dtype), a.name));
    }
    const ComputedBuffer& lead = p_.computations[static_cast<size_t>(g_.nests[0].computations[0])];
    if (std::optional<PackedOperand> po = load_time_packing(*this, lead)) {
      po->param = fmt::format("packed_ptr{}", out.packed.size());
      params.push_back(fmt::format("const {}* __restrict__ {}", po->elem_type, po->param));
      out.packed.push_back(std::move(*po));
    }
    const ComputedBuffer& head = p_.computations[static_cast<size_t>(g_.nests[0].computations[0])];
    if (head.matmul) {
      const MatmulSpec& ms = *head.matmul;
      w_.linef("// {}: {} matmul{} [{}, {}] x [{}, {}]{}", out.name,
               head.kind == LoopKind::Template ? "template" : matmul_impl_name(ms.impl),
               ms.batch.empty() ? "" : fmt::format(" batch [{}]", fmt::join(ms.batch, ", ")), ms.m,
               ms.k, ms.k, ms.n, nests_.size() > 1 ? ", epilogue fused on each tile" : "");
    } else if (head.conv) {
      w_.linef("// {}: oneDNN convolution (extern call)", out.name);
    } else {
      w_.linef("// {}: {} loop nest(s){}", out.name, nests_.size(),
               g_.nests.size() > 1 ? fmt::format(" sharing {} outer loop(s)", g_.outer_depth) : "");
    }
    w_.linef("// graph nodes: {}", fmt::join(out.origins, ", "));
    w_.linef("extern \"C\" void {}({})", out.name, fmt::join(params, ", "));
    w_.open();
    const ComputedBuffer& first = p_.computations[static_cast<size_t>(g_.nests[0].computations[0])];
    if (!first.is_opaque()) widen_reread_inputs(out);
    if (first.kind == LoopKind::Template) {
      emit_matmul_template(*this, first, nests_.size() > 1 ? &nests_[1] : nullptr,
                           is_local(first.buffer), out);
    } else if (first.kind == LoopKind::Extern && first.conv) {
      emit_extern_conv2d(*this, first);
    } else if (first.kind == LoopKind::Extern) {
      emit_library_matmul(*this, first);
    } else if (nests_.size() == 1 && split_reduction(nests_[0])) {
      emit_split_reduction(nests_[0]);
    } else if (nests_.size() == 1 && g_.local_buffers.empty() &&
               emit_row_split_reduction(*this, nests_[0])) {
      // printed
    } else if (nests_.size() == 1 && g_.local_buffers.empty() &&
               emit_tile2d_nest(*this, nests_[0],
                                decide_parallel_depth(nests_[0].ranges, product(nests_[0].ranges),
                                                      kParallelThreadsHint) > 0)) {
      // printed
    } else {
      emit_fused();
    }
    bool streams = false;
    for (const Nest& n : nests_) streams = streams || nest_streams(*this, n);
    if (streams && lanes() >= 2) w_.line("coil::stream_fence();");
    w_.close();
    out.code = w_.str();
    return out;
  }

 private:
  // ---- structure -----------------------------------------------------------------------

  /// A template or extern kernel: its first nest is not a loop nest (cpp_template.h), and its
  /// epilogue reads the product from the accumulator tile, not from a local row array.
  bool opaque_kernel() const {
    return p_.computations[static_cast<size_t>(g_.nests[0].computations[0])].is_opaque();
  }

  void build_nests() {
    std::set<int> local(g_.local_buffers.begin(), g_.local_buffers.end());
    int tmp_base = 0;
    for (const LoopNest& ln : g_.nests) {
      Nest n;
      // The nest's loops: a reduction's when a pointwise prologue was merged into it.
      const ComputedBuffer& first = p_.computations[static_cast<size_t>(ln.computations.back())];
      n.ranges = static_ranges(first.ranges);
      n.red_ranges = static_ranges(first.reduction_ranges);
      // Merge bodies; a load of a value stored earlier in this body at the same index is
      // forwarded; a store of a local buffer that nothing else reads is dropped later.
      std::map<std::pair<int, const void*>, int> stored;
      for (int c : ln.computations) {
        auto re = ln.reindex.find(c);
        LoopBody renamed;
        if (re != ln.reindex.end())
          renamed = p_.computations[static_cast<size_t>(c)].body.substituted(re->second);
        const LoopBody& b =
            re != ln.reindex.end() ? renamed : p_.computations[static_cast<size_t>(c)].body;
        std::vector<int> remap;
        for (BodyOp op : b.ops()) {
          for (int& a : op.args)
            if (a >= 0) a = remap[static_cast<size_t>(a)];
          if (op.op == LoopOp::load) {
            auto it = stored.find({op.buffer, op.index.get()});
            if (it != stored.end()) {
              // What the load would read back: the value converted to the buffer's dtype.
              remap.push_back(n.body.stored_value(it->second, p_.buffer(op.buffer).layout.dtype));
              continue;
            }
          }
          if (op.op == LoopOp::store) stored[{op.buffer, op.index.get()}] = op.args[0];
          remap.push_back(n.body.append(std::move(op)));
        }
      }
      n.after.assign(n.body.ops().size(), false);
      for (size_t i = 0; i < n.body.ops().size(); ++i) {
        const BodyOp& op = n.body.op(static_cast<int>(i));
        if (op.op == LoopOp::reduction) n.reductions.push_back(static_cast<int>(i));
        for (int a : op.args)
          if (a >= 0 && (n.after[static_cast<size_t>(a)] || n.body.op(a).op == LoopOp::reduction))
            n.after[i] = true;
      }
      n.tmp_base = tmp_base;
      tmp_base += static_cast<int>(n.body.ops().size());
      for (const BodyOp& op : n.body.ops())
        if (op.op == LoopOp::load && local.count(op.buffer) && !opaque_kernel())
          needs_array_.insert(op.buffer);
      nests_.push_back(std::move(n));
    }
  }

  void assign_args(CppKernelSource& out) {
    std::set<int> written, local(g_.local_buffers.begin(), g_.local_buffers.end());
    for (int c : g_.computations()) written.insert(p_.computations[static_cast<size_t>(c)].buffer);
    int n_in = 0, n_out = 0;
    for (const Nest& n : nests_) {
      for (const BodyOp& op : n.body.ops()) {
        if (op.op != LoopOp::load || written.count(op.buffer) || arg_name_.count(op.buffer))
          continue;
        arg_name_[op.buffer] = fmt::format("in_ptr{}", n_in++);
        out.args.push_back({op.buffer, false, arg_name_[op.buffer]});
      }
    }
    for (int c : g_.computations()) {
      int b = p_.computations[static_cast<size_t>(c)].buffer;
      if (local.count(b)) {
        if (needs_array_.count(b)) local_name_[b] = p_.buffer(b).name + "_local";
        continue;
      }
      arg_name_[b] = fmt::format("out_ptr{}", n_out++);
      out.args.push_back({b, true, arg_name_[b]});
    }
  }

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

  int64_t local_row_elements(int b) const {
    const Layout& l = p_.buffer(b).layout;
    auto row = g_.outer_depth == 0 ? l.numel() : l.strides[static_cast<size_t>(g_.outer_depth - 1)];
    return row.as_const().value();
  }

  // ---- emission ------------------------------------------------------------------------

  void open_loops(const char* prefix, const std::vector<int64_t>& ranges, size_t first, size_t last,
                  int parallel) {
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
  int lanes() const override { return target_.vec_lanes; }
  DType storage_dtype(int b) const override {
    return b == kAccumulatorBuffer || widened_.count(b) ? DType::F32 : p_.buffer(b).layout.dtype;
  }
  std::string pointer(int b) const override {
    auto w = widened_.find(b);
    return w != widened_.end() ? w->second : arg_name_.at(b);
  }
  const Buffer& buffer_info(int b) const override { return p_.buffer(b); }
  bool is_local(int b) const {
    return std::find(g_.local_buffers.begin(), g_.local_buffers.end(), b) != g_.local_buffers.end();
  }
  bool store_dropped(int b) const override {
    return std::find(g_.local_buffers.begin(), g_.local_buffers.end(), b) !=
               g_.local_buffers.end() &&
           !local_name_.count(b);
  }
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
    auto it = local_name_.find(b);
    if (it != local_name_.end()) {
      const Layout& l = p_.buffer(b).layout;
      std::vector<sym::Expr> rng, red;
      for (int64_t r : n.ranges) rng.push_back(r);
      for (int64_t r : n.red_ranges) red.push_back(r);
      sym::Expr inner;
      bool ok = row_partitioned(index, l, g_.outer_depth, rng, red, &inner);
      COIL_ASSERT(ok, "local buffer {} accessed outside its row at {}", p_.buffer(b).name,
                  sym::to_string(index));
      return fmt::format("{}[{}]", it->second, cpp_index(inner, a));
    }
    return fmt::format("{}[{}]", pointer(b), cpp_index(index, a));
  }

  /// Prints the ops of `n` for which `pick(i)` holds, except reductions.
  template <typename Pick>
  void emit_ops(const Nest& n, const sym::Analyzer& a, Pick pick) {
    std::set<int> local(g_.local_buffers.begin(), g_.local_buffers.end());
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
          if (local.count(op.buffer) && !local_name_.count(op.buffer)) break;  // forwarded only
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
  void emit_nest(const Nest& n, size_t depth, bool parallel_vec_loop) {
    if (choose_vec_loop(n, depth, target_.vec_lanes)) {
      emit_vec_nest(*this, n, depth, parallel_vec_loop);
      return;
    }
    sym::Analyzer a = nest_analyzer(n);
    open_loops("x", n.ranges, depth, n.ranges.size(), 0);
    std::vector<std::string> accs;
    for (int red : n.reductions) {
      accs.push_back(new_acc());
      w_.linef("{} {} = {};", spec_of(n, red).acc_type, accs.back(), spec_of(n, red).init);
    }
    if (!n.reductions.empty()) open_loops("r", n.red_ranges, 0, n.red_ranges.size(), 0);
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
    std::vector<int64_t> outer(nests_[0].ranges.begin(), nests_[0].ranges.begin() + g_.outer_depth);
    int64_t work = 0;
    for (const Nest& n : nests_)
      work += product(n.ranges) * std::max<int64_t>(product(n.red_ranges), 1);
    int par = std::min(decide_parallel_depth(outer, work, kParallelThreadsHint), g_.outer_depth);
    // A lone nest vectorized along its last outer loop opens that loop itself (stepping by the
    // vector width); when it is the only loop the rule parallelizes, it carries the pragma.
    size_t first_loop = outer.size();
    bool parallel_vec_loop = false;
    if (nests_.size() == 1 && !outer.empty()) {
      auto vl = choose_vec_loop(nests_[0], outer.size() - 1, target_.vec_lanes);
      if (vl && !vl->reduction && vl->index == outer.size() - 1) {
        first_loop = outer.size() - 1;
        parallel_vec_loop = first_loop == 0 && par > 0;
        outer.pop_back();
        par = std::min<int>(par, static_cast<int>(outer.size()));
      }
    }
    int64_t local_bytes = 0;
    for (const auto& [b, name] : local_name_)
      local_bytes += local_row_elements(b) * dtype_size(p_.buffer(b).layout.dtype);
    bool heap_locals = local_bytes > kMaxStackLocalBytes;
    auto declare_locals = [&](bool heap) {
      for (const auto& [b, name] : local_name_) {
        std::string ty(dtype_cpp_type(p_.buffer(b).layout.dtype));
        if (heap) {
          w_.linef("coil::ScratchArray<{0}> {1}_storage({2});", ty, name, local_row_elements(b));
          w_.linef("{}* {} = {}_storage.get();", ty, name, name);
        } else {
          w_.linef("{} {}[{}];", ty, name, local_row_elements(b));
        }
      }
    };
    if (heap_locals) {
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
    mark_revisited_rows();
    for (const Nest& n : nests_) emit_nest(n, first_loop, parallel_vec_loop);
    close_loops(outer.size());
    if (heap_locals && par > 0) w_.close();
  }

  // ---- prefetching the next rows ------------------------------------------------------------

  static bool calls_vector_math(const Nest& n) {
    for (const BodyOp& op : n.body.ops())
      if (is_transcendental(op.op)) return true;
    return false;
  }

  /// Marks, per buffer, the first nest that re-reads a row of it that an earlier nest of the
  /// kernel read in the same outer iteration (softmax's exp pass re-reads the row its max pass
  /// read) and that calls vector math. That pass finds the row in L1 and spends its time
  /// computing, while the first pass over each row waits on memory: the hardware prefetcher,
  /// trained on the first pass, has stopped by the time the next row starts. So the pass also
  /// prefetches the row kPrefetchAheadBytes ahead (at least the next one) at the same
  /// position (prefetch_ahead). A light re-reading pass runs at memory speed itself, and the
  /// prefetches only cost there: layer_norm over [16384, 1024] 24% slower at 1 thread.
  void mark_revisited_rows() {
    std::set<int> seen, marked;
    for (const Nest& n : nests_) {
      std::set<int> loads;
      for (const BodyOp& op : n.body.ops())
        if (op.op == LoopOp::load && op.buffer >= 0 && arg_name_.count(op.buffer))
          loads.insert(op.buffer);
      if (calls_vector_math(n))
        for (int b : loads)
          if (seen.count(b) && marked.insert(b).second) revisited_[&n].insert(b);
      seen.insert(loads.begin(), loads.end());
    }
  }

  /// Softmax over [10000, 1000] 8% faster at 1 and 2 threads on this 2-core Zen 4 with the
  /// two rows ahead that 8 KiB gives (one row ahead 5-6%, three 8%, four 6%); over [16384,
  /// 1024] 4-5%. Rows over kPrefetchMaxRowBytes are left to the hardware (they no longer fit
  /// in L1 with their neighbours).
  int64_t prefetch_ahead(const Nest& n, int b, const sym::Expr& index,
                         const sym::Analyzer& a) const override {
    auto it = revisited_.find(&n);
    if (it == revisited_.end() || !it->second.count(b) || g_.outer_depth == 0) return 0;
    auto stride = a.stride(index, loop_var(g_.outer_depth - 1));
    int64_t row = stride ? stride->as_const().value_or(0) : 0;
    int64_t row_bytes = row * dtype_size(storage_dtype(b));
    if (row <= 0 || row_bytes > kPrefetchMaxRowBytes) return 0;
    return std::max<int64_t>(1, kPrefetchAheadBytes / row_bytes) * row;
  }

  // ---- small 16-bit inputs that every row reads: widened once ------------------------------

  /// A bf16/f16 input of at most kWidenMaxElements that the kernel's loops read at least
  /// kWidenMinReuse times per element (the w and b of gelu(x * w + b) over [16384, 1024]) is
  /// converted to f32 once per call into a stack array, which the loops then read instead:
  /// bf16 gelu(x * w + b) 5.5-6% faster at 1 and 2 threads (5.00 -> 4.72 ms at 2 threads on
  /// this 2-core Zen 4), since every vector of w and b was converted again in each of the
  /// 16384 rows. The conversion is exact, so results do not change. Vectorized loop kernels
  /// only (templates and extern calls take their operands' pointers as they are).
  static constexpr int64_t kWidenMaxElements = 4096;  // 16 KiB of f32 per input
  static constexpr int64_t kWidenMaxTotal = 8192;     // 32 KiB of stack per call
  static constexpr int64_t kWidenMinReuse = 8;

  void widen_reread_inputs(const CppKernelSource& out) {
    if (lanes() < 2) return;
    int64_t total = 0;
    for (const auto& arg : out.args) {
      const Buffer& buf = p_.buffer(arg.buffer);
      DType dt = buf.layout.dtype;
      auto numel = buf.layout.numel().as_const();
      if (arg.is_output || (dt != DType::BF16 && dt != DType::F16) || !numel || *numel <= 0 ||
          *numel > kWidenMaxElements || total + *numel > kWidenMaxTotal)
        continue;
      int64_t reads = 0;
      for (const Nest& n : nests_) {
        bool loads = false;
        for (const BodyOp& op : n.body.ops())
          loads = loads || (op.op == LoopOp::load && op.buffer == arg.buffer);
        if (loads) reads += product(n.ranges) * std::max<int64_t>(product(n.red_ranges), 1);
      }
      if (reads < kWidenMinReuse * *numel) continue;
      std::string name = arg.name + "_f32";
      w_.linef("// {} ({}[{}], read {}x per element): widened to f32 once per call", arg.name,
               dtype_name(dt), *numel, reads / *numel);
      w_.linef("alignas(64) float {}[{}];", name, *numel);
      w_.linef("coil::widen({}, {}, {});", arg.name, name, *numel);
      widened_[arg.buffer] = name;
      total += *numel;
    }
  }

  // ---- a lone reduction with too few outputs: fixed chunks of its outermost r loop --------

  bool split_reduction(const Nest& n) const {
    return !n.reductions.empty() && !n.red_ranges.empty() &&
           product(n.ranges) < kParallelThreadsHint &&
           product(n.red_ranges) >= kSplitReductionMinElements;
  }

  void emit_split_reduction(const Nest& n) {
    sym::Analyzer a = nest_analyzer(n);
    int64_t r0 = n.red_ranges[0], per_r0 = product(n.red_ranges) / std::max<int64_t>(r0, 1);
    int64_t chunk =
        std::max<int64_t>(1, kSplitReductionChunkElements / std::max<int64_t>(per_r0, 1));
    int64_t chunks = (r0 + chunk - 1) / chunk;
    if (chunks > 1024) {
      chunk = (r0 + 1023) / 1024;
      chunks = (r0 + chunk - 1) / chunk;
    }
    open_loops("x", n.ranges, 0, n.ranges.size(), 0);
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
    // Float sums inside a chunk use a cascade (error grows with log n, not n).
    auto cascade = [&](size_t k) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      return rop.reduction == ReductionType::sum && is_floating(rop.dtype);
    };
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
    open_loops("r", n.red_ranges, 1, n.red_ranges.size(), 0);
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
  CppTarget target_;
  std::vector<Nest> nests_;
  std::set<int> needs_array_;              // local buffers some nest loads (not only forwarded)
  std::map<int, std::string> arg_name_;    // buffer -> in_ptrN / out_ptrN
  std::map<int, std::string> widened_;     // small 16-bit input -> its f32 copy (in_ptrN_f32)
  std::map<int, std::string> local_name_;  // local buffer -> row array name
  std::map<const Nest*, std::set<int>> revisited_;  // nest -> buffers an earlier nest loaded
  int acc_counter_ = 0;
  CodeWriter w_;
};

}  // namespace

CppKernelSource generate_cpp_kernel(const IrProgram& program, const Schedule& schedule, size_t k,
                                    const CppTarget& target) {
  return KernelPrinter(program, schedule, k, target).generate();
}

}  // namespace coil

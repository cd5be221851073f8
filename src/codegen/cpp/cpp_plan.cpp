// The CPU backend's kernel planner (cpp_plan.h): the nests of a kernel group with their merged
// bodies, the kernel's arguments and local buffers, and every printing decision.
#include "codegen/cpp/cpp_plan.h"

#include <algorithm>

#include "codegen/cpp/cpp_template.h"
#include "support/check.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

/// A bf16/f16 input of at most kWidenMaxElements that the kernel's loops read at least
/// kWidenMinReuse times per element (the w and b of gelu(x * w + b) over [16384, 1024]) is
/// converted to f32 once per call into a stack array, which the loops then read instead:
/// bf16 gelu(x * w + b) 5.5-6% faster at 1 and 2 threads (5.00 -> 4.72 ms at 2 threads on
/// this 2-core Zen 4), since every vector of w and b was converted again in each of the
/// 16384 rows. The conversion is exact, so results do not change. Vectorized loop kernels
/// only (templates and extern calls take their operands' pointers as they are).
constexpr int64_t kWidenMaxElements = 4096;  // 16 KiB of f32 per input
constexpr int64_t kWidenMaxTotal = 8192;     // 32 KiB of stack per call
constexpr int64_t kWidenMinReuse = 8;

class KernelPlanner {
 public:
  KernelPlanner(const IrProgram& p, const KernelGroup& g, const CppTarget& t) : p_(p), g_(g) {
    plan_.lanes = t.vec_lanes;
    plan_.outer_depth = g.outer_depth;
    plan_.lead = &p.computations[static_cast<size_t>(g.nests[0].computations[0])];
  }

  CppKernelPlan run() {
    build_nests();
    assign_args();
    for (PackedOperand& po : load_time_packing(p_, *plan_.lead)) {
      po.param = fmt::format("packed_ptr{}", plan_.packed.size());
      plan_.packed.push_back(std::move(po));
    }
    if (!plan_.lead->is_opaque()) widen_reread_inputs();
    plan_.nest_plans.resize(plan_.nests.size());
    for (size_t i = 0; i < plan_.nests.size(); ++i) {
      for (int c : g_.nests[i].computations)
        for (const auto& o : p_.computations[static_cast<size_t>(c)].origin_names)
          plan_.nest_plans[i].origins.push_back(o);
    }
    const ComputedBuffer& lead = *plan_.lead;
    CppNestPlan& np0 = plan_.nest_plans[0];
    const Nest& n0 = plan_.nests[0];
    const bool lone = plan_.nests.size() == 1;
    if (lead.kind == LoopKind::Template) {
      np0.kind = CppNestKind::MatmulTemplate;
      plan_epilogue();
    } else if (lead.kind == LoopKind::Extern) {
      np0.kind = lead.conv        ? CppNestKind::ExternConv
                 : lead.attention ? CppNestKind::ExternAttention
                 : lead.index_add ? CppNestKind::ExternIndexAdd
                                  : CppNestKind::LibraryMatmul;
    } else if (auto split = lone ? plan_split_reduction(n0) : std::nullopt) {
      np0.kind = CppNestKind::SplitReduction;
      np0.split = *split;
    } else if (auto rs = lone && g_.local_buffers.empty() ? plan_row_split(n0, plan_.lanes)
                                                          : std::nullopt) {
      np0.kind = CppNestKind::RowSplit;
      np0.row_split = *rs;
      np0.vec = plan_vec(n0, *choose_vec_loop(n0, 0, plan_.lanes), plan_.lanes);
    } else if (auto tile =
                   lone && g_.local_buffers.empty() ? plan_tile2d(n0, plan_.lanes) : std::nullopt) {
      np0.kind = CppNestKind::Tile2D;
      np0.tile = *tile;
      np0.vec = plan_vec(n0, *choose_vec_loop(n0, 0, plan_.lanes), plan_.lanes);
      const std::vector<int64_t> extents = parallel_extents(n0.range_text, n0.ranges);
      np0.parallel = decide_parallel_depth(extents, product(extents), kParallelThreadsHint) > 0;
    } else {
      plan_fused();
    }
    for (size_t i = 0; i < plan_.nests.size(); ++i) finish_vec(i);
    // Any store to a streamed buffer ends the kernel with a fence (where SIMD is on).
    for (const Nest& n : plan_.nests)
      for (const BodyOp& op : n.body.ops())
        if (op.op == LoopOp::store && streamed_store(op.buffer))
          plan_.stream_fence = plan_.lanes >= 2;
    return std::move(plan_);
  }

 private:
  // ---- nests, arguments, locals ----------------------------------------------------------

  void build_nests() {
    std::set<int> local(g_.local_buffers.begin(), g_.local_buffers.end());
    int tmp_base = 0;
    for (const LoopNest& ln : g_.nests) {
      Nest n;
      // The nest's loops: a reduction's when a pointwise prologue was merged into it.
      const ComputedBuffer& first = p_.computations[static_cast<size_t>(ln.computations.back())];
      n.ranges = static_extents(first.ranges);
      n.red_ranges = static_extents(first.reduction_ranges);
      n.range_text = extent_texts(first.ranges, n.ranges);
      n.red_range_text = extent_texts(first.reduction_ranges, n.red_ranges);
      n.range_expr = first.ranges;
      n.red_range_expr = first.reduction_ranges;
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
        if (op.op == LoopOp::load && local.count(op.buffer) && !plan_.lead->is_opaque())
          needs_array_.insert(op.buffer);
      plan_.nests.push_back(std::move(n));
    }
  }

  void assign_args() {
    std::set<int> written, local(g_.local_buffers.begin(), g_.local_buffers.end());
    for (int c : g_.computations()) written.insert(p_.computations[static_cast<size_t>(c)].buffer);
    int n_in = 0, n_out = 0;
    for (const Nest& n : plan_.nests) {
      for (const BodyOp& op : n.body.ops()) {
        if (op.op != LoopOp::load || written.count(op.buffer) || plan_.arg_name.count(op.buffer))
          continue;
        plan_.arg_name[op.buffer] = fmt::format("in_ptr{}", n_in++);
        plan_.args.push_back({op.buffer, false, plan_.arg_name[op.buffer]});
      }
    }
    for (int c : g_.computations()) {
      int b = p_.computations[static_cast<size_t>(c)].buffer;
      if (local.count(b)) {
        if (needs_array_.count(b)) {
          plan_.local_name[b] = p_.buffer(b).name + "_local";
        } else {
          plan_.dropped_stores.insert(b);
        }
        continue;
      }
      plan_.arg_name[b] = fmt::format("out_ptr{}", n_out++);
      plan_.args.push_back({b, true, plan_.arg_name[b]});
    }
    int64_t bytes = 0;
    bool symbolic_rows = false;
    for (const auto& [b, name] : plan_.local_name) {
      const Layout& l = p_.buffer(b).layout;
      auto row =
          g_.outer_depth == 0 ? l.numel() : l.strides[static_cast<size_t>(g_.outer_depth - 1)];
      const int64_t elements = sym::hint(row).value();
      plan_.locals.push_back({b, name, l.dtype, elements, extent_text(row, elements)});
      bytes += plan_.locals.back().elements * dtype_size(l.dtype);
      // A row whose length is a size symbol's (a size-generic module's) is allocated once per
      // thread at its run-time length: a stack array needs a constant.
      symbolic_rows = symbolic_rows || !row.is_const();
    }
    plan_.heap_locals = bytes > kMaxStackLocalBytes || symbolic_rows;
  }

  void widen_reread_inputs() {
    if (plan_.lanes < 2) return;
    int64_t total = 0;
    for (const auto& arg : plan_.args) {
      const Buffer& buf = p_.buffer(arg.buffer);
      DType dt = buf.layout.dtype;
      // Constant sizes only: a widened copy is a stack array of the input's size, and a
      // size-generic module's inputs have no size to give it.
      auto numel = buf.layout.numel().as_const();
      if (arg.is_output || (dt != DType::BF16 && dt != DType::F16) || !numel || *numel <= 0 ||
          *numel > kWidenMaxElements || total + *numel > kWidenMaxTotal)
        continue;
      int64_t reads = 0;
      sym::Expr reads_expr(0);
      for (const Nest& n : plan_.nests) {
        bool loads = false;
        for (const BodyOp& op : n.body.ops())
          loads = loads || (op.op == LoopOp::load && op.buffer == arg.buffer);
        if (!loads) continue;
        reads += product(n.ranges) * std::max<int64_t>(product(n.red_ranges), 1);
        sym::Expr red(1);
        for (const sym::Expr& e : n.red_range_expr) red = red * e;
        sym::Expr all = red.is_const() && red.const_value() == 0 ? sym::Expr(1) : red;
        for (const sym::Expr& e : n.range_expr) all = all * e;
        reads_expr = reads_expr + all;
      }
      // Whether the input is read often enough follows the sizes: a guard where they are
      // symbolic (sym::decide_at_least).
      if (!sym::decide_at_least(reads_expr, kWidenMinReuse * *numel).value_or(false)) continue;
      const sym::Expr per_element = sym::floordiv(reads_expr, sym::Expr(*numel));
      plan_.widened.push_back({arg.buffer, arg.name, arg.name + "_f32", dt, *numel, reads,
                               per_element.is_const()
                                   ? std::to_string(per_element.const_value())
                                   : fmt::format("({})", sym::to_string(per_element))});
      total += *numel;
    }
  }

  // ---- the loops of a loop kernel ----------------------------------------------------------

  /// A loop's extent as the parallel rule reads it. A symbolic extent (a size-generic
  /// module's) counts as at least kSymbolicParallelExtent, so that the rule decides alike for
  /// every size and the pragma, part of the module's text, does not split the sizes into
  /// variants; a small size then runs a parallel loop of few iterations.
  static int64_t parallel_extent(const std::string& text, int64_t value) {
    constexpr int64_t kSymbolicParallelExtent = 4096;
    return text == std::to_string(value) ? value : std::max(value, kSymbolicParallelExtent);
  }
  static std::vector<int64_t> parallel_extents(const std::vector<std::string>& text,
                                               const std::vector<int64_t>& values) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < values.size(); ++i) out.push_back(parallel_extent(text[i], values[i]));
    return out;
  }

  void plan_fused() {
    const Nest& n0 = plan_.nests[0];
    const std::vector<int64_t> all_outer = parallel_extents(n0.range_text, n0.ranges);
    std::vector<int64_t> outer(all_outer.begin(), all_outer.begin() + g_.outer_depth);
    int64_t work = 0;
    for (const Nest& n : plan_.nests)
      work += product(parallel_extents(n.range_text, n.ranges)) *
              std::max<int64_t>(product(parallel_extents(n.red_range_text, n.red_ranges)), 1);
    int par = std::min(decide_parallel_depth(outer, work, kParallelThreadsHint), g_.outer_depth);
    // A lone nest vectorized along its last outer loop opens that loop itself (stepping by the
    // vector width); when it is the only loop the rule parallelizes, it carries the pragma.
    size_t first_loop = outer.size();
    bool parallel_vec_loop = false;
    if (plan_.nests.size() == 1 && !outer.empty()) {
      const size_t last = outer.size() - 1;
      auto vl = choose_vec_loop(plan_.nests[0], last, plan_.lanes, /*scalar_ops=*/true,
                                /*masks=*/true);
      // A window split's loop is split in three, so it is never the parallel loop.
      const bool window = !vl && (last > 0 || par == 0) && window_split(plan_.nests[0], last);
      if ((vl && !vl->reduction && vl->index == last) || window) {
        first_loop = last;
        parallel_vec_loop = first_loop == 0 && par > 0;
        outer.pop_back();
        par = std::min<int>(par, static_cast<int>(outer.size()));
      }
    }
    plan_.shared_loops = outer.size();
    plan_.parallel_depth = par;
    mark_revisited_rows();
    for (size_t i = 0; i < plan_.nests.size(); ++i) {
      CppNestPlan& np = plan_.nest_plans[i];
      np.first_loop = first_loop;
      const Nest& n = plan_.nests[i];
      if (auto vl = choose_vec_loop(n, first_loop, plan_.lanes, /*scalar_ops=*/true,
                                    /*masks=*/true)) {
        np.kind = CppNestKind::Vector;
        np.parallel = parallel_vec_loop;
        np.vec = plan_vec(n, *vl, plan_.lanes);
      } else if (auto w = parallel_vec_loop ? std::nullopt : window_split(n, first_loop)) {
        np.kind = CppNestKind::Vector;
        np.vec = plan_vec(w->interior, VecLoop{false, n.ranges.size() - 1}, plan_.lanes);
        np.vec->window = std::move(w);
      }
    }
  }

  /// plan_window_split, where every local row the interior reads is read inside the row: a
  /// row is indexed relative to its outer iteration (access), and an interior index such as
  /// 2*x3 - 1, no longer clamped, is inside only on the interior (the pooling window of a
  /// BatchNorm + ReLU computed into a local plane, resnet's stem: 13.6 of 137 ms of resnet18
  /// at batch 8 on 2 threads while that nest was scalar).
  std::optional<CppWindowSplit> window_split(const Nest& n, size_t first_loop) const {
    auto w = plan_window_split(n, first_loop, plan_.lanes);
    if (!w) return std::nullopt;
    sym::Analyzer inside = window_interior_analyzer(*w);
    std::vector<sym::Expr> rng;
    for (int64_t r : n.ranges) rng.push_back(r);
    for (const BodyOp& op : w->interior.body.ops()) {
      if (op.op != LoopOp::load || !plan_.local_name.count(op.buffer)) continue;
      if (!row_partitioned(sym::at_hints(op.index), layout_at_hints(p_.buffer(op.buffer).layout),
                           g_.outer_depth, rng, inside))
        return std::nullopt;
    }
    return w;
  }

  void plan_epilogue() {
    const ComputedBuffer& t = *plan_.lead;
    plan_.product_is_local = std::find(g_.local_buffers.begin(), g_.local_buffers.end(),
                                       t.buffer) != g_.local_buffers.end();
    const bool narrowed = p_.buffer(t.buffer).layout.dtype != DType::F32;
    COIL_ASSERT(!(narrowed && plan_.product_is_local), "a narrowed product must be stored");
    const Nest* fused = plan_.nests.size() > 1 ? &plan_.nests[1] : nullptr;
    plan_.epilogue = epilogue_nest(t, t.buffer, narrowed, fused, !plan_.product_is_local,
                                   fused ? fused->tmp_base : 0);
    const Nest& e = *plan_.epilogue;
    CppNestPlan& ep = plan_.epilogue_plan;
    ep.first_loop = e.ranges.size() - 1;
    if (e.reductions.empty() && !e.ranges.empty()) {
      auto vl = choose_vec_loop(e, e.ranges.size() - 1, plan_.lanes, /*scalar_ops=*/false,
                                /*masks=*/true);
      if (vl && !vl->reduction && vl->index == e.ranges.size() - 1) {
        ep.kind = CppNestKind::Vector;
        ep.vec = plan_vec(e, *vl, plan_.lanes);
      }
    }
  }

  // ---- streaming stores, prefetching ---------------------------------------------------------

  /// Graph outputs of at least kStreamMinBytes in f32: nothing in the graph reads an output
  /// back, and past the last-level cache a plain store first reads each line
  /// (read-for-ownership). x*0.5+1 on 16M floats: 6.1 -> 3.8 ms at 1 thread, 3.5 -> 2.7 ms at 2
  /// (this 2-core Zen 4). Smaller outputs may still be in cache for the caller, where plain
  /// stores are faster.
  bool streamed_store(int buffer) const {
    if (buffer < 0) return false;
    const Buffer& b = p_.buffer(buffer);
    if (b.kind != BufferKind::Output || plan_.storage_dtype(p_, buffer) != DType::F32) return false;
    // A symbolic size is read at its hint: a size-generic module streams when the call it is
    // compiled for is large, and records the condition as a guard (sym::decide_at_least), so
    // that sizes on the other side of it get a module of their own.
    return sym::decide_at_least(b.layout.numel() * sym::Expr(4), kStreamMinBytes).value_or(false);
  }

  /// The vector plan's parts that depend on the kernel: streamed stores, a masked head where
  /// the streamed rows start off the vector alignment, prefetches.
  void finish_vec(size_t i) {
    CppNestPlan& np = plan_.nest_plans[i];
    if (!np.vec) return;
    CppVecPlan& v = *np.vec;
    // A window split's vector ops are its interior's. Its stores do not stream: the borders
    // store the same rows with plain stores.
    const Nest& n = v.window ? v.window->interior : plan_.nests[i];
    sym::Analyzer a = nest_analyzer(n);
    const sym::Expr var = var_of(v.loop);
    for (int k = 0; k < static_cast<int>(n.body.ops().size()); ++k) {
      const BodyOp& op = n.body.op(k);
      if (op.op == LoopOp::store && streamed_store(op.buffer) &&
          !plan_.dropped_stores.count(op.buffer) && !v.window)
        v.streamed.insert(k);
      if (op.op == LoopOp::load && np.kind == CppNestKind::Vector &&
          stride_along(a, op.index, var) == 1)
        if (int64_t ahead = prefetch_ahead(n, op.buffer, op.index, a)) v.prefetch[k] = ahead;
    }
    // The streamed output's rows start off the vector alignment (out[1000*x0 + x1] with 16
    // lanes): a masked head up to it, then whole vectors that all stream, then the tail
    // (softmax [10000, 1000]: 23-28% faster than streaming only the rows that happen to be
    // aligned).
    if (np.kind == CppNestKind::Vector) plan_invariants(n, v);
    if (np.kind == CppNestKind::Vector && n.reductions.empty() && !np.parallel) {
      for (int k : v.streamed) {
        sym::Expr start = a.simplify(sym::substitute(n.body.op(k).index, {{var, sym::Expr(0)}}));
        if (!a.statically_known_multiple_of(start, plan_.lanes)) v.stream_head_store = k;
        break;
      }
    }
  }

  /// Ops of a vector nest whose value is the same in every iteration of its vector loop and of
  /// the r loops (which open after the point they are printed at): constants, broadcasts of
  /// loads that depend on none of those loops (from a buffer this nest does not store), and
  /// ops over these only. GCC would often hoist them itself; printed once, they also read once.
  ///
  /// Not in a loop whose stores stream: layer_norm over [16384, 1024] ran 5-12% slower with its
  /// mean and 1/std broadcasts hoisted out of the streaming normalize loop (1 thread: 8.0 ->
  /// 9.0 ms, 2 threads: 4.2 -> 4.6 ms; the two modules A/B in one process, alternating), though
  /// that loop is then two instructions shorter; with them inside, GCC hoists only part itself.
  void plan_invariants(const Nest& n, CppVecPlan& v) const {
    if (!v.streamed.empty()) return;
    sym::Analyzer a = nest_analyzer(n);
    std::vector<sym::Expr> inner{var_of(v.loop)};
    for (size_t j = 0; j < n.red_ranges.size(); ++j)
      inner.push_back(reduction_var(static_cast<int>(j)));
    std::set<int> stored;
    for (const BodyOp& op : n.body.ops())
      if (op.op == LoopOp::store) stored.insert(op.buffer);
    for (int k = 0; k < static_cast<int>(n.body.ops().size()); ++k) {
      const BodyOp& op = n.body.op(k);
      if (n.after[static_cast<size_t>(k)] || v.scalar.count(k)) continue;
      bool invariant = false;
      switch (op.op) {
        case LoopOp::constant:
          invariant = true;
          break;
        case LoopOp::load:
          invariant = op.buffer >= 0 && !stored.count(op.buffer);
          for (const sym::Expr& var : inner)
            invariant = invariant && !sym::depends_on(op.index, var);
          break;
        case LoopOp::store:
        case LoopOp::reduction:
        case LoopOp::index_expr:  // only scalar ops (v.scalar), printed apart: never hoisted
        case LoopOp::indirect_index:
          break;
          COIL_LOOP_MATH_OPS(COIL_LOOP_OP_CASE)
          // Scalar ops (v.scalar) are computed before the loop too: a where on one and the
          // conversion of one (avg pooling's divisor) are invariant when their vectors are.
          invariant = true;
          for (int arg : op.args)
            invariant = invariant && (arg < 0 || v.invariant.count(arg) || v.scalar.count(arg));
          break;
      }
      if (invariant) v.invariant.insert(k);
    }
  }

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
    for (const Nest& n : plan_.nests) {
      std::set<int> loads;
      for (const BodyOp& op : n.body.ops())
        if (op.op == LoopOp::load && op.buffer >= 0 && plan_.arg_name.count(op.buffer))
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
                         const sym::Analyzer& a) const {
    auto it = revisited_.find(&n);
    if (it == revisited_.end() || !it->second.count(b) || g_.outer_depth == 0) return 0;
    auto stride = a.stride(index, loop_var(g_.outer_depth - 1));
    int64_t row = stride ? stride->as_const().value_or(0) : 0;
    int64_t row_bytes = row * dtype_size(plan_.storage_dtype(p_, b));
    if (row <= 0 || row_bytes > kPrefetchMaxRowBytes) return 0;
    return std::max<int64_t>(1, kPrefetchAheadBytes / row_bytes) * row;
  }

  const IrProgram& p_;
  const KernelGroup& g_;
  CppKernelPlan plan_;
  std::set<int> needs_array_;  // local buffers some nest loads (not only forwarded)
  std::map<const Nest*, std::set<int>> revisited_;  // nest -> buffers an earlier nest loaded
};

}  // namespace

std::string_view cpp_nest_kind_name(CppNestKind k) {
  switch (k) {
    case CppNestKind::Scalar:
      return "scalar";
    case CppNestKind::Vector:
      return "vector";
    case CppNestKind::Tile2D:
      return "tile2d";
    case CppNestKind::RowSplit:
      return "row_split";
    case CppNestKind::SplitReduction:
      return "split_reduction";
    case CppNestKind::MatmulTemplate:
      return "matmul_template";
    case CppNestKind::LibraryMatmul:
      return "library_matmul";
    case CppNestKind::ExternConv:
      return "extern_conv";
    case CppNestKind::ExternAttention:
      return "extern_attention";
    case CppNestKind::ExternIndexAdd:
      return "extern_index_add";
  }
  COIL_UNREACHABLE("bad nest kind");
}

DType CppKernelPlan::storage_dtype(const IrProgram& p, int b) const {
  if (b == kAccumulatorBuffer) return DType::F32;
  for (const CppWidenedInput& w : widened)
    if (w.buffer == b) return DType::F32;
  return p.buffer(b).layout.dtype;
}

std::string CppKernelPlan::pointer(int b) const {
  for (const CppWidenedInput& w : widened)
    if (w.buffer == b) return w.name;
  return arg_name.at(b);
}

CppKernelPlan plan_cpp_kernel(const IrProgram& program, const Schedule& schedule, size_t k,
                              const CppTarget& target) {
  return KernelPlanner(program, schedule.kernels[k], target).run();
}

}  // namespace coil

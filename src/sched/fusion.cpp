#include "sched/fusion.h"

#include <algorithm>
#include <set>

#include "ir/loop_extents.h"
#include "support/check.h"
#include "support/log.h"
#include "sym/analyzer.h"

namespace coil {

std::vector<int> KernelGroup::computations() const {
  std::vector<int> out;
  for (const auto& n : nests) out.insert(out.end(), n.computations.begin(), n.computations.end());
  return out;
}

bool row_partitioned(const sym::Expr& index, const Layout& layout, int depth,
                     const std::vector<sym::Expr>& ranges,
                     const std::vector<sym::Expr>& reduction_ranges, sym::Expr* inner) {
  return row_partitioned(index, layout, depth, ranges, loop_analyzer(ranges, reduction_ranges),
                         inner);
}

bool row_partitioned(const sym::Expr& index, const Layout& layout, int depth,
                     const std::vector<sym::Expr>& ranges, const sym::Analyzer& a,
                     sym::Expr* inner) {
  if (depth > static_cast<int>(layout.strides.size()) || depth > static_cast<int>(ranges.size()))
    return false;
  // An indirect load (gather) may read anywhere in its buffer.
  if (sym::depends_on(index, indirect_var())) return false;
  sym::Expr rest = index;
  for (int j = 0; j < depth; ++j) {
    auto stride = a.linear_stride(index, loop_var(j));
    if (!stride || !a.statically_known_equal(*stride, layout.strides[static_cast<size_t>(j)]))
      return false;
    if (!a.statically_known_equal(ranges[static_cast<size_t>(j)],
                                  layout.sizes[static_cast<size_t>(j)]))
      return false;
    rest = rest - loop_var(j) * layout.strides[static_cast<size_t>(j)];
  }
  rest = a.simplify(rest);
  for (int j = 0; j < depth; ++j)
    if (sym::depends_on(rest, loop_var(j))) return false;
  sym::Expr row = depth == 0 ? layout.numel() : layout.strides[static_cast<size_t>(depth - 1)];
  if (!a.statically_known_nonnegative(rest) || !a.statically_known_lt(rest, row)) return false;
  if (inner) *inner = rest;
  return true;
}

namespace {

/// Two attention calls of the same scores: q, k, mask, their layout, sizes, scale, causal flag
/// and dtype (v, out, grad_out and lse are the callers' to compare).
bool same_scores(const AttentionSpec& a, const AttentionSpec& b) {
  return a.q == b.q && a.k == b.k && a.mask == b.mask && a.q_offset == b.q_offset &&
         a.k_offset == b.k_offset && a.q_strides == b.q_strides && a.k_strides == b.k_strides &&
         a.mask_strides == b.mask_strides && a.bool_mask == b.bool_mask && a.batch == b.batch &&
         a.heads == b.heads && a.kv_heads == b.kv_heads && a.q_len == b.q_len &&
         a.kv_len == b.kv_len && a.head_dim == b.head_dim && a.scale == b.scale &&
         a.causal == b.causal && a.dtype == b.dtype;
}

bool both_attention_externs(const ComputedBuffer& a, const ComputedBuffer& b) {
  return a.attention && b.attention && a.kind == LoopKind::Extern && b.kind == LoopKind::Extern;
}

}  // namespace

bool attention_pairs_with_logsumexp(const ComputedBuffer& forward, const ComputedBuffer& lse) {
  if (!both_attention_externs(forward, lse)) return false;
  const AttentionSpec &f = *forward.attention, &l = *lse.attention;
  return f.kernel == AttentionKernel::forward && l.kernel == AttentionKernel::logsumexp &&
         same_scores(f, l);
}

bool attention_pairs_with_grad_v(const ComputedBuffer& grad_k, const ComputedBuffer& grad_v) {
  if (!both_attention_externs(grad_k, grad_v)) return false;
  const AttentionSpec &k = *grad_k.attention, &v = *grad_v.attention;
  return k.kernel == AttentionKernel::grad_k && v.kernel == AttentionKernel::grad_v &&
         same_scores(k, v) && k.v == v.v && k.v_offset == v.v_offset &&
         k.v_strides == v.v_strides && k.value_dim == v.value_dim && k.out == v.out &&
         k.grad_out == v.grad_out && k.lse == v.lse;
}

bool attention_calls_share_a_pass(const ComputedBuffer& first, const ComputedBuffer& second) {
  return attention_pairs_with_logsumexp(first, second) ||
         attention_pairs_with_grad_v(first, second);
}

namespace {

class Fuser {
 public:
  Fuser(const IrProgram& p, const DependencyGraph& d, const FusionOptions& o)
      : p_(p), d_(d), o_(o) {}

  std::vector<KernelGroup> run() {
    const bool enabled = o_.enabled;
    size_t n = p_.computations.size();
    std::vector<bool> done(n, false);
    std::vector<KernelGroup> groups;
    size_t remaining = n;
    while (remaining > 0) {
      KernelGroup g;
      int first = next_ready(done, -1, g, false);
      add_new_nest(g, first);
      done[static_cast<size_t>(first)] = true;
      --remaining;
      while (enabled && remaining > 0) {
        int c = next_ready(done, first, g, true);
        if (c < 0) break;
        done[static_cast<size_t>(c)] = true;
        --remaining;
      }
      finish(g);
      groups.push_back(std::move(g));
    }
    return groups;
  }

 private:
  const ComputedBuffer& comp(int c) const { return p_.computations[static_cast<size_t>(c)]; }
  std::string name(int c) const {
    return fmt::format("{} ({})", p_.buffer(comp(c).buffer).name,
                       fmt::join(comp(c).origin_names, ", "));
  }
  bool ready(const std::vector<bool>& done, int c) const {
    for (int pred : d_.predecessors[static_cast<size_t>(c)])
      if (!done[static_cast<size_t>(pred)]) return false;
    return true;
  }

  /// The first ready computation (try_fuse = false), or the first ready one that can join `g`.
  int next_ready(const std::vector<bool>& done, int, KernelGroup& g, bool try_fuse) {
    for (size_t c = 0; c < done.size(); ++c) {
      if (done[c] || !ready(done, static_cast<int>(c))) continue;
      if (!try_fuse) return static_cast<int>(c);
      if (try_add(g, static_cast<int>(c))) return static_cast<int>(c);
    }
    return -1;
  }

  void add_new_nest(KernelGroup& g, int c) {
    int depth = static_cast<int>(comp(c).ranges.size());
    g.outer_depth = g.nests.empty() ? depth : std::min(g.outer_depth, depth);
    g.nests.push_back(LoopNest{{c}, {}});
  }

  bool shares_data(const KernelGroup& g, int c) const {
    std::set<int> touched;
    for (int m : g.computations()) {
      touched.insert(comp(m).buffer);
      for (const auto& r : d_.computations[static_cast<size_t>(m)].reads) touched.insert(r.buffer);
    }
    for (const auto& r : d_.computations[static_cast<size_t>(c)].reads)
      if (touched.count(r.buffer)) return true;
    return false;
  }

  int body_ops(const KernelGroup& g) const {
    int n = 0;
    for (int m : g.computations()) n += static_cast<int>(comp(m).body.ops().size());
    return n;
  }

  bool refuse(int c, const KernelGroup& g, const std::string& why) {
    COIL_LOG(fusion, "refuse {} into kernel of [{}]: {}", name(c), group_names(g), why);
    return false;
  }
  std::string group_names(const KernelGroup& g) const {
    std::vector<std::string> names;
    for (int m : g.computations()) names.push_back(p_.buffer(comp(m).buffer).name);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  /// Same loops as nest `nest`, and every value c reads from that nest is read at the index
  /// where it is stored (so the merged body forwards it) from a pointwise producer.
  bool can_share_nest(const LoopNest& nest, int c) const {
    if (!nest.reindex.empty()) return false;
    const ComputedBuffer& a = comp(nest.computations[0]);
    const ComputedBuffer& b = comp(c);
    if (a.ranges != b.ranges || a.reduction_ranges != b.reduction_ranges) return false;
    for (const auto& r : d_.computations[static_cast<size_t>(c)].reads) {
      for (int m : nest.computations) {
        if (comp(m).buffer != r.buffer) continue;
        if (comp(m).is_reduction() ||
            r.index != d_.computations[static_cast<size_t>(m)].write.index)
          return false;
      }
    }
    return true;
  }

  /// Every buffer passed from one nest to a later one is row-partitioned at `depth`.
  bool rows_independent(const KernelGroup& g, int depth, std::string* why) const {
    std::map<int, int> nest_of;  // computation -> nest position
    for (size_t i = 0; i < g.nests.size(); ++i)
      for (int m : g.nests[i].computations) nest_of[m] = static_cast<int>(i);
    for (const auto& [m, ni] : nest_of) {
      const ComputedBuffer& reader = comp(m);
      for (const auto& r : d_.computations[static_cast<size_t>(m)].reads) {
        int w = d_.writer[static_cast<size_t>(r.buffer)];
        auto it = nest_of.find(w);
        if (it == nest_of.end() || it->second == ni) continue;  // external, or forwarded in-nest
        const ComputedBuffer& writer = comp(w);
        const Layout& layout = p_.buffer(r.buffer).layout;
        if (!row_partitioned(d_.computations[static_cast<size_t>(w)].write.index, layout, depth,
                             writer.ranges, writer.reduction_ranges) ||
            !row_partitioned(r.index, layout, depth, reader.ranges, reader.reduction_ranges)) {
          *why = fmt::format("{} reads {} outside the rows of the shared {} outer loop(s)",
                             p_.buffer(reader.buffer).name, p_.buffer(r.buffer).name, depth);
          return false;
        }
      }
    }
    return true;
  }

  /// Whether reduction c vectorizes only along its last pointwise loop (a column sum: each
  /// lane its own output): some read is neither contiguous nor invariant along its innermost
  /// reduction loop (so no horizontal vector form), every read is along its last pointwise
  /// loop. A kernel that shares all of c's pointwise loops runs them one index at a time, so
  /// c fused there prints as scalar loops (a GPT block's bias gradient, the sum over rows of
  /// gelu's backward, computed lane by lane with scalar erf and exp); alone it is a vector
  /// nest. The CPU planner's rule (choose_vec_loop) in the terms the scheduler has.
  bool reduction_wants_its_last_loop(int c) const {
    const ComputedBuffer& red = comp(c);
    if (!red.is_reduction() || red.ranges.empty() || red.reduction_ranges.empty()) return false;
    sym::Analyzer a = loop_analyzer(red.ranges, red.reduction_ranges);
    const sym::Expr r = reduction_var(static_cast<int>(red.reduction_ranges.size()) - 1);
    const sym::Expr x = loop_var(static_cast<int>(red.ranges.size()) - 1);
    auto unit = [&](const sym::Expr& index, const sym::Expr& var) {
      auto st = a.stride(index, var);
      return st && (st->as_const() == 0 || st->as_const() == 1);
    };
    bool along_r = true, along_x = true;
    for (const auto& rd : d_.computations[static_cast<size_t>(c)].reads) {
      if (sym::depends_on(rd.index, indirect_var())) return false;
      along_r = along_r && unit(rd.index, r);
      along_x = along_x && unit(rd.index, x);
    }
    return !along_r && along_x;
  }

  /// The last nest is pointwise over outer + [D] and c reduces over exactly [D] with the same
  /// outer loops, reading the nest's values element by element: rename the nest's last loop
  /// variable to r0 and put c in the same nest.
  bool try_prologue(KernelGroup& g, int c) {
    LoopNest& last = g.nests.back();
    const ComputedBuffer& red = comp(c);
    if (!red.is_reduction() || red.reduction_ranges.size() != 1 || !last.reindex.empty())
      return false;
    const ComputedBuffer& p = comp(last.computations[0]);
    if (p.is_reduction() || p.ranges.size() != red.ranges.size() + 1) return false;
    if (!std::equal(red.ranges.begin(), red.ranges.end(), p.ranges.begin()) ||
        p.ranges.back() != red.reduction_ranges[0])
      return false;
    std::map<sym::Expr, sym::Expr> rename{
        {loop_var(static_cast<int>(red.ranges.size())), reduction_var(0)}};
    bool reads_nest = false;
    for (const auto& r : d_.computations[static_cast<size_t>(c)].reads) {
      for (int m : last.computations) {
        if (comp(m).buffer != r.buffer) continue;
        if (sym::substitute(d_.computations[static_cast<size_t>(m)].write.index, rename) != r.index)
          return false;
        reads_nest = true;
      }
    }
    if (!reads_nest) return false;
    KernelGroup trial = g;
    for (int m : trial.nests.back().computations) trial.nests.back().reindex[m] = rename;
    trial.nests.back().computations.push_back(c);
    trial.outer_depth = std::min<int>(trial.outer_depth, static_cast<int>(red.ranges.size()));
    if (trial.outer_depth == 0) return false;
    std::string why;
    if (!rows_independent(trial, trial.outer_depth, &why)) return false;
    g = std::move(trial);
    COIL_LOG(fusion,
             "fuse {} into kernel of [{}]: its pointwise prologue runs in the reduction loop",
             name(c), group_names(g));
    return true;
  }

  /// A pointwise computation over the template's output shape joins the template's kernel as
  /// its epilogue: it runs on each output tile right after the tile is computed, while the tile
  /// is in cache. Values of the kernel (the product, earlier epilogue values) must be read at
  /// the index where they are stored; anything else may be read freely.
  bool try_epilogue(KernelGroup& g, int c) {
    const ComputedBuffer& t = comp(g.nests[0].computations[0]);
    const ComputedBuffer& e = comp(c);
    if (e.kind != LoopKind::Pointwise) return refuse(c, g, "only pointwise epilogues fuse");
    if (e.ranges != t.ranges)
      return refuse(c, g,
                    fmt::format("loops {} differ from the product's {}", shape_str(e.ranges),
                                shape_str(t.ranges)));
    for (const auto& r : d_.computations[static_cast<size_t>(c)].reads) {
      for (int m : g.computations()) {
        if (comp(m).buffer == r.buffer &&
            r.index != d_.computations[static_cast<size_t>(m)].write.index)
          return refuse(c, g,
                        fmt::format("reads {} away from the element being computed",
                                    p_.buffer(r.buffer).name));
      }
    }
    if (g.nests.size() == 1) g.nests.push_back(LoopNest{});
    g.nests.back().computations.push_back(c);
    COIL_LOG(fusion, "fuse {} into kernel of [{}]: epilogue of the matmul template", name(c),
             group_names(g));
    return true;
  }

  /// Two attention calls of one pass (attention_calls_share_a_pass: a forward and its
  /// logsumexp, the gradients of k and v; either may come first: both read only inputs computed
  /// by now) become one call, the leading one (forward, grad_k) first.
  bool try_attention_pair(KernelGroup& g, int c) {
    if (g.nests.size() != 1 || g.nests[0].computations.size() != 1) return false;
    const int head = g.nests[0].computations[0];
    if (attention_calls_share_a_pass(comp(head), comp(c))) {
      g.nests.push_back(LoopNest{{c}, {}});
    } else if (attention_calls_share_a_pass(comp(c), comp(head))) {
      g.nests.insert(g.nests.begin(), LoopNest{{c}, {}});
    } else {
      return false;
    }
    // The call runs no loops of its own; the nests share the loops both have ([B, H, Tq] of a
    // forward and its lse, [B, Hkv, Tk] of dK and dV, whose head dims may differ).
    const auto& mine = comp(head).ranges;
    const auto& theirs = comp(c).ranges;
    int common = 0;
    while (common < static_cast<int>(std::min(mine.size(), theirs.size())) &&
           mine[static_cast<size_t>(common)] == theirs[static_cast<size_t>(common)])
      ++common;
    g.outer_depth = std::min(g.outer_depth, common);
    COIL_LOG(fusion, "fuse {} into kernel of [{}]: {}", name(c), group_names(g),
             comp(c).attention->kernel == AttentionKernel::logsumexp ||
                     comp(c).attention->kernel == AttentionKernel::forward
                 ? "one attention pass writes y and its logsumexp"
                 : "one key-block loop writes the gradients of k and v");
    return true;
  }

  bool try_add(KernelGroup& g, int c) {
    if (!shares_data(g, c)) return false;  // unrelated: not a candidate, not logged
    if (try_attention_pair(g, c)) return true;
    LoopKind first = comp(g.nests[0].computations[0]).kind;
    if (first == LoopKind::Extern)
      return refuse(c, g, "nothing fuses into an extern call (it gets its own kernel)");
    if (first == LoopKind::Template && !o_.fuse_into_templates)
      return refuse(c, g, "this target calls a library for matmuls (no epilogue fusion)");
    if (comp(c).is_opaque()) return refuse(c, g, "a template or extern call starts its own kernel");
    if (static_cast<int>(g.computations().size()) >= kMaxFusedComputations ||
        body_ops(g) + static_cast<int>(comp(c).body.ops().size()) > kMaxFusedOps)
      return refuse(c, g, "the kernel would exceed its size bound");
    if (first == LoopKind::Template) return try_epilogue(g, c);
    // Same loops as the last nest: merge bodies.
    if (can_share_nest(g.nests.back(), c)) {
      KernelGroup trial = g;
      trial.nests.back().computations.push_back(c);
      std::string why;
      if (rows_independent(trial, trial.outer_depth, &why)) {
        g = std::move(trial);
        COIL_LOG(fusion, "fuse {} into kernel of [{}]: same loops, one body", name(c),
                 group_names(g));
        return true;
      }
    }
    if (try_prologue(g, c)) return true;
    // Outer-loop fusion: a new nest under the common outer loops.
    const auto& outer = comp(g.nests[0].computations[0]).ranges;
    const auto& mine = comp(c).ranges;
    int k = 0;
    while (k < g.outer_depth && k < static_cast<int>(mine.size()) &&
           outer[static_cast<size_t>(k)] == mine[static_cast<size_t>(k)])
      ++k;
    if (k == 0) return refuse(c, g, "no common outer loop");
    if (k == static_cast<int>(mine.size()) && reduction_wants_its_last_loop(c))
      return refuse(c, g,
                    "its reads are contiguous along its last loop only, which the kernel would "
                    "share: the reduction would run as scalar loops");
    std::vector<sym::Expr> shared(outer.begin(), outer.begin() + k);
    // At the nominal size, not the hints: a size-generic module serves every size, and a
    // decoder's KV cache of length s + 1 made short rows at one hint and long at another (the
    // module's text depended on the sizes it was generated at, and was refused).
    int64_t rows = product(nominal_extents(shared));
    int64_t row_work = std::max(product(nominal_extents(comp(c).ranges)) *
                                    product(nominal_extents(comp(c).reduction_ranges)) /
                                    std::max<int64_t>(rows, 1),
                                int64_t{1});
    if (rows < kMinFusedRows && row_work >= kLongRowElements)
      return refuse(
          c, g, fmt::format("{} long rows are too few to parallelize one fused row loop", rows));
    KernelGroup trial = g;
    trial.outer_depth = k;
    trial.nests.push_back(LoopNest{{c}, {}});
    std::string why;
    if (!rows_independent(trial, k, &why)) return refuse(c, g, why);
    g = std::move(trial);
    COIL_LOG(fusion, "fuse {} into kernel of [{}]: outer-loop fusion over {}", name(c),
             group_names(g), shape_str(shared));
    return true;
  }

  /// Intermediates read only inside the kernel become local row buffers.
  void finish(KernelGroup& g) {
    auto members = g.computations();
    for (int m : members) {
      int b = comp(m).buffer;
      if (p_.buffer(b).kind != BufferKind::Intermediate) continue;
      if (!d_.read_only_within(b, members)) continue;
      // A template's product in a narrower dtype than its f32 accumulator (bf16) is stored
      // and read back rounded by its epilogue.
      if (comp(m).kind == LoopKind::Template && p_.buffer(b).layout.dtype != DType::F32) continue;
      g.local_buffers.push_back(b);
    }
  }

  const IrProgram& p_;
  const DependencyGraph& d_;
  const FusionOptions& o_;
};

}  // namespace

std::vector<KernelGroup> fuse_computations(const IrProgram& program, const DependencyGraph& deps,
                                           const FusionOptions& options) {
  return Fuser(program, deps, options).run();
}

}  // namespace coil

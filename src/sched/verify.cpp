#include "sched/verify.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/verify.h"

namespace coil {

namespace {

class ScheduleChecker {
 public:
  ScheduleChecker(const IrProgram& p, const Schedule& s, std::vector<std::string>& errors)
      : p_(p), s_(s), errors_(errors) {}

  void run(bool memory_planned) {
    if (!check_membership()) return;
    check_order();
    for (size_t k = 0; k < s_.kernels.size(); ++k) {
      check_loops(k);
      check_kinds(k);
      check_data(k);
      check_locals(k);
    }
    if (memory_planned) check_memory();
  }

 private:
  template <typename... Args>
  void fail(fmt::format_string<Args...> f, Args&&... args) {
    errors_.push_back(fmt::format(f, std::forward<Args>(args)...));
  }
  const ComputedBuffer& comp(int c) const { return p_.computations[static_cast<size_t>(c)]; }
  std::string name(int c) const { return describe_computation(p_, comp(c)); }
  const std::string& bname(int b) const { return p_.buffer(b).name; }

  // S1
  bool check_membership() {
    size_t n = p_.computations.size();
    if (s_.deps.computations.size() != n || s_.deps.writer.size() != p_.buffers.size()) {
      fail("the dependencies have {} computations and {} buffers, the program {} and {}",
           s_.deps.computations.size(), s_.deps.writer.size(), n, p_.buffers.size());
      return false;
    }
    for (size_t c = 0; c < n; ++c)
      if (s_.deps.computations[c].write.buffer != p_.computations[c].buffer)
        fail("the dependencies of {} write {}, not its buffer", name(static_cast<int>(c)),
             s_.deps.computations[c].write.buffer);
    kernel_of_.assign(n, -1);
    nest_of_.assign(n, -1);
    pos_.assign(n, -1);
    bool ok = true;
    for (size_t k = 0; k < s_.kernels.size(); ++k) {
      const KernelGroup& g = s_.kernels[k];
      if (g.nests.empty()) fail("kernel {} has no nest", k);
      int pos = 0;
      for (size_t ni = 0; ni < g.nests.size(); ++ni) {
        if (g.nests[ni].computations.empty()) fail("kernel {} nest {} is empty", k, ni);
        for (int c : g.nests[ni].computations) {
          if (c < 0 || c >= static_cast<int>(n)) {
            fail("kernel {} nest {} holds computation {}, which does not exist", k, ni, c);
            ok = false;
            continue;
          }
          if (kernel_of_[static_cast<size_t>(c)] >= 0) {
            fail("{} is scheduled twice: kernel {} and kernel {} nest {}", name(c),
                 kernel_of_[static_cast<size_t>(c)], k, ni);
            ok = false;
            continue;
          }
          kernel_of_[static_cast<size_t>(c)] = static_cast<int>(k);
          nest_of_[static_cast<size_t>(c)] = static_cast<int>(ni);
          pos_[static_cast<size_t>(c)] = pos++;
        }
      }
    }
    for (size_t c = 0; c < n; ++c)
      if (kernel_of_[c] < 0) {
        fail("{} is in no kernel", name(static_cast<int>(c)));
        ok = false;
      }
    return ok;
  }

  // S2
  void check_order() {
    for (size_t c = 0; c < p_.computations.size(); ++c) {
      for (const MemoryDep& r : s_.deps.computations[c].reads) {
        int w = s_.deps.writer[static_cast<size_t>(r.buffer)];
        if (w < 0) continue;
        auto at = [&](int x) {
          return std::pair(kernel_of_[static_cast<size_t>(x)], pos_[static_cast<size_t>(x)]);
        };
        if (!(at(w) < at(static_cast<int>(c))))
          fail("kernel {}: {} reads {} before {} (kernel {}) writes it", kernel_of_[c],
               name(static_cast<int>(c)), bname(r.buffer), name(w),
               kernel_of_[static_cast<size_t>(w)]);
      }
    }
  }

  /// The loops of computation `c` as its nest runs them: (ranges, reduction ranges).
  std::pair<std::vector<sym::Expr>, std::vector<sym::Expr>> nest_loops(const LoopNest& nest,
                                                                       int c) const {
    const ComputedBuffer& cb = comp(c);
    if (!nest.reindex.count(c)) return {cb.ranges, cb.reduction_ranges};
    // A prologue: its last loop runs as the reduction's r0.
    std::vector<sym::Expr> x(cb.ranges.begin(), cb.ranges.end() - (cb.ranges.empty() ? 0 : 1));
    std::vector<sym::Expr> r;
    if (!cb.ranges.empty()) r.push_back(cb.ranges.back());
    return {x, r};
  }

  sym::Expr index_in_nest(const LoopNest& nest, int c, const sym::Expr& index) const {
    auto it = nest.reindex.find(c);
    return it == nest.reindex.end() ? index : sym::substitute(index, it->second);
  }

  // S3
  void check_loops(size_t k) {
    const KernelGroup& g = s_.kernels[k];
    if (g.nests.empty() || g.nests[0].computations.empty()) return;
    const auto& outer = comp(g.nests[0].computations[0]).ranges;
    if (g.outer_depth < 0 || g.outer_depth > static_cast<int>(outer.size())) {
      fail("kernel {}: outer_depth {} for a first nest of ranges {}", k, g.outer_depth,
           shape_str(outer));
      return;
    }
    for (size_t ni = 0; ni < g.nests.size(); ++ni) {
      const LoopNest& nest = g.nests[ni];
      for (const auto& [c, map] : nest.reindex) {
        if (std::find(nest.computations.begin(), nest.computations.end(), c) ==
            nest.computations.end())
          fail("kernel {} nest {}: reindex names computation {}, not one of the nest", k, ni, c);
        else if (comp(c).kind != LoopKind::Pointwise || comp(c).ranges.empty())
          fail("kernel {} nest {}: {} is reindexed but not a pointwise nest", k, ni, name(c));
        else if (map !=
                 std::map<sym::Expr, sym::Expr>{
                     {loop_var(static_cast<int>(comp(c).ranges.size()) - 1), reduction_var(0)}})
          fail("kernel {} nest {}: {} is reindexed other than by its last loop variable -> r0", k,
               ni, name(c));
      }
      if (nest.computations.empty()) continue;
      for (int c : nest.computations) {
        if (g.outer_depth > static_cast<int>(comp(c).ranges.size()))
          fail("kernel {} nest {}: {} has {} loop(s), fewer than the {} shared outer loop(s)", k,
               ni, name(c), comp(c).ranges.size(), g.outer_depth);
        else if (!std::equal(outer.begin(), outer.begin() + g.outer_depth, comp(c).ranges.begin()))
          fail(
              "kernel {} nest {}: {} has ranges {}, which do not start with the shared outer "
              "loops {}",
              k, ni, name(c), shape_str(comp(c).ranges), shape_str(outer));
      }
      if (comp(g.nests[0].computations[0]).kind == LoopKind::Template) continue;  // S4
      // The nest's loops: those of its first computation not renamed (the reduction).
      int ref = nest.computations[0];
      for (int c : nest.computations)
        if (!nest.reindex.count(c)) {
          ref = c;
          break;
        }
      auto loops = nest_loops(nest, ref);
      for (int c : nest.computations)
        if (nest_loops(nest, c) != loops)
          fail("kernel {} nest {}: {} runs loops {} x {}, the nest {} x {}", k, ni, name(c),
               shape_str(nest_loops(nest, c).first), shape_str(nest_loops(nest, c).second),
               shape_str(loops.first), shape_str(loops.second));
    }
  }

  // S4
  void check_kinds(size_t k) {
    const KernelGroup& g = s_.kernels[k];
    auto members = g.computations();
    for (size_t ni = 0; ni < g.nests.size(); ++ni) {
      for (size_t j = 0; j < g.nests[ni].computations.size(); ++j) {
        int c = g.nests[ni].computations[j];
        LoopKind kind = comp(c).kind;
        if (kind == LoopKind::Extern && members.size() != 1 &&
            !(members.size() == 2 && g.nests.size() == 2 &&
              attention_calls_share_a_pass(comp(g.nests[0].computations[0]),
                                           comp(g.nests[1].computations[0]))))
          fail(
              "kernel {}: {} shares its kernel; an Extern is alone (but for an attention "
              "forward followed by its logsumexp, or the gradients of k and v)",
              k, name(c));
        if (kind == LoopKind::Template &&
            (ni != 0 || j != 0 || g.nests[0].computations.size() != 1))
          fail("kernel {}: {} is not alone in the kernel's first nest", k, name(c));
      }
    }
    if (g.nests.empty() || g.nests[0].computations.empty()) return;
    const ComputedBuffer& first = comp(g.nests[0].computations[0]);
    if (first.kind != LoopKind::Template) return;
    if (g.nests.size() > 2)
      fail("kernel {}: a template with {} nests (at most 2)", k, g.nests.size());
    for (size_t ni = 1; ni < g.nests.size(); ++ni)
      for (int c : g.nests[ni].computations)
        if (comp(c).kind != LoopKind::Pointwise || comp(c).ranges != first.ranges)
          fail("kernel {}: epilogue {} is not pointwise over the product's ranges {}", k, name(c),
               shape_str(first.ranges));
  }

  // S5
  void check_data(size_t k) {
    const KernelGroup& g = s_.kernels[k];
    if (g.nests.empty() || g.nests[0].computations.empty()) return;
    bool template_kernel = comp(g.nests[0].computations[0]).kind == LoopKind::Template;
    for (size_t ni = 0; ni < g.nests.size(); ++ni) {
      const LoopNest& nest = g.nests[ni];
      for (int c : nest.computations) {
        for (const MemoryDep& r : s_.deps.computations[static_cast<size_t>(c)].reads) {
          int w = s_.deps.writer[static_cast<size_t>(r.buffer)];
          if (w < 0 || kernel_of_[static_cast<size_t>(w)] != static_cast<int>(k)) continue;
          size_t wn = static_cast<size_t>(nest_of_[static_cast<size_t>(w)]);
          const LoopNest& wnest = g.nests[wn];
          sym::Expr read = index_in_nest(nest, c, r.index);
          sym::Expr write =
              index_in_nest(wnest, w, s_.deps.computations[static_cast<size_t>(w)].write.index);
          if (template_kernel) {
            if (read != write)
              fail("kernel {}: epilogue {} reads {} at {}, not at the element it computes ({})", k,
                   name(c), bname(r.buffer), sym::to_string(read), sym::to_string(write));
            continue;
          }
          if (wn == static_cast<size_t>(ni)) {
            if (comp(w).is_reduction() || read != write)
              fail("kernel {} nest {}: {} reads {} at {} in the nest that writes it at {}{}", k, ni,
                   name(c), bname(r.buffer), sym::to_string(read), sym::to_string(write),
                   comp(w).is_reduction() ? " (a reduction's value is not ready inside its nest)"
                                          : " (it cannot be forwarded)");
            continue;
          }
          const Layout& layout = p_.buffer(r.buffer).layout;
          const ComputedBuffer& reader = comp(c);
          const ComputedBuffer& writer = comp(w);
          if (!row_partitioned(s_.deps.computations[static_cast<size_t>(w)].write.index, layout,
                               g.outer_depth, writer.ranges, writer.reduction_ranges) ||
              !row_partitioned(r.index, layout, g.outer_depth, reader.ranges,
                               reader.reduction_ranges))
            fail(
                "kernel {}: {} (nest {}) reads {} (written in nest {}) outside the rows of the {} "
                "shared outer loop(s)",
                k, name(c), ni, bname(r.buffer), wn, g.outer_depth);
        }
      }
    }
  }

  // S6
  void check_locals(size_t k) {
    const KernelGroup& g = s_.kernels[k];
    for (int b : g.local_buffers) {
      if (b < 0 || b >= static_cast<int>(p_.buffers.size())) {
        fail("kernel {}: local buffer {} does not exist", k, b);
        continue;
      }
      if (!local_owner_.emplace(b, static_cast<int>(k)).second) {
        fail("{} is local to kernel {} and kernel {}", bname(b), local_owner_[b], k);
        continue;
      }
      if (p_.buffer(b).kind != BufferKind::Intermediate)
        fail("kernel {}: local buffer {} is {}, not an intermediate", k, bname(b),
             buffer_kind_name(p_.buffer(b).kind));
      int w = s_.deps.writer[static_cast<size_t>(b)];
      if (w < 0 || kernel_of_[static_cast<size_t>(w)] != static_cast<int>(k))
        fail("kernel {}: local buffer {} is not written by the kernel", k, bname(b));
      for (int r : s_.deps.readers[static_cast<size_t>(b)])
        if (kernel_of_[static_cast<size_t>(r)] != static_cast<int>(k))
          fail("kernel {}: local buffer {} is read by {} in kernel {} (a dangling reference)", k,
               bname(b), name(r), kernel_of_[static_cast<size_t>(r)]);
    }
  }

  // M1, M2
  void check_memory() {
    const MemoryPlan& m = s_.memory;
    if (m.offsets.size() != p_.buffers.size()) {
      fail("the memory plan has {} offsets for {} buffers", m.offsets.size(), p_.buffers.size());
      return;
    }
    struct Live {
      int buffer;
      int64_t begin, end;  // bytes
      int first, last;     // kernels
    };
    std::vector<Live> live;
    for (const Buffer& b : p_.buffers) {
      int64_t off = m.offsets[static_cast<size_t>(b.id)];
      bool arena = b.kind == BufferKind::Intermediate && !local_owner_.count(b.id);
      if (!arena) {
        if (off >= 0)
          fail("{} ({}{}) has arena offset {}", b.name, buffer_kind_name(b.kind),
               local_owner_.count(b.id) ? ", local" : "", off);
        continue;
      }
      int w = s_.deps.writer[static_cast<size_t>(b.id)];
      if (off < 0) {
        if (w >= 0) fail("intermediate {} has no arena offset", b.name);
        continue;
      }
      int64_t bytes = buffer_nbytes(b);
      if (off % MemoryPlan::kAlignment != 0 || off + bytes > m.arena_bytes)
        fail("{} at offset {} ({} bytes) is unaligned or outside the arena of {} bytes", b.name,
             off, bytes, m.arena_bytes);
      if (w < 0) continue;
      int first = kernel_of_[static_cast<size_t>(w)], last = first;
      for (int r : s_.deps.readers[static_cast<size_t>(b.id)])
        last = std::max(last, kernel_of_[static_cast<size_t>(r)]);
      live.push_back({b.id, off, off + bytes, first, last});
    }
    std::set<std::pair<int, int>> in_place(m.in_place.begin(), m.in_place.end());
    for (const auto& [b, a] : m.in_place) check_in_place(b, a);
    for (size_t i = 0; i < live.size(); ++i) {
      for (size_t j = i + 1; j < live.size(); ++j) {
        const Live& x = live[i];
        const Live& y = live[j];
        bool bytes = x.begin < y.end && y.begin < x.end;
        bool times = x.first <= y.last && y.first <= x.last;
        if (!bytes || !times) continue;
        // An in-place update: the later buffer is written where the earlier one is last read.
        auto ok = [&](const Live& earlier, const Live& later) {
          return in_place.count({later.buffer, earlier.buffer}) && earlier.last == later.first;
        };
        if (ok(x, y) || ok(y, x)) continue;
        fail(
            "{} (kernels {}-{}) and {} (kernels {}-{}) are live at once in overlapping arena "
            "bytes [{}, {}) and [{}, {})",
            bname(x.buffer), x.first, x.last, bname(y.buffer), y.first, y.last, x.begin, x.end,
            y.begin, y.end);
      }
    }
  }

  void check_in_place(int b, int a) {
    if (b < 0 || a < 0 || b >= static_cast<int>(p_.buffers.size()) ||
        a >= static_cast<int>(p_.buffers.size())) {
      fail("in-place pair ({}, {}) names no buffer", b, a);
      return;
    }
    const Buffer& bb = p_.buffer(b);
    const Buffer& ab = p_.buffer(a);
    if (bb.layout.dtype != ab.layout.dtype || buffer_nbytes(bb) != buffer_nbytes(ab))
      fail("{} updates {} in place, but their dtypes or sizes differ", bb.name, ab.name);
    if (s_.memory.offsets[static_cast<size_t>(b)] != s_.memory.offsets[static_cast<size_t>(a)])
      fail("{} updates {} in place at another offset", bb.name, ab.name);
    int w = s_.deps.writer[static_cast<size_t>(b)];
    if (w < 0) return;
    int k = kernel_of_[static_cast<size_t>(w)];
    const KernelGroup& g = s_.kernels[static_cast<size_t>(k)];
    sym::Expr write = s_.deps.computations[static_cast<size_t>(w)].write.index;
    bool ok = g.nests.size() == 1, written = false;
    for (int c : g.computations()) {
      if (comp(c).kind != LoopKind::Pointwise) ok = false;
      for (const MemoryDep& r : s_.deps.computations[static_cast<size_t>(c)].reads)
        if (r.buffer == a && (r.index != write || written)) ok = false;
      if (c == w) written = true;  // a read of `a` after b's store would see b's value
    }
    for (int r : s_.deps.readers[static_cast<size_t>(a)])
      if (kernel_of_[static_cast<size_t>(r)] > k) ok = false;
    if (!ok)
      fail(
          "{} updates {} in place in kernel {}, which is not one pointwise nest reading it last, "
          "only at the index it writes and before it writes",
          bb.name, ab.name, k);
  }

  const IrProgram& p_;
  const Schedule& s_;
  std::vector<std::string>& errors_;
  std::vector<int> kernel_of_, nest_of_, pos_;
  std::map<int, int> local_owner_;  // buffer -> kernel
};

}  // namespace

std::vector<std::string> verify_schedule(const IrProgram& program, const Schedule& schedule,
                                         bool memory_planned) {
  std::vector<std::string> errors;
  ScheduleChecker(program, schedule, errors).run(memory_planned);
  return errors;
}

}  // namespace coil

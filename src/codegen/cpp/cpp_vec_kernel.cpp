// CppVecKernel: explicit SIMD for one loop nest, with coil_vec.h's coil::Vec<float> (the ISA's
// float register; kFloatLanes lanes). One loop steps by the vector width:
//   * horizontal reduction: the innermost r loop; vector accumulators, reduced across lanes
//     after the loop (in coil_vec.h's fixed order), then the scalar epilogue;
//   * pointwise and vertical reduction: the innermost x loop; each lane is one output.
// Accesses along the vector loop: stride 0 broadcasts a scalar, stride 1 is a vector load or
// store, any other stride gathers lane by lane. The main loop covers whole vectors; the tail
// (size % kFloatLanes elements) runs the same body with masked loads and stores, which never
// touch memory past the end. Where both exist the body is printed once, as an always-inlined
// `step(v, count)` that both call (print_vec_step).
#include <set>

#include "codegen/cpp/cpp_vec_ops.h"

namespace coil {
namespace {

/// The first element of the streamed store that the plan found off the vector alignment (its
/// access with the vector variable 0, e.g. out[1000*x0] with 16 lanes).
std::string stream_head_start(const NestPrinter& p, const Nest& n, const sym::Analyzer& a,
                              const CppVecPlan& v) {
  const BodyOp& op = n.body.op(v.stream_head_store);
  sym::Expr start = a.simplify(sym::substitute(op.index, {{var_of(v.loop), sym::Expr(0)}}));
  return p.access(n, op.buffer, start, a);
}

/// `v` from `begin` to `end` (C++ expressions, known at run time): whole vectors, then one
/// masked tail, both calls of one step. `body(count)` prints one vector's ops.
void emit_whole_and_tail(NestPrinter& p, const Nest& n, const std::string& v,
                         const std::string& begin, const std::string& end,
                         const std::function<void(const std::string&)>& body) {
  CodeWriter& w = p.writer();
  const int64_t lanes = p.plan().lanes;
  w.open();
  print_vec_step(p, n, v, "", [&] { body(kStepCount); });
  w.linef("int64_t {0} = {1};", v, begin);
  w.linef("for (; {0} + {1} <= {2}; {0} += {1})", v, lanes, end);
  w.linef("    step({}, {});", v, lanes);
  w.linef("if ({0} < {1}) step({0}, {1} - {0});", v, end);
  w.close();
}

}  // namespace

/// The scalar ops (vp.scalar) and the invariants (vp.invariant) of vector nest `n`, printed
/// once before its vector loop.
void emit_hoisted(NestPrinter& p, const Nest& n, const sym::Analyzer& a, const CppVecPlan& vp,
                  const std::string& v) {
  if (!vp.scalar.empty()) {
    p.writer().linef("// the same in every lane of {}: scalar", v);
    p.emit_scalar_ops(n, a, [&](int i) { return vp.scalar.count(i) > 0; });
  }
  if (!vp.invariant.empty()) {
    p.writer().linef("// the same in every iteration of {}: computed once", v);
    VecOpPrinter(p, n, a, vp, "").emit([&](int i) { return vp.invariant.count(i) > 0; });
  }
}

/// A window split (vp.window): the innermost loop as a scalar border, the vectorized interior
/// (its folded body) and the other border.
void emit_window_split(NestPrinter& p, const Nest& n, const CppVecPlan& vp) {
  const CppWindowSplit& ws = *vp.window;
  const Nest& in = ws.interior;
  CodeWriter& w = p.writer();
  const sym::Analyzer a = nest_analyzer(n), ia = window_interior_analyzer(ws);
  const std::string v = fmt::format("x{}", vp.loop.index);
  auto border = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    w.linef("for (int64_t {0} = {1}; {0} < {2}; {0}++)", v, begin, end);
    w.open();
    p.emit_scalar_ops(n, a, [](int) { return true; });
    w.close();
  };
  std::vector<std::string> borders;
  if (ws.begin > 0) borders.push_back(fmt::format("[0, {})", ws.begin));
  if (ws.end < vp.extent) borders.push_back(fmt::format("[{}, {})", ws.end, vp.extent));
  w.linef("// {} in [{}, {}): vectors; {}: the window's border, scalar", v, ws.begin, ws.end,
          fmt::join(borders, " and "));
  border(0, ws.begin);
  w.open();
  emit_hoisted(p, in, ia, vp, v);
  emit_whole_and_tail(
      p, in, v, std::to_string(ws.begin), std::to_string(ws.end), [&](const std::string& count) {
        VecOpPrinter(p, in, ia, vp, count).emit([&](int i) { return !vp.invariant.count(i); });
      });
  w.close();
  border(ws.end, vp.extent);
}

void emit_vec_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  COIL_ASSERT(np.vec.has_value(), "emit_vec_nest on a nest without a vector plan");
  const CppVecPlan& vp = *np.vec;
  const VecLoop& vl = vp.loop;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  size_t x_end = vl.reduction ? n.ranges.size() : vl.index;
  for (size_t i = np.first_loop; i < x_end; ++i) {
    w.linef("for (int64_t x{0} = 0; x{0} < {1}; x{0}++)", i, n.range_text[i]);
    w.open();
  }
  if (vp.window) {
    emit_window_split(p, n, vp);
    for (size_t i = np.first_loop; i < x_end; ++i) w.close();
    return;
  }
  // The vector loop as a main part of whole vectors and a masked tail.
  std::string v = vl.reduction ? fmt::format("r{}", vl.index) : fmt::format("x{}", vl.index);
  const int64_t extent = vp.extent;
  const int64_t lanes = p.plan().lanes, full = extent / lanes * lanes;
  // A symbolic extent (a size-generic module's) is a number only at run time: whole vectors
  // up to its last multiple of the lanes, then the tail when there is one.
  const std::string& extent_text =
      vl.reduction ? n.red_range_text[vl.index] : n.range_text[vl.index];
  const bool symbolic = extent_text != std::to_string(extent);
  auto main_and_tail = [&](const std::function<void(const std::string& count)>& body, bool par) {
    if (symbolic) {
      w.open();
      print_vec_step(p, n, v, "", [&] { body(kStepCount); });
      w.linef("const int64_t vec_end = {} / {} * {};", extent_text, lanes, lanes);
      if (par) w.line("#pragma omp parallel for firstprivate(step)");
      w.linef("for (int64_t {0} = 0; {0} < vec_end; {0} += {1})", v, lanes);
      w.linef("    step({}, {});", v, lanes);
      w.linef("if (vec_end < {0}) step(vec_end, {0} - vec_end);", extent_text);
      w.close();
      return;
    }
    if (full > 0 && extent % lanes != 0) {
      // Whole vectors and a tail: one step, called for both.
      w.open();
      print_vec_step(p, n, v, "", [&] { body(kStepCount); });
      // Each thread its own copy of the step: through the shared one, the loop reloaded the
      // captured pointers after every (may-alias) vector store.
      if (par) w.line("#pragma omp parallel for firstprivate(step)");
      w.linef("for (int64_t {0} = 0; {0} < {1}; {0} += {2})", v, full, lanes);
      w.linef("    step({}, {});", v, lanes);
      w.linef("step({}, {});", full, extent - full);
      w.close();
      return;
    }
    if (full > 0) {
      if (par) w.line("#pragma omp parallel for");
      w.linef("for (int64_t {0} = 0; {0} < {1}; {0} += {2})", v, full, lanes);
      w.open();
      body("");
      w.close();
    }
    if (extent % lanes != 0) {
      w.open();
      w.linef("const int64_t {} = {};", v, full);
      w.linef("const int64_t tail = {};", extent - full);
      body("tail");
      w.close();
    }
  };
  // Scalars and invariants first, once; the loops below print the other ops.
  emit_hoisted(p, n, a, vp, v);
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)] && !vp.invariant.count(i); };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)] && !vp.invariant.count(i); };

  if (n.reductions.empty()) {
    auto body = [&](const std::string& count) { VecOpPrinter(p, n, a, vp, count).emit(inside); };
    if (vp.stream_head_store < 0) {
      main_and_tail(body, np.parallel);
    } else {
      // The streamed output's rows start off the vector alignment: a masked head up to it,
      // then whole vectors that all stream, then the tail.
      w.open();
      print_vec_step(p, n, v, "", [&] { body(kStepCount); });
      w.linef("const int64_t head = coil::stream_head(&{}, {});", stream_head_start(p, n, a, vp),
              extent);
      w.line("if (head > 0) step(0, head);");
      w.linef("int64_t {} = head;", v);
      w.linef("for (; {0} + {1} <= {2}; {0} += {1})", v, lanes, extent);
      w.linef("    step({}, {});", v, lanes);
      w.linef("if ({0} < {1}) step({0}, {1} - {0});", v, extent);
      w.close();
    }
  } else if (vl.reduction) {
    // Horizontal: vector accumulators over the r loops, reduced across lanes at the end.
    auto cascade = [&](size_t k) { return vp.cascade[k]; };
    std::vector<std::string> accs;
    for (size_t k = 0; k < n.reductions.size(); ++k) {
      int red = n.reductions[k];
      accs.push_back(p.new_acc() + "_vec");
      if (cascade(k)) {
        w.linef("coil::CascadeSum<{}> {};", kVec, accs.back());
      } else {
        w.linef("auto {} = {}({});", accs.back(), kVec,
                vec_reduction(n.body.op(red).reduction).init);
      }
    }
    const bool unroll = vp.accumulators > 1;
    auto combine_into = [&](size_t k, const std::string& acc, const std::string& count) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      std::string c = subst(subst(vec_reduction(rop.reduction).combine, "{acc}", acc), "{v}",
                            p.tmp(n, rop.args[0]));
      if (count.empty())
        w.linef("{} = {};", acc, c);
      else
        w.linef("{0} = {1}::set({0}, {2}, {3});", acc, kVec, c, count);
    };
    if (unroll) {
      // The body once, in a loop over the accumulators that the compiler unrolls (so each
      // stays in a register); the whole vectors past the last multiple of the unroll leave it
      // early, the masked tail goes to the first accumulator.
      const int u_count = vp.accumulators;
      const int64_t step = lanes * u_count;
      for (size_t k = 0; k < accs.size(); ++k)
        w.linef("{0} {1}_part[{2}] = {{{3}}};", kVec, accs[k], u_count,
                fmt::join(std::vector<std::string>(static_cast<size_t>(u_count), accs[k]), ", "));
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_range_text[j]);
        w.open();
      }
      // With a tail, one step (accumulator u) serves the whole vectors and the tail.
      const bool tail = extent % lanes != 0;
      if (tail) {
        w.open();
        print_vec_step(p, n, v, ", const int64_t u", [&] {
          VecOpPrinter(p, n, a, vp, kStepCount).emit(inside);
          for (size_t k = 0; k < accs.size(); ++k)
            combine_into(k, accs[k] + "_part[u]", kStepCount);
        });
      }
      w.linef("for (int64_t {0}_base = 0; {0}_base < {1}; {0}_base += {2})", v, full, step);
      w.open();
      w.linef("#pragma GCC unroll {}", u_count);
      w.linef("for (int64_t u = 0; u < {}; u++)", u_count);
      w.open();
      w.linef("const int64_t {0} = {0}_base + {1} * u;", v, lanes);
      if (full % step != 0) w.linef("if ({} >= {}) break;", v, full);
      if (tail) {
        w.linef("step({}, {}, u);", v, lanes);
      } else {
        VecOpPrinter(p, n, a, vp, "").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, accs[k] + "_part[u]", "");
      }
      w.close();
      w.close();
      if (tail) {
        // The tail goes to the first accumulator.
        w.linef("step({}, {}, 0);", full, extent - full);
        w.close();
      }
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
      // Pairwise, in a fixed order: (a0 + a1) + (a2 + a3).
      for (size_t k = 0; k < accs.size(); ++k) {
        const std::string& comb = vec_reduction(n.body.op(n.reductions[k]).reduction).combine;
        auto pair = [&](const std::string& x, const std::string& y) {
          return subst(subst(comb, "{acc}", x), "{v}", y);
        };
        std::vector<std::string> level;
        for (int u = 0; u < u_count; ++u) level.push_back(fmt::format("{}_part[{}]", accs[k], u));
        while (level.size() > 1) {
          std::vector<std::string> next;
          for (size_t i = 0; i + 1 < level.size(); i += 2)
            next.push_back(fmt::format("({})", pair(level[i], level[i + 1])));
          if (level.size() % 2) next.push_back(level.back());
          level = std::move(next);
        }
        w.linef("{} = {};", accs[k], level[0].substr(1, level[0].size() - 2));
      }
    } else {
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_range_text[j]);
        w.open();
      }
      main_and_tail(
          [&](const std::string& count) {
            VecOpPrinter(p, n, a, vp, count).emit(inside);
            for (size_t k = 0; k < accs.size(); ++k) {
              const BodyOp& rop = n.body.op(n.reductions[k]);
              std::string v = p.tmp(n, rop.args[0]);
              if (cascade(k)) {
                if (count.empty())
                  w.linef("{}.add({});", accs[k], v);
                else
                  w.linef("{}.add({}::set({}(0.0f), {}, {}));", accs[k], kVec, kVec, v, count);
                continue;
              }
              combine_into(k, accs[k], count);
            }
          },
          false);
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
    }
    for (size_t k = 0; k < accs.size(); ++k) {
      int red = n.reductions[k];
      std::string acc = cascade(k) ? accs[k] + ".result()" : accs[k];
      w.linef("float {} = {};", p.tmp(n, red),
              subst(vec_reduction(n.body.op(red).reduction).finalize, "{acc}", acc));
    }
    p.emit_scalar_ops(n, a, after);
  } else {
    // Vertical: each lane accumulates its own output over the scalar r loops.
    main_and_tail(
        [&](const std::string& count) {
          std::vector<std::string> accs;
          for (int red : n.reductions) {
            accs.push_back(p.new_acc() + "_vec");
            w.linef("auto {} = {}({});", accs.back(), kVec,
                    vec_reduction(n.body.op(red).reduction).init);
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) {
            w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_range_text[j]);
            w.open();
          }
          VecOpPrinter(p, n, a, vp, count).emit(inside);
          for (size_t k = 0; k < accs.size(); ++k) {
            const BodyOp& rop = n.body.op(n.reductions[k]);
            w.linef("{} = {};", accs[k],
                    subst(subst(vec_reduction(rop.reduction).combine, "{acc}", accs[k]), "{v}",
                          p.tmp(n, rop.args[0])));
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) w.close();
          for (size_t k = 0; k < accs.size(); ++k)
            w.linef("auto {} = {};", p.tmp(n, n.reductions[k]), accs[k]);
          VecOpPrinter(p, n, a, vp, count).emit(after);
        },
        np.parallel);
  }
  for (size_t i = np.first_loop; i < x_end; ++i) w.close();
}

void emit_vec_segment(NestPrinter& p, const Nest& n, const CppNestPlan& np,
                      const std::string& begin, const std::string& end) {
  const CppVecPlan& vp = *np.vec;
  sym::Analyzer a = nest_analyzer(n);
  std::string v = fmt::format("x{}", vp.loop.index);
  auto all = [](int) { return true; };
  emit_whole_and_tail(p, n, v, begin, end, [&](const std::string& count) {
    VecOpPrinter(p, n, a, vp, count).emit(all);
  });
}

}  // namespace coil

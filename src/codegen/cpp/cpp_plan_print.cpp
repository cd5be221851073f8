// COIL_LOGS=plan: the CPU backend's plan of one kernel (cpp_plan.h), one line per decision.
#include <algorithm>

#include <fmt/format.h>

#include "codegen/cpp/cpp_plan.h"
#include "ir/ir.h"

namespace coil {
namespace {

std::string loops_text(const Nest& n, size_t shared) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < n.ranges.size(); ++i)
    parts.push_back(fmt::format("x{} < {}{}", i, n.ranges[i], i < shared ? " (shared)" : ""));
  for (size_t i = 0; i < n.red_ranges.size(); ++i)
    parts.push_back(fmt::format("r{} < {}", i, n.red_ranges[i]));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string vec_text(const CppVecPlan& v, const Nest& n, int lanes) {
  std::string var = fmt::format("{}{}", v.loop.reduction ? "r" : "x", v.loop.index);
  const char* how = v.loop.reduction        ? "horizontal reduction"
                    : !n.reductions.empty() ? "vertical reduction"
                                            : "pointwise";
  std::string s =
      fmt::format("vector loop {} ({}): {} whole vectors of {}", var, how, v.extent / lanes, lanes);
  if (v.window) {
    const int64_t inside = v.window->end - v.window->begin;
    s = fmt::format("vector loop {} ({}): interior [{}, {}) in {} whole vectors of {}", var, how,
                    v.window->begin, v.window->end, inside / lanes, lanes);
    if (inside % lanes) s += fmt::format(" + masked tail of {}", inside % lanes);
    s += ", the window's borders scalar";
  } else if (v.extent % lanes) {
    s += fmt::format(" + masked tail of {}", v.extent % lanes);
  }
  if (!v.scalar.empty()) s += fmt::format("; {} scalar op(s) before the loop", v.scalar.size());
  if (v.loop.reduction) {
    bool cascade = false;
    for (bool c : v.cascade) cascade = cascade || c;
    s += cascade ? "; sums in a coil::CascadeSum"
                 : fmt::format("; {} accumulator(s) per reduction", v.accumulators);
  }
  return s;
}

}  // namespace

std::string nest_label(const Nest& n, const CppNestPlan& np, size_t i) {
  std::string what;
  if (n.reductions.empty()) {
    std::vector<std::string> vars;
    for (size_t k = np.first_loop; k < n.ranges.size(); ++k) vars.push_back(fmt::format("x{}", k));
    what = vars.empty() ? "pointwise" : fmt::format("pointwise over {}", fmt::join(vars, ", "));
  } else {
    std::vector<std::string> reds, vars;
    for (int r : n.reductions) {
      std::string t(reduction_type_name(n.body.op(r).reduction));
      if (std::find(reds.begin(), reds.end(), t) == reds.end()) reds.push_back(t);
    }
    for (size_t k = 0; k < n.red_ranges.size(); ++k) vars.push_back(fmt::format("r{}", k));
    what = fmt::format("{} over {}", fmt::join(reds, " and "), fmt::join(vars, ", "));
  }
  std::string how(cpp_nest_kind_name(np.kind));
  if (np.vec && np.vec->accumulators > 1)
    how += fmt::format(", {} accumulators", np.vec->accumulators);
  return fmt::format("nest {}: {} ({}): {}", i, what, how, fmt::join(np.origins, ", "));
}

std::string to_string(const CppKernelPlan& plan, const IrProgram& program,
                      const std::string& kernel_name) {
  std::string s =
      fmt::format("kernel {}: {} nest(s), {} lanes", kernel_name, plan.nests.size(), plan.lanes);
  if (plan.outer_depth > 0)
    s += fmt::format(", {} shared outer loop(s), {} opened by the kernel, parallel depth {}",
                     plan.outer_depth, plan.shared_loops, plan.parallel_depth);
  s += "\n";
  if (!plan.locals.empty()) {
    std::vector<std::string> l;
    for (const CppLocalBuffer& b : plan.locals)
      l.push_back(fmt::format("{} {}[{}]", b.name, dtype_name(b.dtype), b.elements));
    s += fmt::format("  local rows ({}): {}\n", plan.heap_locals ? "per-thread heap" : "stack",
                     fmt::join(l, ", "));
  }
  for (const CppWidenedInput& w : plan.widened)
    s += fmt::format("  widened once per call: {} ({}[{}], read {}x per element)\n", w.arg,
                     dtype_name(w.dtype), w.elements, w.reads / w.elements);
  for (const PackedOperand& po : plan.packed)
    s += fmt::format("  packed at load time: {} ({})\n", program.buffer(po.buffer).name, po.param);
  auto nest_lines = [&](const char* title, const Nest& n, const CppNestPlan& np) {
    s += fmt::format("  {}: {}", title, cpp_nest_kind_name(np.kind));
    if (!np.origins.empty()) s += fmt::format(" [{}]", fmt::join(np.origins, ", "));
    s += "\n";
    s += fmt::format("    loops: {}{}\n", loops_text(n, np.first_loop),
                     np.parallel ? "; its first loop is the parallel one" : "");
    std::vector<std::string> reds;
    for (int r : n.reductions)
      reds.push_back(std::string(reduction_type_name(n.body.op(r).reduction)));
    if (!reds.empty()) s += fmt::format("    reductions: {}\n", fmt::join(reds, ", "));
    if (np.vec) {
      const CppVecPlan& v = *np.vec;
      s += fmt::format("    {}\n", vec_text(v, n, plan.lanes));
      for (const auto& [op, ahead] : v.prefetch)
        s += fmt::format("    prefetch: tmp{} {} elements ahead\n", n.tmp_base + op, ahead);
      for (int op : v.streamed)
        s += fmt::format("    streaming store: {}{}\n", program.buffer(n.body.op(op).buffer).name,
                         op == v.stream_head_store ? " (masked head up to the alignment)" : "");
      if (!v.invariant.empty()) {
        std::vector<std::string> inv;
        for (int op : v.invariant) inv.push_back(fmt::format("tmp{}", n.tmp_base + op));
        s += fmt::format("    hoisted out of the vector loop: {}\n", fmt::join(inv, ", "));
      }
    }
    if (np.kind == CppNestKind::Tile2D) {
      s += fmt::format(
          "    tiles {0}x{0}, {1} transposed operand(s){2}{3}\n", plan.lanes, np.tile.tiles.size(),
          np.tile.blocked ? fmt::format(", blocks of {}x{}", np.tile.block_rows, np.tile.block_cols)
                          : "",
          np.tile.whole_tiles ? ", whole tiles only" : ", masked edge tiles");
    }
    if (np.kind == CppNestKind::RowSplit)
      s += fmt::format("    rows in {} chunks of {}, combined in chunk order\n",
                       np.row_split.chunks, np.row_split.rows_per_chunk);
    if (np.kind == CppNestKind::SplitReduction)
      s += fmt::format("    r0 in {} chunks of {}, combined in a fixed order\n", np.split.chunks,
                       np.split.chunk);
  };
  for (size_t i = 0; i < plan.nests.size(); ++i)
    nest_lines(fmt::format("nest {}", i).c_str(), plan.nests[i], plan.nest_plans[i]);
  if (plan.epilogue) nest_lines("epilogue on each tile row", *plan.epilogue, plan.epilogue_plan);
  if (plan.stream_fence) s += "  ends with coil::stream_fence()\n";
  return s;
}

}  // namespace coil

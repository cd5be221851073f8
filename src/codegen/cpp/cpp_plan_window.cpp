// The interior split of a padded window (cpp_plan.h: plan_window_split). A padded pooling
// window loads each tap at an index clamped into the input and masks the taps that fall in the
// padding with a select on "inside the input" tests: int64 index arithmetic and bool ops that
// have no vector form. But along the innermost output loop those tests change value only near
// the two ends: in between (the interior), every tap is inside, the masks are true, and the
// clamps are identities. So the loop splits into scalar borders that run the body as it is and
// an interior that runs a folded body (masks and clamps gone), which CppVecKernel vectorizes.
// The folded body computes the same values as the original at every interior position (each
// fold is proved with the interior's range), so the results are bitwise the same.
#include <algorithm>

#include "codegen/cpp/cpp_plan.h"
#include "ir/ir.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

/// The fewest interior iterations worth a vector loop.
constexpr int64_t kMinInterior = 2;

bool is_comparison(LoopOp op) {
  return op == LoopOp::ge || op == LoopOp::gt || op == LoopOp::le || op == LoopOp::lt;
}

/// The expression d of comparison `op` of two index_exprs such that the comparison holds
/// exactly when d >= 0; undefined when its operands are not index_exprs.
sym::Expr nonnegative_form(const LoopBody& b, const BodyOp& op) {
  const BodyOp &l = b.op(op.args[0]), &r = b.op(op.args[1]);
  if (l.op != LoopOp::index_expr || r.op != LoopOp::index_expr) return sym::Expr();
  switch (op.op) {
    case LoopOp::ge:
      return l.index - r.index;
    case LoopOp::gt:
      return l.index - r.index - sym::Expr(1);
    case LoopOp::le:
      return r.index - l.index;
    case LoopOp::lt:
      return r.index - l.index - sym::Expr(1);
    default:
      return sym::Expr();
  }
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/// The known value of bool op `i` of `b` (a constant), or -1.
int known_bool(const LoopBody& b, int i) {
  const BodyOp& op = b.op(i);
  if (op.op != LoopOp::constant || op.dtype != DType::Bool) return -1;
  return op.ivalue != 0 ? 1 : 0;
}

/// `body` at the positions where `a` holds: indices simplified, the comparisons that `a`
/// decides replaced by constants, and the logical ops and selects over those resolved; the
/// ops no store needs any more are dropped.
LoopBody fold_body(const LoopBody& body, const sym::Analyzer& a) {
  LoopBody folded;
  std::vector<int> remap;
  for (BodyOp op : body.ops()) {
    for (int& arg : op.args)
      if (arg >= 0) arg = remap[static_cast<size_t>(arg)];
    if (op.op == LoopOp::load || op.op == LoopOp::store || op.op == LoopOp::index_expr)
      op.index = a.simplify(op.index);
    int value = -1;
    if (is_comparison(op.op)) {
      if (sym::Expr d = nonnegative_form(folded, op); d.defined()) {
        const sym::Range r = a.bounds(a.simplify(d));
        if (r.lo != sym::Range::kNegInf && r.lo >= 0) value = 1;
        if (r.hi != sym::Range::kPosInf && r.hi < 0) value = 0;
      }
    }
    if (value >= 0) {
      remap.push_back(folded.constant(value, DType::Bool));
      continue;
    }
    if (op.op == LoopOp::logical_and || op.op == LoopOp::logical_or) {
      // x && true = x, x && false = false; x || false = x, x || true = true.
      const int neutral = op.op == LoopOp::logical_and ? 1 : 0;
      const int k0 = known_bool(folded, op.args[0]), k1 = known_bool(folded, op.args[1]);
      if (k0 == neutral || k1 == neutral) {
        remap.push_back(k0 == neutral ? op.args[1] : op.args[0]);
        continue;
      }
      if (k0 >= 0 || k1 >= 0) {
        remap.push_back(folded.constant(1 - neutral, DType::Bool));
        continue;
      }
    }
    if (op.op == LoopOp::where) {
      if (int k = known_bool(folded, op.args[0]); k >= 0) {
        remap.push_back(op.args[k == 1 ? 1 : 2]);
        continue;
      }
    }
    remap.push_back(folded.append(std::move(op)));
  }
  // Only what the stores read.
  const std::vector<BodyOp>& ops = folded.ops();
  std::vector<bool> live(ops.size(), false);
  for (size_t i = ops.size(); i-- > 0;) {
    if (ops[i].op == LoopOp::store) live[i] = true;
    if (!live[i]) continue;
    for (int arg : ops[i].args)
      if (arg >= 0) live[static_cast<size_t>(arg)] = true;
  }
  LoopBody out;
  std::vector<int> kept(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!live[i]) continue;
    BodyOp op = ops[i];
    for (int& arg : op.args)
      if (arg >= 0) arg = kept[static_cast<size_t>(arg)];
    kept[i] = out.append(std::move(op));
  }
  return out;
}

}  // namespace

sym::Analyzer window_interior_analyzer(const CppWindowSplit& w) {
  sym::Analyzer a = nest_analyzer(w.interior);
  a.bind(loop_var(static_cast<int>(w.loop)), w.begin, w.end - 1);
  return a;
}

Layout layout_at_hints(Layout l) {
  for (sym::Expr& d : l.sizes) d = sym::at_hints(d);
  for (sym::Expr& d : l.strides) d = sym::at_hints(d);
  return l;
}

std::optional<CppWindowSplit> plan_window_split(const Nest& n, size_t first_loop, int lanes) {
  if (lanes < 2 || !n.reductions.empty() || n.ranges.empty()) return std::nullopt;
  const size_t xi = n.ranges.size() - 1;
  const int64_t extent = n.ranges[xi];
  if (xi < first_loop) return std::nullopt;
  // Not in a size-generic module: its analyzer knows a symbolic loop's extent only at the hint,
  // and the interior and the folds must hold for every size.
  for (size_t i = 0; i < n.ranges.size(); ++i)
    if (n.range_text[i] != std::to_string(n.ranges[i])) return std::nullopt;
  for (const BodyOp& op : n.body.ops())
    if (is_indirect_load(op)) return std::nullopt;
  const sym::Analyzer a = nest_analyzer(n);
  const sym::Expr x = loop_var(static_cast<int>(xi));
  // Each comparison d >= 0 with d = s*x + rest (s a nonzero constant) holds for every value of
  // the rest (its lower bound lo) where s*x + lo >= 0: x >= ceil(-lo / s) for s > 0, x <=
  // floor(lo / -s) for s < 0. The interior is where all of them hold.
  int64_t begin = 0, end = extent;
  bool bounded = false;
  for (const BodyOp& op : n.body.ops()) {
    if (!is_comparison(op.op)) continue;
    sym::Expr d = nonnegative_form(n.body, op);
    if (!d.defined()) continue;
    d = a.simplify(d);
    if (!sym::depends_on(d, x)) continue;
    auto stride = a.linear_stride(d, x);
    const int64_t s = stride ? stride->as_const().value_or(0) : 0;
    if (s == 0) return std::nullopt;
    const sym::Range rest = a.bounds(a.simplify(sym::substitute(d, {{x, sym::Expr(0)}})));
    if (rest.lo == sym::Range::kNegInf) return std::nullopt;
    if (s > 0) {
      begin = std::max(begin, -floor_div(rest.lo, s));
    } else {
      end = std::min(end, floor_div(rest.lo, -s) + 1);
    }
    bounded = true;
  }
  // One masked vector step still beats a few scalar iterations of a body full of masks.
  if (!bounded || end - begin < kMinInterior) return std::nullopt;
  CppWindowSplit w;
  w.interior = n;
  w.loop = xi;
  w.begin = begin;
  w.end = end;
  w.interior.body = fold_body(n.body, window_interior_analyzer(w));
  w.interior.after.assign(w.interior.body.ops().size(), false);
  // Vectorized along x, with no test of x left in the body.
  auto vl = choose_vec_loop(w.interior, first_loop, lanes, /*scalar_ops=*/true, /*masks=*/true);
  if (!vl || vl->reduction || vl->index != xi) return std::nullopt;
  return w;
}

}  // namespace coil

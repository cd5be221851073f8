// Bounds by interval arithmetic, the statically_known_* proofs, divisibility, strides, and the
// memoising driver of simplify (the rules themselves are in simplify_rules.cpp).
#include "sym/analyzer.h"

#include <algorithm>
#include <numeric>

#include "support/check.h"
#include "sym/canonical.h"

namespace coil::sym {
namespace {

constexpr int64_t kNegInf = Range::kNegInf;
constexpr int64_t kPosInf = Range::kPosInf;
constexpr int kMaxDepth = 1000;

bool is_inf(int64_t v) {
  return v == kNegInf || v == kPosInf;
}

// Endpoint arithmetic saturates: an infinite operand or an overflow yields `unbounded`, so a
// bound can only ever widen, never wrap into a wrong finite value.
int64_t add_endpoint(int64_t a, int64_t b, int64_t unbounded) {
  int64_t r;
  if (is_inf(a) || is_inf(b) || __builtin_add_overflow(a, b, &r)) return unbounded;
  return r;
}

// The product of two endpoints as a limit: 0 * inf is 0 (the interval holds only 0 there).
int64_t mul_endpoint(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  int64_t r;
  if (is_inf(a) || is_inf(b) || __builtin_mul_overflow(a, b, &r)) {
    return (a < 0) == (b < 0) ? kPosInf : kNegInf;
  }
  return r;
}

// floor(a / b) for b >= 1 as a limit; b = +inf sends a finite a to 0 or -1.
int64_t div_endpoint(int64_t a, int64_t b) {
  if (is_inf(a)) return a;
  if (b == kPosInf) return a >= 0 ? 0 : -1;
  return detail::floor_div(a, b);
}

// A lower end of +inf or an upper end of -inf only arises from overflow; give up on that end.
Range normalized(Range r) {
  if (r.lo == kPosInf) r.lo = kNegInf;
  if (r.hi == kNegInf) r.hi = kPosInf;
  return r;
}

Range add_ranges(Range a, Range b) {
  return {add_endpoint(a.lo, b.lo, kNegInf), add_endpoint(a.hi, b.hi, kPosInf)};
}

Range mul_ranges(Range a, Range b) {
  int64_t p[] = {mul_endpoint(a.lo, b.lo), mul_endpoint(a.lo, b.hi), mul_endpoint(a.hi, b.lo),
                 mul_endpoint(a.hi, b.hi)};
  return normalized({*std::min_element(p, p + 4), *std::max_element(p, p + 4)});
}

// floor(a / b) is monotone in a and in b (b > 0), so the extremes are at the corners.
Range div_ranges(Range a, Range b) {
  b.lo = std::max<int64_t>(b.lo, 1);  // divisors are positive by contract
  int64_t p[] = {div_endpoint(a.lo, b.lo), div_endpoint(a.lo, b.hi), div_endpoint(a.hi, b.lo),
                 div_endpoint(a.hi, b.hi)};
  return normalized({*std::min_element(p, p + 4), *std::max_element(p, p + 4)});
}

Range mod_ranges(Range a, Range b) {
  b.lo = std::max<int64_t>(b.lo, 1);
  if (b.is_constant() && !is_inf(a.lo) && !is_inf(a.hi) &&
      detail::floor_div(a.lo, b.lo) == detail::floor_div(a.hi, b.lo)) {
    return {detail::floor_mod(a.lo, b.lo), detail::floor_mod(a.hi, b.lo)};  // one period
  }
  if (a.lo >= 0 && a.hi < b.lo) return a;
  Range r{0, b.hi == kPosInf ? kPosInf : b.hi - 1};
  if (a.lo >= 0) r.hi = std::min(r.hi, a.hi);
  return r;
}

// Enforces that rule and bound recursion terminate even if a rule set ever cycles.
class DepthGuard {
 public:
  explicit DepthGuard(int& depth, const Expr& e) : depth_(depth) {
    if (++depth_ >= kMaxDepth) {
      std::string text = to_string(e);
      if (text.size() > 300)
        text = text.substr(0, 300) + "... (" + std::to_string(text.size()) + " characters)";
      COIL_ASSERT(false, "simplify/bounds recursion too deep at {}", text);
    }
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

}  // namespace

void Analyzer::invalidate() {
  bounds_memo_.clear();
  simplify_memo_.clear();
}

void Analyzer::bind(const Expr& symbol, int64_t lo, int64_t hi) {
  COIL_ASSERT(symbol.is_symbol(), "bind: {} is not a symbol", to_string(symbol));
  COIL_ASSERT(lo <= hi, "bind: empty range [{}, {}] for {}", lo, hi, to_string(symbol));
  ranges_[symbol] = Range{lo, hi};
  loop_extents_.erase(symbol);
  invalidate();
}

void Analyzer::bind_loop_var(const Expr& var, const Expr& extent) {
  COIL_ASSERT(var.is_symbol(), "bind_loop_var: {} is not a symbol", to_string(var));
  COIL_ASSERT(!depends_on(extent, var), "bind_loop_var: extent {} of {} depends on it",
              to_string(extent), to_string(var));
  // The range of var is derived from the extent when asked (compute_bounds), so a later bind of
  // a size in the extent is seen.
  ranges_.erase(var);
  loop_extents_[var] = extent;
  symbolic_extents_ |= !extent.is_const();
  invalidate();
}

Range Analyzer::bounds(const Expr& e) const {
  if (auto c = e.as_const()) return {*c, *c};
  if (auto it = bounds_memo_.find(e); it != bounds_memo_.end()) return it->second;
  DepthGuard guard(depth_, e);
  Range r = compute_bounds(e);
  bounds_memo_.emplace(e, r);
  return r;
}

Range Analyzer::compute_bounds(const Expr& e) const {
  auto ops = e.operands();
  auto fold = [&](Range (*combine)(Range, Range)) {
    Range r = bounds(ops[0]);
    for (size_t i = 1; i < ops.size(); ++i) r = combine(r, bounds(ops[i]));
    return r;
  };
  switch (e.kind()) {
    case ExprKind::Const:
      return {e.const_value(), e.const_value()};
    case ExprKind::Symbol: {
      if (auto it = loop_extents_.find(e); it != loop_extents_.end()) {
        // An extent that may be 0 gives an empty loop: any claim about var holds vacuously.
        int64_t hi = bounds(it->second).hi;
        return {0, hi == kPosInf ? kPosInf : std::max<int64_t>(hi - 1, 0)};
      }
      auto it = ranges_.find(e);
      return it == ranges_.end() ? Range{} : it->second;
    }
    case ExprKind::Add: {
      Range r = fold(add_ranges);
      // Intervals forget that x0 < s0; the symbolic bounds remember (s0 - x0 >= 1).
      if (symbolic_extents_) {
        if (auto lo = symbolic_bound(e, false); lo && *lo != e)
          r.lo = std::max(r.lo, bounds(*lo).lo);
        if (auto hi = symbolic_bound(e, true); hi && *hi != e)
          r.hi = std::min(r.hi, bounds(*hi).hi);
      }
      return r;
    }
    case ExprKind::Mul:
      return fold(mul_ranges);
    case ExprKind::FloorDiv:
      return div_ranges(bounds(ops[0]), bounds(ops[1]));
    case ExprKind::Mod:
      return mod_ranges(bounds(ops[0]), bounds(ops[1]));
    case ExprKind::Min:
      return fold([](Range a, Range b) {
        return Range{std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
      });
    case ExprKind::Max:
      return fold([](Range a, Range b) {
        return Range{std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
      });
  }
  COIL_UNREACHABLE("bounds: bad expression kind {}", static_cast<int>(e.kind()));
}

std::optional<Expr> Analyzer::symbolic_bound(const Expr& e, bool upper) const {
  auto ops = e.operands();
  switch (e.kind()) {
    case ExprKind::Const:
      return e;
    case ExprKind::Symbol: {
      auto it = loop_extents_.find(e);
      if (it == loop_extents_.end()) return e;
      return upper ? it->second - 1 : make_const(0);
    }
    case ExprKind::Add: {
      Expr total = make_const(0);
      for (const Expr& op : ops) {
        auto b = symbolic_bound(op, upper);
        if (!b) return std::nullopt;
        total = total + *b;
      }
      return total;
    }
    case ExprKind::Mul: {
      // c*f1*f2 is monotone in each factor when the others are >= 0; a negative c flips the side.
      detail::Term term = detail::split_term(e);
      auto factors = detail::factors_of(term.body);
      const bool side = (term.coef >= 0) == upper;
      Expr result = make_const(term.coef);
      for (const Expr& f : factors) {
        auto b = symbolic_bound(f, side);
        if (!b) return std::nullopt;
        if (factors.size() > 1 && (bounds(f).lo < 0 || (!side && bounds(*b).lo < 0))) {
          return std::nullopt;
        }
        result = result * *b;
      }
      return result;
    }
    case ExprKind::FloorDiv: {
      // Monotone in the dividend for a fixed divisor; a divisor with loop variables is not fixed.
      auto divisor = symbolic_bound(ops[1], upper);
      auto dividend = symbolic_bound(ops[0], upper);
      if (!divisor || *divisor != ops[1] || !dividend) return std::nullopt;
      return floordiv(*dividend, ops[1]);
    }
    case ExprKind::Mod: {
      if (!upper) return make_const(0);
      auto divisor = symbolic_bound(ops[1], true);
      if (!divisor) return std::nullopt;
      return *divisor - 1;
    }
    case ExprKind::Min:
    case ExprKind::Max: {
      std::optional<Expr> acc;
      for (const Expr& op : ops) {
        auto b = symbolic_bound(op, upper);
        if (!b) return std::nullopt;
        acc = !acc ? *b : (e.kind() == ExprKind::Min ? min(*acc, *b) : max(*acc, *b));
      }
      return acc;
    }
  }
  return std::nullopt;
}

bool Analyzer::proves_leq(const Expr& a, const Expr& b) const {
  return a == b || bounds(b - a).lo >= 0;
}

int64_t Analyzer::known_divisor(const Expr& e, int64_t m) const {
  auto ops = e.operands();
  auto gcd_of_ops = [&] {
    int64_t g = m;
    for (const Expr& op : ops) {
      g = std::gcd(g, known_divisor(op, m));
      if (g == 1) break;
    }
    return g;
  };
  switch (e.kind()) {
    case ExprKind::Const:
      return e.const_value() == 0 ? m : std::gcd(e.const_value(), m);
    case ExprKind::Symbol: {
      Range r = bounds(e);
      return r.is_constant() ? known_divisor(make_const(r.lo), m) : 1;
    }
    case ExprKind::Mul: {
      // If g1 | a and g2 | b then g1*g2 | a*b; both divide m, so the product fits in 128 bits.
      __int128 g = 1;
      for (const Expr& op : ops) {
        g = std::gcd(static_cast<int64_t>(g * known_divisor(op, m) % m), m);
        if (g == m) break;
      }
      return static_cast<int64_t>(g);
    }
    case ExprKind::Add:
    case ExprKind::Min:
    case ExprKind::Max:
    case ExprKind::Mod:  // a % b = a - b*(a // b): divisible when a and b are
      return gcd_of_ops();
    case ExprKind::FloorDiv:
      return 1;
  }
  return 1;
}

bool Analyzer::statically_known_equal(const Expr& a, const Expr& b) const {
  if (a == b) return true;
  Range r = bounds(simplify(a - b));
  return r.lo == 0 && r.hi == 0;
}

bool Analyzer::statically_known_leq(const Expr& a, const Expr& b) const {
  return a == b || bounds(simplify(b - a)).lo >= 0;
}

bool Analyzer::statically_known_lt(const Expr& a, const Expr& b) const {
  Range r = bounds(simplify(b - a));
  return r.lo >= 1;
}

bool Analyzer::statically_known_nonnegative(const Expr& e) const {
  return bounds(simplify(e)).lo >= 0;
}

bool Analyzer::statically_known_multiple_of(const Expr& e, int64_t m) const {
  COIL_ASSERT(m != INT64_MIN, "multiple_of: modulus out of range");
  if (m == 0) return statically_known_equal(e, 0);
  m = m < 0 ? -m : m;
  if (m == 1) return true;
  Expr s = simplify(e);
  Range r = bounds(s);
  return (r.lo == 0 && r.hi == 0) || known_divisor(s, m) == m;
}

Expr Analyzer::simplify(const Expr& e) const {
  if (e.is_const()) return e;
  if (auto it = simplify_memo_.find(e); it != simplify_memo_.end()) return it->second;
  DepthGuard guard(depth_, e);
  // Bottom-up: simplify the operands, rebuild, then rewrite at the root until no rule applies
  // (a rule's result is simplified again, through the memo).
  Expr node = e;
  if (!e.operands().empty()) {
    std::vector<Expr> ops;
    bool changed = false;
    for (const Expr& op : e.operands()) {
      ops.push_back(simplify(op));
      changed |= ops.back() != op;
    }
    if (changed) node = detail::rebuild(e.kind(), ops);
  }
  Expr result = node;
  if (node != e) {
    result = simplify(node);  // canonicalization may have built new operands: start over
  } else if (auto rewritten = rewrite_root(node); rewritten && *rewritten != node) {
    result = simplify(*rewritten);
  }
  simplify_memo_.emplace(e, result);
  return result;
}

std::optional<Expr> Analyzer::linear_stride(const Expr& e, const Expr& var) const {
  Expr coef = make_const(0);
  const Expr s = simplify(e);  // named: terms_of returns a view into it
  for (const Expr& term : detail::terms_of(s)) {
    if (!depends_on(term, var)) continue;
    detail::Term t = detail::split_term(term);
    std::vector<Expr> others;
    int occurrences = 0;
    for (const Expr& f : detail::factors_of(t.body)) {
      if (f == var) {
        ++occurrences;
      } else if (depends_on(f, var)) {
        return std::nullopt;  // var inside a quotient, remainder, min or max
      } else {
        others.push_back(f);
      }
    }
    if (occurrences != 1) return std::nullopt;
    coef = coef + make_const(t.coef) * detail::product(others);
  }
  return simplify(coef);
}

std::optional<Expr> Analyzer::stride(const Expr& e, const Expr& var) const {
  Expr s = simplify(e);
  Expr next = simplify(substitute(s, {{var, var + 1}}));
  Expr diff = simplify(next - s);
  if (depends_on(diff, var)) return std::nullopt;
  return diff;
}

}  // namespace coil::sym

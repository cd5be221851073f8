// The range-aware rewrite rules of Analyzer::simplify, as data: one rule per line, grouped by
// the kind of the root they rewrite (Halide's Simplify_*.cpp in one table).
//
// A rule is either a pattern over wildcards (symbols named `?x`, matching any subexpression) with
// a replacement and an optional side condition, or a named procedure for rules on n-ary sums that
// a fixed pattern cannot express. The driver (Analyzer::simplify) simplifies the operands first
// and applies the first rule that fires at the root, then simplifies the result again, so every
// rule must make the expression strictly simpler.
//
// Soundness: FloorDiv/Mod divisors are positive by contract; every other condition is checked
// here through the analyzer's ranges.
#include <algorithm>
#include <numeric>

#include "sym/analyzer.h"
#include "sym/canonical.h"

namespace coil::sym {

using detail::split_term;
using detail::sum;
using detail::terms_of;

/// What a rule may ask of the analyzer (only range queries that never call simplify).
class RuleContext {
 public:
  explicit RuleContext(const Analyzer& a) : a_(a) {}
  Range bounds(const Expr& e) const { return a_.bounds(e); }
  bool nonneg(const Expr& e) const { return a_.bounds(e).lo >= 0; }
  bool leq(const Expr& a, const Expr& b) const { return a_.proves_leq(a, b); }
  bool lt(const Expr& a, const Expr& b) const { return a_.proves_leq(a + 1, b); }
  /// 0 <= x < n: x is its own remainder modulo n and has quotient 0.
  bool in_period(const Expr& x, const Expr& n) const { return nonneg(x) && lt(x, n); }
  int64_t divisor(const Expr& e, int64_t m) const { return a_.known_divisor(e, m); }

 private:
  const Analyzer& a_;
};

namespace {

using Bindings = std::map<Expr, Expr>;
struct Match {
  const RuleContext& cx;
  const Bindings& v;
  const Expr& operator[](const Expr& wildcard) const { return v.at(wildcard); }
};
using Condition = bool (*)(const Match&);
using Procedure = std::optional<Expr> (*)(const Expr&, const RuleContext&);

struct Rule {
  std::optional<ExprKind> root;  // nullopt: any kind
  Expr pattern, replacement;     // a pattern rule ...
  Condition when = nullptr;
  Procedure apply = nullptr;  // ... or a procedure
  const char* doc = "";       // a procedure's rewrite, as text
};

Rule rewrite(const Expr& pattern, const Expr& replacement, Condition when = nullptr) {
  return Rule{pattern.kind(), pattern, replacement, when, nullptr, ""};
}
Rule procedure(std::optional<ExprKind> root, const char* doc, Procedure apply) {
  return Rule{root, {}, {}, nullptr, apply, doc};
}

bool match(const Expr& p, const Expr& e, Bindings& v) {
  if (p.is_symbol() && p.symbol_name()[0] == '?') {
    auto [it, inserted] = v.emplace(p, e);
    return inserted || it->second == e;
  }
  if (p.kind() != e.kind() || p.operands().size() != e.operands().size()) return false;
  if (p.operands().empty()) return p == e;
  for (size_t i = 0; i < p.operands().size(); ++i) {
    if (!match(p.operands()[i], e.operands()[i], v)) return false;
  }
  return true;
}

// --- Helpers for the rules over sums ----------------------------------------------------------

/// term / d when d divides term structurally: 12*x*s0 / 4*s0 -> 3*x; 6 / 3 -> 2.
std::optional<Expr> exact_quotient(const Expr& term, const Expr& d) {
  detail::Term t = split_term(term), q = split_term(d);
  if (q.coef == 0 || t.coef % q.coef != 0) return std::nullopt;
  auto factors = detail::factors_of(t.body);
  std::vector<Expr> rest(factors.begin(), factors.end());
  if (!q.body.is_const()) {
    for (const Expr& f : detail::factors_of(q.body)) {
      auto it = std::find(rest.begin(), rest.end(), f);
      if (it == rest.end()) return std::nullopt;
      rest.erase(it);
    }
  }
  if (t.body.is_const()) rest.clear();
  return make_const(t.coef / q.coef) * detail::product(rest);
}

/// Splits the terms of a dividend into quotients of terms divisible by d, and the rest.
struct ExactSplit {
  std::vector<Expr> quotients, rest;
};
ExactSplit split_exact(const Expr& dividend, const Expr& d) {
  ExactSplit s;
  for (const Expr& t : terms_of(dividend)) {
    // A constant splits into its quotient and remainder: (x + 13) // 4 -> 3 + (x + 1) // 4.
    if (t.is_const() && d.is_const()) {
      int64_t q = detail::floor_div(t.const_value(), d.const_value());
      int64_t r = detail::floor_mod(t.const_value(), d.const_value());
      if (q != 0) s.quotients.push_back(make_const(q));
      if (r != 0) s.rest.push_back(make_const(r));
    } else if (auto q = exact_quotient(t, d)) {
      s.quotients.push_back(*q);
    } else {
      s.rest.push_back(t);
    }
  }
  return s;
}

/// The gcd g > 1 of a constant divisor c and every constant coefficient of the dividend.
std::optional<int64_t> common_factor(const Expr& dividend, const Expr& divisor) {
  auto c = divisor.as_const();
  if (!c) return std::nullopt;
  int64_t g = *c;
  for (const Expr& t : terms_of(dividend)) g = std::gcd(g, split_term(t).coef);
  return g > 1 ? std::optional<int64_t>(g) : std::nullopt;
}

Expr divide_coefficients(const Expr& e, int64_t g) {
  Expr total = make_const(0);
  for (const Expr& t : terms_of(e)) {
    detail::Term s = split_term(t);
    total = total + detail::make_term(s.coef / g, s.body);
  }
  return total;
}

/// dividend = t + r with every term of t a multiple of g, g | c and 0 <= r < g; then
/// (t + r) // c == t // c and (t + r) % c == t % c + r. Tries the largest g first.
struct RemainderSplit {
  Expr multiple, remainder;
};
std::optional<RemainderSplit> split_remainder(const Expr& dividend, const Expr& divisor,
                                              const RuleContext& cx) {
  auto c = divisor.as_const();
  auto ts = terms_of(dividend);
  if (!c || ts.size() < 2) return std::nullopt;
  std::vector<int64_t> divs, candidates;
  for (const Expr& t : ts) divs.push_back(cx.divisor(t, *c));
  for (int64_t d : divs) {
    if (d > 1) candidates.push_back(d);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (int64_t g : candidates) {
    std::vector<Expr> multiple, remainder;
    for (size_t i = 0; i < ts.size(); ++i)
      (divs[i] % g == 0 ? multiple : remainder).push_back(ts[i]);
    if (multiple.empty() || remainder.empty()) continue;
    Expr r = sum(remainder);
    if (Range b = cx.bounds(r); b.lo >= 0 && b.hi < g) return RemainderSplit{sum(multiple), r};
  }
  return std::nullopt;
}

/// Splits a term as cofactor * f where f is its first factor of `kind`.
std::optional<std::pair<Expr, Expr>> split_factor(const Expr& term, ExprKind kind) {
  detail::Term t = split_term(term);
  auto fs = detail::factors_of(t.body);
  for (size_t i = 0; i < fs.size(); ++i) {
    if (fs[i].kind() != kind) continue;
    std::vector<Expr> others(fs.begin(), fs.end());
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    return std::pair{make_const(t.coef) * detail::product(others), fs[i]};
  }
  return std::nullopt;
}

/// Replaces terms i and j of a sum by `merged`.
Expr replace_two(std::span<const Expr> ts, size_t i, size_t j, const Expr& merged) {
  Expr total = merged;
  for (size_t k = 0; k < ts.size(); ++k) {
    if (k != i && k != j) total = total + ts[k];
  }
  return total;
}

// --- Procedures -------------------------------------------------------------------------------

std::optional<Expr> fold_constant_range(const Expr& e, const RuleContext& cx) {
  Range r = cx.bounds(e);
  return r.is_constant() ? std::optional<Expr>(make_const(r.lo)) : std::nullopt;
}

// k*a*(x // a) + k*(x % a) -> k*x, and k*a*((x // a) % b) + k*(x % a) -> k*(x % (a*b)):
// reassembles an index that a view split into quotient and remainder.
std::optional<Expr> merge_quotient_remainder(const Expr& e, const RuleContext&) {
  auto ts = e.operands();
  for (size_t i = 0; i < ts.size(); ++i) {
    auto km = split_factor(ts[i], ExprKind::Mod);
    if (!km) continue;
    const auto& [k, m] = *km;
    const Expr &x = m.operands()[0], &a = m.operands()[1];
    const Expr quotient = floordiv(x, a);
    for (size_t j = 0; j < ts.size(); ++j) {
      if (j == i) continue;
      if (ts[j] == k * a * quotient) return replace_two(ts, i, j, k * x);
      auto km2 = split_factor(ts[j], ExprKind::Mod);
      if (km2 && km2->first == k * a && km2->second.operands()[0] == quotient) {
        return replace_two(ts, i, j, k * mod(x, a * km2->second.operands()[1]));
      }
    }
  }
  return std::nullopt;
}

std::optional<Expr> div_exact_terms(const Expr& e, const RuleContext&) {
  ExactSplit s = split_exact(e.operands()[0], e.operands()[1]);
  if (s.quotients.empty()) return std::nullopt;
  return sum(s.quotients) + floordiv(sum(s.rest), e.operands()[1]);
}

std::optional<Expr> mod_exact_terms(const Expr& e, const RuleContext&) {
  ExactSplit s = split_exact(e.operands()[0], e.operands()[1]);
  if (s.quotients.empty()) return std::nullopt;
  return mod(sum(s.rest), e.operands()[1]);
}

std::optional<Expr> div_common_factor(const Expr& e, const RuleContext&) {
  auto g = common_factor(e.operands()[0], e.operands()[1]);
  if (!g) return std::nullopt;
  return floordiv(divide_coefficients(e.operands()[0], *g), e.operands()[1].const_value() / *g);
}

std::optional<Expr> mod_common_factor(const Expr& e, const RuleContext&) {
  auto g = common_factor(e.operands()[0], e.operands()[1]);
  if (!g) return std::nullopt;
  return *g * mod(divide_coefficients(e.operands()[0], *g), e.operands()[1].const_value() / *g);
}

std::optional<Expr> div_drop_remainder(const Expr& e, const RuleContext& cx) {
  auto s = split_remainder(e.operands()[0], e.operands()[1], cx);
  if (!s) return std::nullopt;
  return floordiv(s->multiple, e.operands()[1]);
}

std::optional<Expr> mod_split_remainder(const Expr& e, const RuleContext& cx) {
  auto s = split_remainder(e.operands()[0], e.operands()[1], cx);
  if (!s) return std::nullopt;
  return mod(s->multiple, e.operands()[1]) + s->remainder;
}

// x % c -> x - k*c when the whole range of x lies in [k*c, (k+1)*c).
std::optional<Expr> mod_one_period(const Expr& e, const RuleContext& cx) {
  const Expr& x = e.operands()[0];
  auto c = e.operands()[1].as_const();
  Range r = cx.bounds(x);
  if (!c || r.lo == Range::kNegInf || r.hi == Range::kPosInf) return std::nullopt;
  int64_t k = detail::floor_div(r.lo, *c);
  if (k != detail::floor_div(r.hi, *c)) return std::nullopt;
  return x - k * *c;
}

// min(a, b, ...) drops b when a <= b (max: when b <= a); keeps one of provably equal operands.
template <bool kIsMin>
std::optional<Expr> drop_dominated(const Expr& e, const RuleContext& cx) {
  auto ops = e.operands();
  std::vector<bool> dropped(ops.size(), false);
  bool any = false;
  for (size_t j = 0; j < ops.size(); ++j) {
    for (size_t i = 0; i < ops.size() && !dropped[j]; ++i) {
      if (i == j || dropped[i]) continue;
      dropped[j] = kIsMin ? cx.leq(ops[i], ops[j]) : cx.leq(ops[j], ops[i]);
    }
    any |= dropped[j];
  }
  if (!any) return std::nullopt;
  std::optional<Expr> acc;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!dropped[i]) acc = !acc ? ops[i] : (kIsMin ? min(*acc, ops[i]) : max(*acc, ops[i]));
  }
  return acc;
}

// --- The table --------------------------------------------------------------------------------

const std::vector<Rule>& rule_table() {
  static const Expr x = make_symbol("?x"), a = make_symbol("?a"), b = make_symbol("?b");
  static const Expr m = make_symbol("?m");
  using K = ExprKind;
  static const std::vector<Rule> rules = {
      // Any root.
      procedure(std::nullopt, "e -> c  if bounds(e) == [c, c]", fold_constant_range),

      // Add.
      procedure(K::Add, "k*a*(x // a) + k*(x % a) -> k*x; with (x // a) % b -> k*(x % (a*b))",
                merge_quotient_remainder),

      // Mul: canonicalization only (the constructor distributes products over sums).

      // FloorDiv.
      rewrite(floordiv(x, a), 0, [](const Match& v) { return v.cx.in_period(v[x], v[a]); }),
      rewrite(floordiv(floordiv(x, a), b), floordiv(x, a * b)),
      procedure(K::FloorDiv, "(q*b + r) // b -> q + r // b", div_exact_terms),
      procedure(K::FloorDiv, "(g*x) // (g*c) -> x // c", div_common_factor),
      procedure(K::FloorDiv, "(t + r) // c -> t // c  if g | t, g | c, 0 <= r < g",
                div_drop_remainder),

      // Mod.
      rewrite(mod(x, a), x, [](const Match& v) { return v.cx.in_period(v[x], v[a]); }),
      procedure(K::Mod, "x % c -> x - k*c  if k*c <= x < (k+1)*c", mod_one_period),
      rewrite(mod(mod(x, m), a), mod(x, a),
              [](const Match& v) { return exact_quotient(v[m], v[a]).has_value(); }),
      rewrite(mod(floordiv(x, a), b), floordiv(x, a),
              [](const Match& v) { return v.cx.in_period(v[x], v[a] * v[b]); }),
      procedure(K::Mod, "(q*b + r) % b -> r % b", mod_exact_terms),
      procedure(K::Mod, "(g*x) % (g*c) -> g*(x % c)", mod_common_factor),
      procedure(K::Mod, "(t + r) % c -> t % c + r  if g | t, g | c, 0 <= r < g",
                mod_split_remainder),

      // Min / Max.
      procedure(K::Min, "min(a, b, ...) -> min(a, ...)  if a <= b", drop_dominated<true>),
      procedure(K::Max, "max(a, b, ...) -> max(a, ...)  if b <= a", drop_dominated<false>),
  };
  return rules;
}

}  // namespace

std::optional<Expr> Analyzer::rewrite_root(const Expr& e) const {
  RuleContext cx(*this);
  for (const Rule& rule : rule_table()) {
    if (rule.root && *rule.root != e.kind()) continue;
    if (rule.apply) {
      if (auto r = rule.apply(e, cx); r && *r != e) return r;
      continue;
    }
    Bindings v;
    if (!match(rule.pattern, e, v)) continue;
    if (rule.when && !rule.when(Match{cx, v})) continue;
    return substitute(rule.replacement, v);
  }
  return std::nullopt;
}

}  // namespace coil::sym

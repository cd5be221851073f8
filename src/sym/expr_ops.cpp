// The canonicalizing constructors: constant folding, flattening, sorting, collecting like terms
// and the identities that need no ranges (x+0, x*1, x*0, x//1, x%1). Products are distributed
// over sums, so every polynomial has one form and e.g. s0*(x0 + 1) - s0*x0 builds as s0.
#include <algorithm>

#include "coil/expr.h"
#include "support/check.h"
#include "sym/canonical.h"

namespace coil::sym {

using detail::intern;
using detail::split_term;
using detail::Term;

namespace detail {

Term split_term(const Expr& e) {
  if (e.is_const()) return {e.const_value(), make_const(1)};
  if (e.kind() != ExprKind::Mul || !e.operands()[0].is_const()) return {1, e};
  auto rest = e.operands().subspan(1);
  Expr body = rest.size() == 1 ? rest[0] : intern(ExprKind::Mul, {rest.begin(), rest.end()});
  return {e.operands()[0].const_value(), body};
}

Expr make_term(int64_t coef, const Expr& body) {
  if (coef == 0) return make_const(0);
  if (coef == 1) return body;
  if (body.is_const()) return make_const(wrap_mul(coef, body.const_value()));
  std::vector<Expr> ops{make_const(coef)};
  for (const Expr& f : factors_of(body)) ops.push_back(f);
  return intern(ExprKind::Mul, std::move(ops));
}

Expr sum(std::span<const Expr> exprs) {
  Expr total = make_const(0);
  for (const Expr& e : exprs) total = total + e;
  return total;
}

Expr product(std::span<const Expr> exprs) {
  Expr total = make_const(1);
  for (const Expr& e : exprs) total = total * e;
  return total;
}

Expr rebuild(ExprKind kind, std::span<const Expr> ops) {
  auto fold = [&](Expr (*combine)(const Expr&, const Expr&)) {
    Expr acc = ops[0];
    for (size_t i = 1; i < ops.size(); ++i) acc = combine(acc, ops[i]);
    return acc;
  };
  switch (kind) {
    case ExprKind::Add:
      return sum(ops);
    case ExprKind::Mul:
      return product(ops);
    case ExprKind::FloorDiv:
      return floordiv(ops[0], ops[1]);
    case ExprKind::Mod:
      return mod(ops[0], ops[1]);
    case ExprKind::Min:
      return fold(&sym::min);
    case ExprKind::Max:
      return fold(&sym::max);
    case ExprKind::Const:
    case ExprKind::Symbol:
      break;
  }
  COIL_UNREACHABLE("rebuild: kind {} has no operands", static_cast<int>(kind));
}

}  // namespace detail

Expr operator+(const Expr& a, const Expr& b) {
  COIL_ASSERT(a.defined() && b.defined(), "adding a null Expr");
  auto ca = a.as_const(), cb = b.as_const();
  if (ca && cb) return make_const(detail::wrap_add(*ca, *cb));
  if (ca == 0) return b;
  if (cb == 0) return a;
  // Collect c*body terms of both sides; bodies compare in the operand order, so after sorting,
  // like terms are adjacent and the merged list is already in canonical order.
  int64_t constant = 0;
  std::vector<Term> terms;
  for (const Expr& side : {a, b}) {
    for (const Expr& t : detail::terms_of(side)) {
      if (t.is_const()) {
        constant = detail::wrap_add(constant, t.const_value());
      } else {
        terms.push_back(split_term(t));
      }
    }
  }
  std::sort(terms.begin(), terms.end(),
            [](const Term& x, const Term& y) { return detail::compare(x.body, y.body) < 0; });
  std::vector<Expr> ops;
  if (constant != 0) ops.push_back(make_const(constant));
  for (size_t i = 0; i < terms.size();) {
    int64_t coef = 0;
    size_t j = i;
    for (; j < terms.size() && terms[j].body == terms[i].body; ++j) {
      coef = detail::wrap_add(coef, terms[j].coef);
    }
    if (coef != 0) ops.push_back(detail::make_term(coef, terms[i].body));
    i = j;
  }
  if (ops.empty()) return make_const(0);
  if (ops.size() == 1) return ops[0];
  return intern(ExprKind::Add, std::move(ops));
}

Expr operator-(const Expr& a) {
  return a * make_const(-1);
}

Expr operator-(const Expr& a, const Expr& b) {
  return a + (-b);
}

Expr operator*(const Expr& a, const Expr& b) {
  COIL_ASSERT(a.defined() && b.defined(), "multiplying a null Expr");
  auto ca = a.as_const(), cb = b.as_const();
  if (ca && cb) return make_const(detail::wrap_mul(*ca, *cb));
  if (ca == 0 || cb == 0) return make_const(0);
  if (ca == 1) return b;
  if (cb == 1) return a;
  if (a.kind() == ExprKind::Add || b.kind() == ExprKind::Add) {
    Expr total = make_const(0);
    for (const Expr& ta : detail::terms_of(a)) {
      for (const Expr& tb : detail::terms_of(b)) total = total + ta * tb;
    }
    return total;
  }
  int64_t coef = 1;
  std::vector<Expr> factors;
  for (const Expr& side : {a, b}) {
    auto ops = side.kind() == ExprKind::Mul ? side.operands() : std::span<const Expr>(&side, 1);
    for (const Expr& f : ops) {
      if (f.is_const()) {
        coef = detail::wrap_mul(coef, f.const_value());
      } else {
        factors.push_back(f);
      }
    }
  }
  if (coef == 0) return make_const(0);  // only through wrapping overflow
  std::sort(factors.begin(), factors.end());
  if (factors.empty()) return make_const(coef);
  if (coef == 1 && factors.size() == 1) return factors[0];
  std::vector<Expr> ops;
  if (coef != 1) ops.push_back(make_const(coef));
  ops.insert(ops.end(), factors.begin(), factors.end());
  return intern(ExprKind::Mul, std::move(ops));
}

Expr floordiv(const Expr& a, const Expr& b) {
  COIL_ASSERT(a.defined() && b.defined(), "floordiv of a null Expr");
  auto cb = b.as_const();
  COIL_ASSERT(!cb || *cb > 0, "floordiv({}, {}): the divisor must be positive", to_string(a), *cb);
  if (cb == 1) return a;
  if (auto ca = a.as_const()) {
    if (cb) return make_const(detail::floor_div(*ca, *cb));
    if (*ca == 0) return a;
  }
  if (a == b) return make_const(1);
  return intern(ExprKind::FloorDiv, {a, b});
}

Expr mod(const Expr& a, const Expr& b) {
  COIL_ASSERT(a.defined() && b.defined(), "mod of a null Expr");
  auto cb = b.as_const();
  COIL_ASSERT(!cb || *cb > 0, "mod({}, {}): the divisor must be positive", to_string(a), *cb);
  if (cb == 1 || a == b) return make_const(0);
  if (auto ca = a.as_const()) {
    if (cb) return make_const(detail::floor_mod(*ca, *cb));
    if (*ca == 0) return a;
  }
  return intern(ExprKind::Mod, {a, b});
}

namespace {

// Min and Max: flatten nested nodes of the same kind, fold the constants into one, sort, dedupe.
Expr make_extremum(ExprKind kind, const Expr& a, const Expr& b) {
  COIL_ASSERT(a.defined() && b.defined(), "min/max of a null Expr");
  const bool is_min = kind == ExprKind::Min;
  if (a == b) return a;
  std::optional<int64_t> constant;
  std::vector<Expr> ops;
  for (const Expr& side : {a, b}) {
    auto parts = side.kind() == kind ? side.operands() : std::span<const Expr>(&side, 1);
    for (const Expr& p : parts) {
      if (auto c = p.as_const()) {
        constant = !constant ? *c : (is_min ? std::min(*constant, *c) : std::max(*constant, *c));
      } else {
        ops.push_back(p);
      }
    }
  }
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  if (constant) ops.insert(ops.begin(), make_const(*constant));
  if (ops.size() == 1) return ops[0];
  return intern(kind, std::move(ops));
}

}  // namespace

Expr min(const Expr& a, const Expr& b) {
  return make_extremum(ExprKind::Min, a, b);
}
Expr max(const Expr& a, const Expr& b) {
  return make_extremum(ExprKind::Max, a, b);
}

}  // namespace coil::sym

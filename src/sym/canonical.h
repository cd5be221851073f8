// Internal to src/sym: helpers shared by the canonicalizing constructors (expr_ops.cpp), the
// printer (expr_printer.cpp) and the simplifier (analyzer.cpp, simplify_rules.cpp). Not part of
// the public interface; include coil/expr.h instead.
//
// Canonical form, as the constructors build it:
//   * Add: >= 2 operands, at most one Const (first), then terms k*body with distinct bodies and
//     k != 0, sorted by body. A body never carries a constant coefficient.
//   * Mul: >= 2 operands, at most one Const (first, != 0, != 1), then factors that are neither
//     Const, Mul nor Add (products are fully distributed over sums), sorted.
//   * Min/Max: >= 2 distinct operands, at most one Const, no nested node of the same kind, sorted.
//   * FloorDiv/Mod: {a, b}; b is never a constant <= 0 or 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coil/expr.h"

namespace coil::sym::detail {

/// Interns a node whose operands are already in canonical form (no rewriting).
Expr intern(ExprKind kind, std::vector<Expr> operands);

/// Three-way form of Expr::operator<: terms compare by their non-constant factors first, then by
/// coefficient, so like terms are adjacent and "x0 + 1024*x1" orders by variable.
int compare(const Expr& a, const Expr& b);

/// Rebuilds a node of `kind` from new operands through the canonicalizing constructors.
Expr rebuild(ExprKind kind, std::span<const Expr> operands);

/// The terms of a sum: the operands of an Add, else e alone.
inline std::span<const Expr> terms_of(const Expr& e) {
  return e.kind() == ExprKind::Add ? e.operands() : std::span<const Expr>(&e, 1);
}

/// The non-constant factors of a product: a Mul's operands after its coefficient, else e alone.
std::span<const Expr> factors_of(const Expr& e);

// Both return views that may point at e itself: refuse temporaries, which die too early in
// `for (auto& t : terms_of(simplify(e)))`.
std::span<const Expr> terms_of(Expr&&) = delete;
std::span<const Expr> factors_of(Expr&&) = delete;

/// A term split as coef * body. Const v splits as {v, 1}; a body has no constant coefficient.
struct Term {
  int64_t coef;
  Expr body;
};
Term split_term(const Expr& e);
/// coef * body without re-sorting (body must be a canonical body).
Expr make_term(int64_t coef, const Expr& body);

/// Sum / product of a list through the constructors (0 / 1 when empty).
Expr sum(std::span<const Expr> exprs);
Expr product(std::span<const Expr> exprs);

/// Integer helpers with the algebra's semantics. Wrapping (not UB) on overflow, which the
/// semantics leave undefined anyway.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

}  // namespace coil::sym::detail

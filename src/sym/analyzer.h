// Range analysis and range-aware simplification of index expressions, Inductor's
// SizeVarAllocator in small: symbol ranges in, proofs and simpler expressions out.
// Rule: correctness decisions (dropping a mask, printing `/` instead of floor division) use
// only statically_known_*; heuristics may use size hints.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

#include "coil/expr.h"

namespace coil::sym {

/// Inclusive integer interval; kNegInf/kPosInf mark unbounded ends.
struct Range {
  static constexpr int64_t kNegInf = INT64_MIN;
  static constexpr int64_t kPosInf = INT64_MAX;
  int64_t lo = kNegInf;
  int64_t hi = kPosInf;
  bool is_constant() const { return lo == hi && lo != kNegInf; }
  bool operator==(const Range&) const = default;
};

class Analyzer {
 public:
  /// Declares lo <= symbol <= hi (inclusive). Later bindings replace earlier ones.
  void bind(const Expr& symbol, int64_t lo, int64_t hi);
  /// A loop variable iterating 0 <= var < extent (extent may be symbolic; uses its upper bound).
  void bind_loop_var(const Expr& var, const Expr& extent);

  /// Sound bounds of e over all bound symbol values (unbound symbols are unbounded).
  Range bounds(const Expr& e) const;

  bool statically_known_equal(const Expr& a, const Expr& b) const;
  bool statically_known_leq(const Expr& a, const Expr& b) const;
  bool statically_known_lt(const Expr& a, const Expr& b) const;
  bool statically_known_nonnegative(const Expr& e) const;
  /// True when e is provably a multiple of m for all symbol values.
  bool statically_known_multiple_of(const Expr& e, int64_t m) const;

  /// Range-aware simplification, memoised per analyzer: x // n -> 0 when 0 <= x < n,
  /// x % n -> x when 0 <= x < n, (a*n + b) // n -> a + b // n when 0 <= b < n,
  /// (a*n + b) % n -> b % n, ((x // a) // b) -> x // (a*b), min/max with known order, ...
  /// The rules are data (one per line, grouped by root kind) in sym/simplify_rules.cpp.
  Expr simplify(const Expr& e) const;

  /// Coefficient of `var` when e is affine in it (var appears only outside FloorDiv/Mod/Min/Max
  /// and linearly); nullopt otherwise.
  std::optional<Expr> linear_stride(const Expr& e, const Expr& var) const;
  /// Stride of e in `var` for vectorization decisions: e(var+1) - e(var) after simplify, when
  /// that difference no longer depends on var (e.g. (x0 + 4*x1) // 4 in x1 -> 1); nullopt when it
  /// does (a gather).
  std::optional<Expr> stride(const Expr& e, const Expr& var) const;

 private:
  // The const queries fill memos, so one Analyzer must not be shared between threads.
  // The rewrite rules (sym/simplify_rules.cpp) query ranges through the private helpers below.
  friend class RuleContext;

  // Range queries that never call simplify, so the rules can use them while simplifying.
  /// a <= b for all values (bounds of b - a, refined by the symbolic loop bounds).
  bool proves_leq(const Expr& a, const Expr& b) const;
  /// A g dividing m (m > 0) such that g divides e for all values.
  int64_t known_divisor(const Expr& e, int64_t m) const;
  /// An expression U (L) with e <= U (e >= L) in which every loop variable is replaced by its
  /// extent - 1 (by 0): proves `x0 + s0*x1 < s0*s1` where intervals cannot.
  std::optional<Expr> symbolic_bound(const Expr& e, bool upper) const;
  Range compute_bounds(const Expr& e) const;
  /// Applies the first matching rule at the root of e (whose operands are simplified).
  std::optional<Expr> rewrite_root(const Expr& e) const;
  void invalidate();

  std::map<Expr, Range> ranges_;
  std::map<Expr, Expr> loop_extents_;  // loop variable -> extent (bind_loop_var)
  bool symbolic_extents_ = false;      // some loop extent is not a constant
  mutable std::unordered_map<Expr, Range> bounds_memo_;
  mutable std::unordered_map<Expr, Expr> simplify_memo_;
  mutable int depth_ = 0;  // recursion guard of simplify and bounds
};

}  // namespace coil::sym

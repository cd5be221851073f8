// coil's index algebra: hash-consed integer expressions.
//
// Semantics (the same in every backend):
//   * values are int64; overflow is undefined (sizes are bounded far below 2^63).
//   * FloorDiv(a, b) is floor division (rounds toward -inf, like Python's //); b > 0 always.
//   * Mod(a, b) is the floored remainder (sign of b, like Python's %); b > 0 always.
//     Backends print plain C `/` and `%` only when the analyzer proves a >= 0.
//   * Min/Max are binary in the node but flattened and sorted like Add/Mul.
//   * Symbols are named: sizes "s0", "s1", ...; loop variables "x0"... (pointwise)
//     and "r0"... (reduction). Two symbols with the same name are the same symbol.
//
// Every Expr is interned: building the same expression twice gives the same node, so
// equality and hashing are pointer operations. Nodes live for the whole process.
// Construction applies cheap canonicalization only (constant folding, flattening of
// Add/Mul, sorting operands, x+0, x*1, x*0, collecting like terms c1*x + c2*x). Deeper
// rewrites that need symbol ranges live in the Analyzer (sym/analyzer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coil::sym {

enum class ExprKind : uint8_t { Const, Symbol, Add, Mul, FloorDiv, Mod, Min, Max };

struct ExprNode;

/// A handle to an interned expression node. Cheap to copy; compares by pointer.
class Expr {
 public:
  Expr() = default;  // null; only for default-constructed containers
  explicit Expr(const ExprNode* node) : node_(node) {}
  /// Implicit from integers, so `x + 1` and `Expr(5)` read naturally.
  Expr(int64_t value);                                    // NOLINT
  Expr(int value) : Expr(static_cast<int64_t>(value)) {}  // NOLINT

  const ExprNode* get() const { return node_; }
  bool defined() const { return node_ != nullptr; }
  ExprKind kind() const;
  bool is_const() const { return kind() == ExprKind::Const; }
  bool is_symbol() const { return kind() == ExprKind::Symbol; }
  /// Value of a Const node (asserts otherwise).
  int64_t const_value() const;
  /// The constant value if this is a Const.
  std::optional<int64_t> as_const() const;
  /// Name of a Symbol node (asserts otherwise).
  const std::string& symbol_name() const;
  /// Operands (empty for Const and Symbol).
  std::span<const Expr> operands() const;

  bool operator==(const Expr& o) const { return node_ == o.node_; }
  bool operator!=(const Expr& o) const { return node_ != o.node_; }
  /// A deterministic total order (by structure, not by address), used to sort operands so that
  /// printing and code generation are the same in every process.
  bool operator<(const Expr& o) const;
  size_t hash() const;

 private:
  const ExprNode* node_ = nullptr;
};

struct ExprNode {
  ExprKind kind;
  int64_t value = 0;           // Const
  std::string name;            // Symbol
  std::vector<Expr> operands;  // Add/Mul/Min/Max: >= 2, sorted; FloorDiv/Mod: {a, b}
  size_t hash = 0;
};

Expr make_const(int64_t value);
Expr make_symbol(std::string_view name);
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr operator*(const Expr& a, const Expr& b);
/// floor(a / b); b must be a positive constant or a symbol known positive.
Expr floordiv(const Expr& a, const Expr& b);
/// a - b * floor(a / b).
Expr mod(const Expr& a, const Expr& b);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
/// ModularIndexing(x, div, mod) = (x // div) % mod, Inductor's most common index form.
inline Expr modular_indexing(const Expr& x, const Expr& div, const Expr& m) {
  return mod(floordiv(x, div), m);
}

/// Replaces symbols (or any subexpression) by the mapped expressions, rebuilding through the
/// canonicalizing constructors.
Expr substitute(const Expr& e, const std::map<Expr, Expr>& replacements);
/// Evaluates with every symbol bound; throws coil::InternalError on a free symbol.
int64_t evaluate(const Expr& e, const std::map<std::string, int64_t>& values);
/// Free symbols, sorted by name.
std::vector<Expr> free_symbols(const Expr& e);
bool depends_on(const Expr& e, const Expr& symbol);

/// Readable form: "x0 + 1024*x1", "(x0 // 4) % 3", "min(s0, 16)". Deterministic.
std::string to_string(const Expr& e);
std::ostream& operator<<(std::ostream& os, const Expr& e);

}  // namespace coil::sym

template <>
struct std::hash<coil::sym::Expr> {
  size_t operator()(const coil::sym::Expr& e) const { return e.hash(); }
};

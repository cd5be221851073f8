// Interning, the structural order, and the traversals over expressions (substitute, evaluate,
// free symbols). The canonicalizing constructors are in expr_ops.cpp, the printer in
// expr_printer.cpp.
#include "coil/expr.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "support/check.h"
#include "sym/canonical.h"

namespace coil::sym {
namespace {

// Hashes depend only on structure (never on addresses), so an unordered container of Exprs
// iterates in the same order in every process.
uint64_t mix(uint64_t h, uint64_t v) {
  v *= 0xff51afd7ed558ccdULL;
  v ^= v >> 33;
  return (h ^ v) * 0x100000001b3ULL + 0x9e3779b97f4a7c15ULL;
}

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  return h;
}

size_t structural_hash(const ExprNode& n) {
  uint64_t h = mix(0, static_cast<uint64_t>(n.kind) + 1);
  if (n.kind == ExprKind::Const) h = mix(h, static_cast<uint64_t>(n.value));
  if (n.kind == ExprKind::Symbol) h = mix(h, hash_name(n.name));
  for (const Expr& op : n.operands) h = mix(h, op.hash());
  h ^= h >> 29;  // the table indexes by the low bits: fold the high ones in
  return static_cast<size_t>(h * 0xbf58476d1ce4e5b9ULL ^ (h >> 32));
}

// An open-addressing hash set of nodes: the hash sits next to the pointer, so a lookup usually
// touches one cache line, and nodes are allocated in chunks (a deque never moves its elements).
class InternTable {
 public:
  const ExprNode* intern(ExprNode&& node) {
    node.hash = structural_hash(node);
    std::lock_guard<std::mutex> lock(mu_);
    size_t i = node.hash & mask_;
    for (; slots_[i].node != nullptr; i = (i + 1) & mask_) {
      if (slots_[i].hash == node.hash && same(*slots_[i].node, node)) return slots_[i].node;
    }
    const ExprNode* owned = &nodes_.emplace_back(std::move(node));  // never freed
    slots_[i] = Slot{owned->hash, owned};
    if (++size_ * 2 > slots_.size()) grow();
    return owned;
  }

 private:
  struct Slot {
    size_t hash = 0;
    const ExprNode* node = nullptr;
  };

  // Operands are interned, so comparing them is a pointer compare.
  static bool same(const ExprNode& a, const ExprNode& b) {
    return a.kind == b.kind && a.value == b.value && a.name == b.name && a.operands == b.operands;
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.node == nullptr) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].node != nullptr) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::mutex mu_;
  std::vector<Slot> slots_ = std::vector<Slot>(1 << 14);
  size_t mask_ = (1 << 14) - 1;
  size_t size_ = 0;
  std::deque<ExprNode> nodes_;
};

InternTable& table() {
  static InternTable* t = new InternTable();  // leaked so Exprs in static objects stay valid
  return *t;
}

const ExprNode* intern_const(int64_t value) {
  ExprNode n{ExprKind::Const, value, {}, {}, 0};
  return table().intern(std::move(n));
}

// Small constants are everywhere (coefficients, 0, 1); skip the locked lookup for them.
constexpr int64_t kCachedMin = -256, kCachedMax = 4096;
const ExprNode* cached_const(int64_t value) {
  static const std::vector<const ExprNode*>* cache = [] {
    auto* v = new std::vector<const ExprNode*>();
    for (int64_t i = kCachedMin; i <= kCachedMax; ++i) v->push_back(intern_const(i));
    return v;
  }();
  return (*cache)[static_cast<size_t>(value - kCachedMin)];
}

// Natural order on names, so s2 < s10 and x9 < x10.
int compare_names(std::string_view a, std::string_view b) {
  auto is_digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      size_t i0 = i, j0 = j;
      while (i0 < a.size() && a[i0] == '0') ++i0;
      while (j0 < b.size() && b[j0] == '0') ++j0;
      size_t i1 = i0, j1 = j0;
      while (i1 < a.size() && is_digit(a[i1])) ++i1;
      while (j1 < b.size() && is_digit(b[j1])) ++j1;
      if (i1 - i0 != j1 - j0) return i1 - i0 < j1 - j0 ? -1 : 1;
      if (int c = a.substr(i0, i1 - i0).compare(b.substr(j0, j1 - j0))) return c < 0 ? -1 : 1;
      i = i1;
      j = j1;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j] ? -1 : 1;
    ++i;
    ++j;
  }
  if (i < a.size() || j < b.size()) return i < a.size() ? 1 : -1;
  int c = a.compare(b);  // equal up to leading zeros: "x01" vs "x1"
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// Compares two factors (never Const or Mul): by kind, then name or operands.
int compare_atoms(const Expr& a, const Expr& b) {
  if (a == b) return 0;
  if (a.kind() != b.kind()) return a.kind() < b.kind() ? -1 : 1;
  if (a.is_symbol()) return compare_names(a.symbol_name(), b.symbol_name());
  if (a.is_const()) return a.const_value() < b.const_value() ? -1 : 1;
  auto oa = a.operands(), ob = b.operands();
  for (size_t i = 0; i < oa.size() && i < ob.size(); ++i) {
    if (int c = detail::compare(oa[i], ob[i])) return c;
  }
  return oa.size() < ob.size() ? -1 : 1;
}

}  // namespace

namespace detail {

Expr intern(ExprKind kind, std::vector<Expr> operands) {
  ExprNode n{kind, 0, {}, std::move(operands), 0};
  return Expr(table().intern(std::move(n)));
}

std::span<const Expr> factors_of(const Expr& e) {
  if (e.kind() != ExprKind::Mul) return std::span<const Expr>(&e, 1);
  auto ops = e.operands();
  return ops[0].is_const() ? ops.subspan(1) : ops;
}

int compare(const Expr& a, const Expr& b) {
  if (a == b) return 0;
  if (!a.defined() || !b.defined()) return a.defined() ? 1 : -1;
  if (a.is_const() || b.is_const()) {
    if (a.is_const() && b.is_const()) return a.const_value() < b.const_value() ? -1 : 1;
    return a.is_const() ? -1 : 1;
  }
  auto fa = factors_of(a), fb = factors_of(b);
  if (fa.size() != fb.size()) return fa.size() < fb.size() ? -1 : 1;
  for (size_t i = 0; i < fa.size(); ++i) {
    if (int c = compare_atoms(fa[i], fb[i])) return c;
  }
  auto coef = [](const Expr& e) {
    return e.kind() == ExprKind::Mul && e.operands()[0].is_const() ? e.operands()[0].const_value()
                                                                   : int64_t{1};
  };
  int64_t ka = coef(a), kb = coef(b);
  COIL_ASSERT(ka != kb, "distinct interned nodes compare equal: {} and {}", to_string(a),
              to_string(b));
  return ka < kb ? -1 : 1;
}

int64_t floor_div(int64_t a, int64_t b) {
  COIL_ASSERT(b > 0, "floor division by {}", b);
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  COIL_ASSERT(b > 0, "modulo by {}", b);
  int64_t r = a % b;
  return r < 0 ? r + b : r;
}

}  // namespace detail

Expr::Expr(int64_t value) : node_(make_const(value).get()) {}

ExprKind Expr::kind() const {
  COIL_ASSERT(node_ != nullptr, "kind() of a null Expr");
  return node_->kind;
}

int64_t Expr::const_value() const {
  COIL_ASSERT(is_const(), "const_value() of non-constant {}", to_string(*this));
  return node_->value;
}

std::optional<int64_t> Expr::as_const() const {
  if (is_const()) return node_->value;
  return std::nullopt;
}

const std::string& Expr::symbol_name() const {
  COIL_ASSERT(is_symbol(), "symbol_name() of non-symbol {}", to_string(*this));
  return node_->name;
}

std::span<const Expr> Expr::operands() const {
  COIL_ASSERT(node_ != nullptr, "operands() of a null Expr");
  return node_->operands;
}

bool Expr::operator<(const Expr& o) const {
  return detail::compare(*this, o) < 0;
}

size_t Expr::hash() const {
  return node_ ? node_->hash : 0;
}

Expr make_const(int64_t value) {
  if (value >= kCachedMin && value <= kCachedMax) return Expr(cached_const(value));
  return Expr(intern_const(value));
}

Expr make_symbol(std::string_view name) {
  COIL_ASSERT(!name.empty(), "symbol with an empty name");
  ExprNode n{ExprKind::Symbol, 0, std::string(name), {}, 0};
  return Expr(table().intern(std::move(n)));
}

namespace {

Expr substitute_memo(const Expr& e, const std::map<Expr, Expr>& replacements,
                     std::unordered_map<Expr, Expr>& memo) {
  if (auto it = replacements.find(e); it != replacements.end()) return it->second;
  if (e.operands().empty()) return e;
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  std::vector<Expr> ops;
  bool changed = false;
  for (const Expr& op : e.operands()) {
    ops.push_back(substitute_memo(op, replacements, memo));
    changed |= ops.back() != op;
  }
  Expr result = changed ? detail::rebuild(e.kind(), ops) : e;
  memo.emplace(e, result);
  return result;
}

template <typename Visit>
void visit_dag(const Expr& e, std::unordered_set<const ExprNode*>& seen, const Visit& visit) {
  if (!seen.insert(e.get()).second) return;
  visit(e);
  for (const Expr& op : e.operands()) visit_dag(op, seen, visit);
}

}  // namespace

Expr substitute(const Expr& e, const std::map<Expr, Expr>& replacements) {
  if (replacements.empty()) return e;
  std::unordered_map<Expr, Expr> memo;
  return substitute_memo(e, replacements, memo);
}

int64_t evaluate(const Expr& e, const std::map<std::string, int64_t>& values) {
  auto ops = e.operands();
  auto fold = [&](int64_t init, auto combine) {
    for (const Expr& op : ops) init = combine(init, evaluate(op, values));
    return init;
  };
  switch (e.kind()) {
    case ExprKind::Const:
      return e.const_value();
    case ExprKind::Symbol: {
      auto it = values.find(e.symbol_name());
      if (it == values.end()) COIL_UNREACHABLE("evaluate: symbol {} has no value", e.symbol_name());
      return it->second;
    }
    case ExprKind::Add:
      return fold(0, detail::wrap_add);
    case ExprKind::Mul:
      return fold(1, detail::wrap_mul);
    case ExprKind::FloorDiv:
      return detail::floor_div(evaluate(ops[0], values), evaluate(ops[1], values));
    case ExprKind::Mod:
      return detail::floor_mod(evaluate(ops[0], values), evaluate(ops[1], values));
    case ExprKind::Min:
      return fold(INT64_MAX, [](int64_t a, int64_t b) { return std::min(a, b); });
    case ExprKind::Max:
      return fold(INT64_MIN, [](int64_t a, int64_t b) { return std::max(a, b); });
  }
  COIL_UNREACHABLE("evaluate: bad expression kind {}", static_cast<int>(e.kind()));
}

std::vector<Expr> free_symbols(const Expr& e) {
  std::vector<Expr> symbols;
  std::unordered_set<const ExprNode*> seen;
  visit_dag(e, seen, [&](const Expr& x) {
    if (x.is_symbol()) symbols.push_back(x);
  });
  std::sort(symbols.begin(), symbols.end());
  return symbols;
}

bool depends_on(const Expr& e, const Expr& symbol) {
  if (e == symbol) return true;
  if (e.operands().empty()) return false;
  std::unordered_set<const ExprNode*> seen;
  bool found = false;
  visit_dag(e, seen, [&](const Expr& x) { found |= x == symbol; });
  return found;
}

}  // namespace coil::sym

#include "sym/size_hints.h"

#include <algorithm>

#include "support/check.h"
#include "sym/analyzer.h"

namespace coil::sym {
namespace {
thread_local const SizeHintScope* current = nullptr;
}  // namespace

SizeHintScope::SizeHintScope(std::map<Expr, int64_t> hints)
    : hints_(std::move(hints)), outer_(current) {
  current = this;
}

SizeHintScope::~SizeHintScope() {
  current = outer_;
}

std::optional<int64_t> hint(const Expr& e) {
  if (auto c = e.as_const()) return c;
  if (!current) return std::nullopt;
  std::map<Expr, Expr> values;
  for (const Expr& s : free_symbols(e)) {
    auto it = current->hints_.find(s);
    if (it == current->hints_.end()) return std::nullopt;
    values.emplace(s, Expr(it->second));
  }
  return substitute(e, values).as_const();
}

std::optional<bool> decide_at_least(const Expr& e, int64_t bound) {
  std::optional<int64_t> v = hint(e);
  if (!v) return std::nullopt;
  const bool yes = *v >= bound;
  if (!e.is_const() && current) {
    SizeGuard g{e};
    if (yes)
      g.min = bound;
    else
      g.max = bound - 1;
    auto& guards = const_cast<SizeHintScope*>(current)->guards_;
    if (std::find(guards.begin(), guards.end(), g) == guards.end()) guards.push_back(g);
  }
  return yes;
}

bool SizeGuard::holds(const std::map<Expr, int64_t>& values) const {
  std::map<Expr, Expr> subs;
  for (const auto& [s, v] : values) subs.emplace(s, Expr(v));
  auto v = substitute(expr, subs).as_const();
  return v && *v >= min && *v <= max;
}

std::string SizeGuard::to_string() const {
  const std::string e = sym::to_string(expr);
  if (min != INT64_MIN && max != INT64_MAX)
    return min == max ? e + " == " + std::to_string(min)
                      : std::to_string(min) + " <= " + e + " <= " + std::to_string(max);
  if (min != INT64_MIN) return e + " >= " + std::to_string(min);
  return e + " <= " + std::to_string(max);
}

int64_t nominal_value(const Expr& e) {
  if (e.is_const()) return e.const_value();
  std::map<Expr, Expr> at;
  for (const Expr& s : free_symbols(e)) at[s] = Expr(kNominalSize);
  Expr v = substitute(e, at);
  COIL_ASSERT(v.is_const(), "nominal_value: {} is not a size expression", to_string(e));
  return v.const_value();
}

Expr at_hints(const Expr& e) {
  if (!current || e.is_const()) return e;
  std::map<Expr, Expr> values;
  for (const Expr& s : free_symbols(e)) {
    auto it = current->hints_.find(s);
    if (it != current->hints_.end()) values.emplace(s, Expr(it->second));
  }
  return values.empty() ? e : substitute(e, values);
}

void bind_size_hints(Analyzer& a, bool exact) {
  if (!current) return;
  for (const auto& [symbol, value] : current->hints_) {
    if (exact)
      a.bind(symbol, value, value);
    else if (value >= 1)
      a.bind(symbol, 1, Range::kPosInf);
  }
}

}  // namespace coil::sym

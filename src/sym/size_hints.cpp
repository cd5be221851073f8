#include "sym/size_hints.h"

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

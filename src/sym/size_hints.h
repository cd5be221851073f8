// Size hints: the values the size symbols have in the call being compiled (Inductor's size
// hints). A size-generic compile (driver/dynamic_model.cpp) lowers, schedules and prints with
// symbolic sizes; the planning heuristics that need numbers (vector extents, tile counts,
// parallel depth, memory offsets) read them at the hints. Every such decision shows in the
// generated source, and a compiled module is reused for other sizes only when generating at
// those sizes gives the same source (the guard), so a hint never makes a result wrong: at
// worst it makes another variant.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "coil/expr.h"

namespace coil::sym {

class Analyzer;

/// While alive, the symbols of `hints` have those values for hint() on this thread. Scopes
/// nest; the innermost one alone applies.
class SizeHintScope {
 public:
  explicit SizeHintScope(std::map<Expr, int64_t> hints);
  ~SizeHintScope();
  SizeHintScope(const SizeHintScope&) = delete;
  SizeHintScope& operator=(const SizeHintScope&) = delete;

 private:
  std::map<Expr, int64_t> hints_;
  const SizeHintScope* outer_;
  friend std::optional<int64_t> hint(const Expr& e);
  friend void bind_size_hints(Analyzer& a, bool exact);
  friend Expr at_hints(const Expr& e);

  /// `e` with every hinted symbol replaced by its hint (other symbols stay).
  Expr at_hints(const Expr& e);

  /// Tells `a` what is known of the hinted symbols: exactly their hints (`exact`: checks of the
  /// program at these sizes, such as the IR verifier's bounds proofs), or only that a positive
  /// size stays >= 1 (code generation, whose text must hold for other sizes too).
  void bind_size_hints(Analyzer& a, bool exact);
};

/// `e` evaluated at the current hints: its value when it is a constant or every symbol in it
/// has a hint; nullopt otherwise (a loop variable, a symbol without one).
std::optional<int64_t> hint(const Expr& e);

/// `e` with every hinted symbol replaced by its hint (other symbols stay).
Expr at_hints(const Expr& e);

/// Tells `a` what is known of the hinted symbols: exactly their hints (`exact`: checks of the
/// program at these sizes, such as the IR verifier's bounds proofs), or only that a positive
/// size stays >= 1 (code generation, whose text must hold for other sizes too).
void bind_size_hints(Analyzer& a, bool exact);

}  // namespace coil::sym

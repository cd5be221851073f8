// Size hints: the values the size symbols have in the call being compiled (Inductor's size
// hints). A size-generic compile (driver/dynamic_model.cpp) lowers, schedules and prints with
// symbolic sizes; the planning heuristics that need numbers (vector extents, tile counts,
// parallel depth, memory offsets) read them at the hints.
//
// A hint may decide how fast the code is, never whether it is right at other sizes: the
// printers know only that a size is >= 1 (bind_size_hints(a, false)). A heuristic whose
// choice shows in the text and that should follow the size (large outputs stream) asks
// through decide_at_least(), which records the condition as a guard of the module being
// generated (SizeGuard); a call whose sizes fail one of its module's guards gets another
// module (driver/dynamic_model.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coil/expr.h"

namespace coil::sym {

class Analyzer;

/// A condition on the size symbols that a size-generic module's code was chosen under:
/// `min <= expr <= max`.
struct SizeGuard {
  Expr expr;
  int64_t min = INT64_MIN, max = INT64_MAX;

  /// Whether it holds at `values` (every symbol of expr must have one).
  bool holds(const std::map<Expr, int64_t>& values) const;
  /// "4096*ks0 <= 8388607", "ks0 >= 2", "2 <= ks0 <= 7".
  std::string to_string() const;
  bool operator==(const SizeGuard& o) const {
    return expr == o.expr && min == o.min && max == o.max;
  }
};

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
  std::vector<SizeGuard> guards_;
  friend std::optional<bool> decide_at_least(const Expr& e, int64_t bound);
  friend std::optional<int64_t> hint(const Expr& e);
  friend void bind_size_hints(Analyzer& a, bool exact);
  friend Expr at_hints(const Expr& e);

  /// `e` with every hinted symbol replaced by its hint (other symbols stay).
  Expr at_hints(const Expr& e);

  /// Tells `a` what is known of the hinted symbols: exactly their hints (`exact`: checks of the
  /// program at these sizes, such as the IR verifier's bounds proofs), or only that a positive
  /// size stays >= 1 (code generation, whose text must hold for other sizes too).
  void bind_size_hints(Analyzer& a, bool exact);

 public:
  /// The guards decide_at_least() recorded under this scope, in the order first recorded.
  const std::vector<SizeGuard>& guards() const { return guards_; }
};

/// `e` evaluated at the current hints: its value when it is a constant or every symbol in it
/// has a hint; nullopt otherwise (a loop variable, a symbol without one).
std::optional<int64_t> hint(const Expr& e);

/// `e` with every hinted symbol replaced by its hint (other symbols stay).
Expr at_hints(const Expr& e);

/// For a heuristic whose choice shows in the generated code: whether `e >= bound` at the
/// current hints. Where `e` is symbolic the answer is recorded in the innermost scope as a
/// guard (`e >= bound`, or `e <= bound - 1`), so that the module is used only at sizes where
/// the same choice would be made. nullopt when `e` has no hint (a loop variable).
std::optional<bool> decide_at_least(const Expr& e, int64_t bound);

/// Tells `a` what is known of the hinted symbols: exactly their hints (`exact`: checks of the
/// program at these sizes, such as the IR verifier's bounds proofs), or only that a positive
/// size stays >= 1 (code generation, whose text must hold for other sizes too).
void bind_size_hints(Analyzer& a, bool exact);

/// Where a choice that shows in a size-generic module's text needs a number for a symbolic
/// size, it reads this one, never the hints: the module serves every size, so its text may not
/// depend on the sizes it was generated at (the GPU path generates it at two sets of hints and
/// refuses a difference). Used by the Triton decorators' size hints and index widths and by
/// the scheduler's fusion rules.
constexpr int64_t kNominalSize = 1024;

/// `e` with every size symbol at kNominalSize (a constant stays itself).
int64_t nominal_value(const Expr& e);

}  // namespace coil::sym

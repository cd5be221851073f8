// Loop ranges as numbers and as facts: the helpers that the scheduler and both code
// generators share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coil/expr.h"
#include "sym/analyzer.h"

namespace coil {

/// The extents of ranges: constants, or their values at the size hints of a size-generic
/// compile (sym/size_hints.h); an internal error otherwise.
std::vector<int64_t> static_extents(const std::vector<sym::Expr>& ranges);

/// The extents of ranges with every size symbol at sym::kNominalSize: for a choice that shows
/// in a size-generic module's text, which may not depend on the hints (sym/size_hints.h).
std::vector<int64_t> nominal_extents(const std::vector<sym::Expr>& ranges);

/// Product of v[begin, end), end clamped to the size (1 when empty).
int64_t product(const std::vector<int64_t>& v, size_t begin = 0, size_t end = SIZE_MAX);

/// An analyzer knowing x_i in [0, ranges[i]) and r_i in [0, reduction_ranges[i]).
sym::Analyzer loop_analyzer(const std::vector<sym::Expr>& ranges,
                            const std::vector<sym::Expr>& reduction_ranges);
sym::Analyzer loop_analyzer(const std::vector<int64_t>& ranges,
                            const std::vector<int64_t>& reduction_ranges);

}  // namespace coil

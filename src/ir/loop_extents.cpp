#include "ir/loop_extents.h"

#include <algorithm>

#include "ir/ir.h"
#include "support/check.h"
#include "sym/size_hints.h"

namespace coil {

std::vector<int64_t> static_extents(const std::vector<sym::Expr>& ranges) {
  std::vector<int64_t> out;
  for (const auto& r : ranges) {
    auto c = sym::hint(r);
    COIL_ASSERT(c.has_value(), "loop range {} is neither static nor hinted", sym::to_string(r));
    out.push_back(*c);
  }
  return out;
}

std::vector<int64_t> nominal_extents(const std::vector<sym::Expr>& ranges) {
  std::vector<int64_t> out;
  for (const auto& r : ranges) out.push_back(sym::nominal_value(r));
  return out;
}

int64_t product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  end = std::min(end, v.size());
  int64_t p = 1;
  for (size_t i = std::min(begin, end); i < end; ++i) p *= v[i];
  return p;
}

sym::Analyzer loop_analyzer(const std::vector<sym::Expr>& ranges,
                            const std::vector<sym::Expr>& reduction_ranges) {
  sym::Analyzer a;
  sym::bind_size_hints(a, /*exact=*/false);  // size symbols of a size-generic compile are >= 1
  for (size_t i = 0; i < ranges.size(); ++i)
    a.bind_loop_var(loop_var(static_cast<int>(i)), ranges[i]);
  for (size_t i = 0; i < reduction_ranges.size(); ++i)
    a.bind_loop_var(reduction_var(static_cast<int>(i)), reduction_ranges[i]);
  return a;
}

sym::Analyzer loop_analyzer(const std::vector<int64_t>& ranges,
                            const std::vector<int64_t>& reduction_ranges) {
  auto exprs = [](const std::vector<int64_t>& v) {
    return std::vector<sym::Expr>(v.begin(), v.end());
  };
  return loop_analyzer(exprs(ranges), exprs(reduction_ranges));
}

}  // namespace coil

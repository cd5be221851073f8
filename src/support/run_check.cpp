#include "support/run_check.h"

#include <fmt/format.h>

#include "support/check.h"

namespace coil {

std::string run_check_message(const RunCheck& check, int64_t value, int64_t limit) {
  switch (check.kind) {
    case RunCheck::Kind::index_in_range:
      return fmt::format("{}: index {} is out of range for a dim of size {} (valid: {} to {})",
                         check.op, value, limit, -limit, limit - 1);
    case RunCheck::Kind::nonzero_divisor:
      return fmt::format("{}: integer division by zero ({} by 0)", check.op, value);
    case RunCheck::Kind::nonnegative_exponent:
      return fmt::format("{}: integers to negative integer powers are not allowed ({} ^ {})",
                         check.op, limit, value);
  }
  COIL_UNREACHABLE("bad run check kind");
}

const char* run_check_kind_name(RunCheck::Kind kind) {
  switch (kind) {
    case RunCheck::Kind::index_in_range:
      return "index_in_range";
    case RunCheck::Kind::nonzero_divisor:
      return "nonzero_divisor";
    case RunCheck::Kind::nonnegative_exponent:
      return "nonnegative_exponent";
  }
  COIL_UNREACHABLE("bad run check kind");
}

std::optional<RunCheck::Kind> parse_run_check_kind(std::string_view name) {
  for (auto k : {RunCheck::Kind::index_in_range, RunCheck::Kind::nonzero_divisor,
                 RunCheck::Kind::nonnegative_exponent})
    if (name == run_check_kind_name(k)) return k;
  return std::nullopt;
}

}  // namespace coil

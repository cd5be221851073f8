#include "support/check.h"

namespace coil {

void internal_error_at(const char* file, int line, const std::string& message) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, message));
}

}  // namespace coil

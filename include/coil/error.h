// coil's three diagnostic channels (see docs/architecture.md):
//   coil::Error          a user error: bad input, shape mismatch, unsupported op or dtype.
//                        Messages start lower-case and name the op, the value and the mismatch.
//   coil::InternalError  a bug in coil; carries the file and line of the failed check.
//   warnings             printed through the log (support/log.h), never thrown.
#pragma once

#include <stdexcept>
#include <string>

namespace coil {

/// An error the caller caused and can catch: malformed model, mismatched shapes, unknown op.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A violated invariant inside coil. Reaching one is always a coil bug.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

}  // namespace coil

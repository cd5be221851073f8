// coil's three diagnostic channels (see docs/architecture.md):
//   coil::Error          a user error: bad input, shape mismatch, unknown op or dtype.
//                        Messages start lower-case and name the op, the value and the mismatch.
//     coil::UnsupportedError  the input is valid but coil cannot handle it (an ONNX op or
//                        dtype it lacks, a feature a backend does not have); the CLI exits 3
//                        for it rather than 2, telling "fix your input" from "coil cannot".
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

/// A valid model, or a valid use of an option, that coil does not support (yet).
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& message) : Error(message) {}
};

/// A violated invariant inside coil. Reaching one is always a coil bug.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

}  // namespace coil

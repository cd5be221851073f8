// Test helper: the message of the coil::Error a callable throws.
#pragma once

#include <string>

#include "coil/error.h"

namespace coil::testing {

/// Runs `f` and returns the coil::Error message it throws ("" if it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace coil::testing

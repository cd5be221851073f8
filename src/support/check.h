// Helpers to raise coil's diagnostics with fmt-style messages.
//   COIL_USER_CHECK(cond, "reduction over dim {} of {} has extent 0", d, name);
//   COIL_SUPPORTED_CHECK(cond, "{}-D windows are not supported", r);  // valid, but not handled
//   COIL_ASSERT(cond, "lowering produced {} ranges", n);   // internal invariant
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coil/error.h"

namespace coil {

template <typename... Args>
[[noreturn]] void user_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void unsupported_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UnsupportedError(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void internal_error_at(const char* file, int line, const std::string& message);

}  // namespace coil

#define COIL_USER_CHECK(cond, ...)                \
  do {                                            \
    if (!(cond)) ::coil::user_error(__VA_ARGS__); \
  } while (0)

#define COIL_SUPPORTED_CHECK(cond, ...)                  \
  do {                                                   \
    if (!(cond)) ::coil::unsupported_error(__VA_ARGS__); \
  } while (0)

#define COIL_ASSERT(cond, ...)                                                  \
  do {                                                                          \
    if (!(cond))                                                                \
      ::coil::internal_error_at(                                                \
          __FILE__, __LINE__,                                                   \
          std::string("check failed: " #cond ": ") + fmt::format(__VA_ARGS__)); \
  } while (0)

#define COIL_UNREACHABLE(...) \
  ::coil::internal_error_at(__FILE__, __LINE__, fmt::format(__VA_ARGS__))

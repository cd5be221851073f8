#include "version.h"

#include <fmt/format.h>

#include "coil/error.h"
#include "runtime/code_cache.h"
#include "runtime/isa.h"
#include "runtime/toolchain.h"
#include "support/env.h"

namespace coil::cli {
namespace {

std::string build_compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "an unknown compiler";
#endif
}

}  // namespace

std::string version_text() {
  std::string s = version_line() + "\n";
  s += fmt::format("built with:      {}\n", build_compiler());
  if (!build_sanitizer_flags().empty())
    s += fmt::format("sanitizers:      {} (coil and its kernels)\n", build_sanitizer_flags());
  // The rest depends on this machine and may fail (no compiler on PATH, a bad COIL_CPU_ISA):
  // --version still prints what it can.
  try {
    const Toolchain& tc = Toolchain::get();
    s += fmt::format("kernel compiler: {} ({})\n", tc.cxx, tc.version);
  } catch (const Error& e) {
    s += fmt::format("kernel compiler: none ({})\n", e.what());
  }
  try {
    std::string forced = env(EnvVar::cpu_isa).empty() ? "" : ", from COIL_CPU_ISA";
    s += fmt::format("host ISA:        {}{}\n", host_isa().name, forced);
  } catch (const Error& e) {
    s += fmt::format("host ISA:        unknown ({})\n", e.what());
  }
  try {
    s += fmt::format("code cache:      {}", cache_root().string());
  } catch (const Error& e) {
    s += fmt::format("code cache:      unusable ({})", e.what());
  }
  return s;
}

}  // namespace coil::cli

// The two tiers of the test suite. `scripts/test.sh` (CI) runs the default tier, which must
// finish in under 20 minutes from a cold code cache on the 2-core CI machine; with
// COIL_SLOW_TESTS=1 it also runs the tests labeled `slow` and the whole of every sweep that
// the default tier thins. Nearly all of a cold run's time is g++ compiling kernel modules
// (0.3-4 s each, about 2,100 of them; docs/testing.md has the measurements), so a sweep is
// thinned by running fewer distinct modules, never by loosening a comparison.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace coil::testing {

/// True when COIL_SLOW_TESTS=1: run every case of every sweep.
inline bool slow_tests_enabled() {
  const char* v = std::getenv("COIL_SLOW_TESTS");
  return v && std::strcmp(v, "1") == 0;
}

/// Whether the default tier runs case `index` of a sweep that it thins to one case in `every`
/// (the first, then every `every`-th): all cases with COIL_SLOW_TESTS=1.
inline bool in_default_tier(size_t index, size_t every) {
  return slow_tests_enabled() || index % every == 0;
}

}  // namespace coil::testing

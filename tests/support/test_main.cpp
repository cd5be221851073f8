// Shared main for coil's GoogleTest binaries: every test process uses a cache directory
// inside the build tree (COIL_TEST_CACHE_DIR, default build/test-cache) unless COIL_CACHE_DIR is
// already set, so tests never touch the user's cache; and verifies the IR after every compile
// pass (COIL_VERIFY_IR=1, driver/pass_checks.h) unless COIL_VERIFY_IR is already set. Processes
// the tests start (the CLI, coil_fuzz) inherit both.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (!std::getenv("COIL_CACHE_DIR")) {
    std::string dir = std::string(COIL_BINARY_DIR) + "/test-cache";
    setenv("COIL_CACHE_DIR", dir.c_str(), 1);
  }
  setenv("COIL_VERIFY_IR", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

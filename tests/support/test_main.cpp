// Shared main for coil's GoogleTest binaries: every test process uses a cache directory
// inside the build tree (COIL_TEST_CACHE_DIR, default build/test-cache) unless COIL_CACHE_DIR is
// already set, so tests never touch the user's cache; and verifies the IR after every compile
// pass (COIL_VERIFY_IR=1, driver/pass_checks.h) unless COIL_VERIFY_IR is already set. Processes
// the tests start (the CLI, coil_fuzz) inherit both.
//
// It also keeps freed memory in the process (mallopt below): the tests allocate and free
// tensors of up to a few MB thousands of times (inputs, the reference interpreter's offset
// tables), and glibc's defaults return each one to the kernel (mmap above 128 KB-32 MB, trim
// above 128 KB), so every allocation page-faulted again. On the shared VMs page faults are
// slow: a warm Elementwise.BinaryOpsWithBroadcasting took 7.9 s (3.2 s of it system time)
// and takes 3.0 s (0.4 s) this way. scripts/test.sh sets the same for the processes that are not
// GoogleTest binaries (GLIBC_TUNABLES).
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (!std::getenv("COIL_CACHE_DIR")) {
    std::string dir = std::string(COIL_BINARY_DIR) + "/test-cache";
    setenv("COIL_CACHE_DIR", dir.c_str(), 1);
  }
  setenv("COIL_VERIFY_IR", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

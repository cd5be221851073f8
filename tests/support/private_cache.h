// Test helpers for tests of the caches: a private COIL_CACHE_DIR for one test, and reading a
// file back as text.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace coil::testing {

/// A private cache directory for one test (COIL_CACHE_DIR, below the build directory), removed
/// and the old value restored afterwards.
class PrivateCache {
 public:
  explicit PrivateCache(const std::string& name) {
    const char* old = std::getenv("COIL_CACHE_DIR");
    old_ = old ? old : "";
    dir_ = std::filesystem::path(COIL_BINARY_DIR) / "test-cache" /
           fmt::format("{}-{}-{}", name, getpid(),
                       std::chrono::steady_clock::now().time_since_epoch().count());
    setenv("COIL_CACHE_DIR", dir_.c_str(), 1);
  }
  ~PrivateCache() {
    setenv("COIL_CACHE_DIR", old_.c_str(), 1);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PrivateCache(const PrivateCache&) = delete;
  PrivateCache& operator=(const PrivateCache&) = delete;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::string old_;
  std::filesystem::path dir_;
};

/// The file's contents ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace coil::testing

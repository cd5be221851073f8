// What `coil --version` prints: coil's version and the commit it was built from, the compiler
// that built it, and what generated kernels will use on this machine (the host ISA and the C++
// compiler), which is what a bug report needs.
#pragma once

#include <string>

namespace coil::cli {

/// CMakeLists.txt's project version, "0.1.0".
extern const char* const kCoilVersion;
/// `git describe --always --dirty` of the source tree when coil was built (cmake/version.cmake),
/// or a note saying it was not a git checkout.
extern const char* const kCoilGitCommit;
/// CMAKE_BUILD_TYPE, "Release".
extern const char* const kCoilBuildType;

/// The first line of version_text(), "coil 0.1.0 (commit abc1234, Release build)"; also what
/// the C ABI's coil_version() returns (include/coil/coil_c.h).
inline std::string version_line() {
  return std::string("coil ") + kCoilVersion + " (commit " + kCoilGitCommit + ", " +
         kCoilBuildType + " build)";
}

/// The lines `coil --version` prints (without a final newline).
std::string version_text();

}  // namespace coil::cli

// coil's version and the build it comes from, for `coil --version` (tools/version.h) and the C
// ABI's coil_version() (include/coil/coil_c.h). The constants are defined in a file CMake
// generates on every build (cmake/version_info.cmake), linked into both.
#pragma once

#include <string>

namespace coil {

/// CMakeLists.txt's project version, "0.1.0".
extern const char* const kCoilVersion;
/// `git describe --always --dirty` of the source tree when coil was built
/// (cmake/version_info.cmake), or a note saying it was not a git checkout.
extern const char* const kCoilGitCommit;
/// CMAKE_BUILD_TYPE, "Release".
extern const char* const kCoilBuildType;

/// "coil 0.1.0 (commit abc1234, Release build)": the first line of `coil --version`, and what
/// coil_version() returns.
inline std::string version_line() {
  return std::string("coil ") + kCoilVersion + " (commit " + kCoilGitCommit + ", " +
         kCoilBuildType + " build)";
}

}  // namespace coil

#include "runtime/runtime_libraries.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "support/check.h"
#include "support/env.h"

namespace coil {
namespace fs = std::filesystem;

std::string vmath_dir() {
  std::string forced = env(EnvVar::vmath_dir);
  if (!forced.empty()) {
    fs::path dir = fs::absolute(forced);
    COIL_USER_CHECK(fs::exists(dir / "libcoil_vmath.so"),
                    "COIL_VMATH_DIR={}: no libcoil_vmath.so there", forced);
    return dir.string();
  }
  std::error_code ec;
  // Beside the file this code was loaded from, or in ../lib from it: a libcoil_c.so or
  // libcoil.so with lib/'s other libraries (a Python host loads it from there, an installed
  // prefix holds them together), or an installed bin/coil.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&vmath_dir), &info) != 0 && info.dli_fname &&
      info.dli_fname[0] != '\0') {
    fs::path dir = fs::absolute(fs::path(info.dli_fname), ec).parent_path();
    for (const fs::path& d : {dir, dir.parent_path() / "lib"})
      if (!ec && fs::exists(d / "libcoil_vmath.so", ec)) return fs::weakly_canonical(d).string();
  }
#ifdef COIL_VMATH_BUILD_DIR
  if (fs::exists(fs::path(COIL_VMATH_BUILD_DIR) / "libcoil_vmath.so", ec))
    return COIL_VMATH_BUILD_DIR;
#endif
  return "";
}

void load_runtime_libraries() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::string dir = vmath_dir();
    if (dir.empty()) return;
    // Never closed: modules loaded later depend on them for the life of the process.
    for (const char* lib : {"libcoil_vmath.so", "libcoil_extern.so"}) {
      fs::path path = fs::path(dir) / lib;
      std::error_code ec;
      if (fs::exists(path, ec)) ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
  });
}

}  // namespace coil

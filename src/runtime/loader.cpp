#include "runtime/loader.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "support/check.h"

namespace coil {
namespace {

// Libraries open in this process, by absolute path. Weak, so that the map never keeps one
// loaded; dlopen would return the same handle anyway, this only avoids a second wrapper.
struct OpenLibraries {
  std::mutex mutex;
  std::map<std::filesystem::path, std::weak_ptr<SharedLibrary>> by_path;
};

OpenLibraries& open_libraries() {
  static OpenLibraries* libs = new OpenLibraries;  // leaked: destructors may run at exit
  return *libs;
}

// A module built with -fopenmp may be what loaded the OpenMP runtime into this process. The
// runtime's worker threads outlive the parallel region, so unloading the runtime together with
// the module (dlclose) would pull the code out from under them (a crash in a worker thread).
// libomp is linked NODELETE; libgomp is not, so mark it so once it is loaded. RTLD_NOLOAD makes
// this a no-op when it is not.
void pin_openmp_runtime() {
  if (void* gomp = ::dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) {
    ::dlclose(gomp);  // drops our extra reference; NODELETE stays
  }
}

}  // namespace

std::shared_ptr<SharedLibrary> SharedLibrary::open(const std::filesystem::path& path) {
  std::filesystem::path abs = std::filesystem::absolute(path).lexically_normal();
  OpenLibraries& libs = open_libraries();
  std::lock_guard<std::mutex> lock(libs.mutex);
  auto it = libs.by_path.find(abs);
  if (it != libs.by_path.end()) {
    if (std::shared_ptr<SharedLibrary> lib = it->second.lock()) return lib;
  }
  // dlerror() is per-thread in glibc; the lock only guards the map.
  void* handle = ::dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    user_error("cannot load shared library {}: {}", abs.string(), err ? err : "unknown error");
  }
  pin_openmp_runtime();
  std::shared_ptr<SharedLibrary> lib(new SharedLibrary(abs, handle));
  libs.by_path[abs] = lib;
  return lib;
}

void* SharedLibrary::symbol(std::string_view name) const {
  std::string n(name);
  ::dlerror();  // clear a stale error so that the one below belongs to this call
  void* p = ::dlsym(handle_, n.c_str());
  if (!p) {
    const char* err = ::dlerror();
    user_error("shared library {} has no symbol '{}'{}{}", path_.string(), n, err ? ": " : "",
               err ? err : "");
  }
  return p;
}

SharedLibrary::~SharedLibrary() {
  {
    OpenLibraries& libs = open_libraries();
    std::lock_guard<std::mutex> lock(libs.mutex);
    auto it = libs.by_path.find(path_);
    // Only erase our own (expired) slot: a new wrapper for the path may already be there.
    if (it != libs.by_path.end() && it->second.expired()) libs.by_path.erase(it);
  }
  ::dlclose(handle_);
}

}  // namespace coil

// Loading compiled kernels: a shared object opened with dlopen(RTLD_NOW | RTLD_LOCAL).
// RTLD_NOW so that an unresolved symbol fails here, with dlerror's message, rather than at the
// first call; RTLD_LOCAL so that two modules defining the same kernel names never interpose.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace coil {

/// An open shared object. Closed (dlclose) when the last shared_ptr goes away, so keep one
/// alive for as long as any function pointer taken from it may be called.
class SharedLibrary {
 public:
  /// Opens `path`, or returns the handle already open in this process for the same path.
  /// Throws coil::Error with dlerror()'s message when it cannot be loaded.
  static std::shared_ptr<SharedLibrary> open(const std::filesystem::path& path);

  /// The address of `name`. Throws coil::Error when the library does not define it.
  void* symbol(std::string_view name) const;

  /// Typed convenience: symbol_as<int (*)()>("f").
  template <typename Fn>
  Fn symbol_as(std::string_view name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }

  const std::filesystem::path& path() const { return path_; }

  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

 private:
  SharedLibrary(std::filesystem::path path, void* handle)
      : path_(std::move(path)), handle_(handle) {}

  std::filesystem::path path_;
  void* handle_;
};

}  // namespace coil

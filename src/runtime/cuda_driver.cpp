#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "support/check.h"
#include "support/env.h"

namespace coil::cuda {
namespace {

template <typename Fn>
void resolve(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  COIL_USER_CHECK(fn != nullptr, "{} is missing from the CUDA library loaded: a version too old",
                  name);
}

}  // namespace

const Driver& driver() {
  static Driver d{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      error = fmt::format(
          "a GPU model needs the NVIDIA driver, and libcuda.so.1 does not load here ({})",
          e ? e : "unknown reason");
      return;
    }
    try {
      resolve(lib, d.cuInit, "cuInit");
      resolve(lib, d.cuDeviceGet, "cuDeviceGet");
      resolve(lib, d.cuDeviceGetCount, "cuDeviceGetCount");
      resolve(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
      resolve(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
      resolve(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent");
      resolve(lib, d.cuCtxSynchronize, "cuCtxSynchronize");
      resolve(lib, d.cuModuleLoadData, "cuModuleLoadData");
      resolve(lib, d.cuModuleUnload, "cuModuleUnload");
      resolve(lib, d.cuModuleGetFunction, "cuModuleGetFunction");
      resolve(lib, d.cuFuncGetAttribute, "cuFuncGetAttribute");
      resolve(lib, d.cuFuncSetAttribute, "cuFuncSetAttribute");
      resolve(lib, d.cuFuncSetCacheConfig, "cuFuncSetCacheConfig");
      resolve(lib, d.cuMemAlloc, "cuMemAlloc_v2");
      resolve(lib, d.cuMemFree, "cuMemFree_v2");
      resolve(lib, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
      resolve(lib, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
      resolve(lib, d.cuLaunchKernel, "cuLaunchKernel");
      resolve(lib, d.cuGetErrorString, "cuGetErrorString");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  COIL_USER_CHECK(error.empty(), "{}", error);
  return d;
}

const Blas& blas() {
  static Blas b{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string forced_name = env(EnvVar::cublas);
    const char* forced = forced_name.c_str();
    std::vector<std::string> names;
    if (forced && *forced) names.push_back(forced);
    for (const char* n : {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"})
      names.push_back(n);
    void* lib = nullptr;
    std::string tried;
    for (const std::string& n : names) {
      lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += (tried.empty() ? "" : ", ") + n;
      if (forced && *forced) break;  // a named library or nothing
    }
    if (lib == nullptr) {
      error = fmt::format(
          "a GPU model with matmuls needs cuBLAS, and none loads here (tried {}): set "
          "COIL_CUBLAS to libcublas.so's path (a pip-installed CUDA keeps it in "
          "site-packages/nvidia/cublas/lib)",
          tried);
      return;
    }
    try {
      resolve(lib, b.cublasCreate, "cublasCreate_v2");
      resolve(lib, b.cublasSetStream, "cublasSetStream_v2");
      resolve(lib, b.cublasSgemm, "cublasSgemm_v2");
      resolve(lib, b.cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  COIL_USER_CHECK(error.empty(), "{}", error);
  return b;
}

void check(CUresult r, const std::string& what) {
  if (r == 0) return;
  const char* msg = nullptr;
  driver().cuGetErrorString(r, &msg);
  user_error("{}: CUDA error {} ({})", what, r, msg ? msg : "no message");
}

}  // namespace coil::cuda

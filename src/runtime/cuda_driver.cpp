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

// An entry point some models need: null when absent, its name added to `missing`.
template <typename Fn>
void resolve_optional(void* lib, Fn& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
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
      // The names a program built with cuda.h calls (its #defines to the versioned ones).
      std::string& m = d.graphs_missing;
      resolve_optional(lib, d.cuStreamCreate, "cuStreamCreate", m);
      resolve_optional(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", m);
      resolve_optional(lib, d.cuStreamSynchronize, "cuStreamSynchronize", m);
      resolve_optional(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", m);
      resolve_optional(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", m);
      resolve_optional(lib, d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", m);
      resolve_optional(lib, d.cuStreamBeginCapture, "cuStreamBeginCapture_v2", m);
      resolve_optional(lib, d.cuStreamEndCapture, "cuStreamEndCapture", m);
      resolve_optional(lib, d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", m);
      resolve_optional(lib, d.cuGraphLaunch, "cuGraphLaunch", m);
      resolve_optional(lib, d.cuGraphExecDestroy, "cuGraphExecDestroy", m);
      resolve_optional(lib, d.cuGraphDestroy, "cuGraphDestroy", m);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  COIL_USER_CHECK(error.empty(), "{}", error);
  return d;
}

void* open_library(const std::string& forced, const std::vector<std::string>& names,
                   const std::string& what, const std::string& hint) {
  std::vector<std::string> tries;
  if (!forced.empty())
    tries.push_back(forced);  // a named library or nothing
  else
    tries = names;
  std::string tried;
  for (const std::string& n : tries) {
    if (void* lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* e = ::dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", n, e ? e : "unknown reason");
  }
  user_error("{}, and none loads here (tried {}): {}", what, tried, hint);
}

const Blas& blas() {
  static Blas b{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      void* lib =
          open_library(env(EnvVar::cublas),
                       {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
                       "a GPU model with matmuls needs cuBLAS",
                       "set COIL_CUBLAS to libcublas.so's path (a pip-installed CUDA keeps it in "
                       "site-packages/nvidia/cublas/lib)");
      resolve(lib, b.cublasCreate, "cublasCreate_v2");
      resolve(lib, b.cublasSetStream, "cublasSetStream_v2");
      resolve(lib, b.cublasSgemm, "cublasSgemm_v2");
      resolve(lib, b.cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
      resolve(lib, b.cublasSetMathMode, "cublasSetMathMode");
      resolve(lib, b.cublasGemmEx, "cublasGemmEx");
      resolve(lib, b.cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  COIL_USER_CHECK(error.empty(), "{}", error);
  return b;
}

const Dnn& dnn() {
  static Dnn d{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      void* lib = open_library(env(EnvVar::cudnn), {"libcudnn.so.9", "libcudnn.so.8"},
                               "a GPU model with convolutions needs cuDNN",
                               "set COIL_CUDNN to libcudnn.so's path (a pip-installed torch "
                               "keeps it in site-packages/nvidia/cudnn/lib)");
      resolve(lib, d.cudnnGetVersion, "cudnnGetVersion");
      resolve(lib, d.cudnnGetErrorString, "cudnnGetErrorString");
      resolve(lib, d.cudnnCreate, "cudnnCreate");
      resolve(lib, d.cudnnDestroy, "cudnnDestroy");
      resolve(lib, d.cudnnSetStream, "cudnnSetStream");
      resolve(lib, d.cudnnCreateTensorDescriptor, "cudnnCreateTensorDescriptor");
      resolve(lib, d.cudnnDestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
      resolve(lib, d.cudnnSetTensor4dDescriptorEx, "cudnnSetTensor4dDescriptorEx");
      resolve(lib, d.cudnnCreateFilterDescriptor, "cudnnCreateFilterDescriptor");
      resolve(lib, d.cudnnDestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
      resolve(lib, d.cudnnSetFilter4dDescriptor, "cudnnSetFilter4dDescriptor");
      resolve(lib, d.cudnnCreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
      resolve(lib, d.cudnnDestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
      resolve(lib, d.cudnnSetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor");
      resolve(lib, d.cudnnSetConvolutionGroupCount, "cudnnSetConvolutionGroupCount");
      resolve(lib, d.cudnnSetConvolutionMathType, "cudnnSetConvolutionMathType");
      resolve(lib, d.cudnnGetConvolutionForwardAlgorithm_v7,
              "cudnnGetConvolutionForwardAlgorithm_v7");
      resolve(lib, d.cudnnGetConvolutionForwardWorkspaceSize,
              "cudnnGetConvolutionForwardWorkspaceSize");
      resolve(lib, d.cudnnConvolutionForward, "cudnnConvolutionForward");
      resolve(lib, d.cudnnAddTensor, "cudnnAddTensor");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  COIL_USER_CHECK(error.empty(), "{}", error);
  return d;
}

void check_dnn(int status, const std::string& what) {
  if (status == 0) return;
  const char* msg = dnn().cudnnGetErrorString(status);
  user_error("{}: cuDNN status {} ({})", what, status, msg ? msg : "no message");
}

const Driver& require_graphs() {
  const Driver& d = driver();
  COIL_USER_CHECK(d.graphs_missing.empty(),
                  "CUDA graphs need {} from libcuda.so.1, which this driver lacks: a driver of "
                  "CUDA 11.4 or later",
                  d.graphs_missing);
  return d;
}

void check(CUresult r, const std::string& what) {
  if (r == 0) return;
  const char* msg = nullptr;
  driver().cuGetErrorString(r, &msg);
  user_error("{}: CUDA error {} ({})", what, r, msg ? msg : "no message");
}

}  // namespace coil::cuda

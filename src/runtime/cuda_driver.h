// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"): what an exported GPU
// model (runtime/gpu_export.cpp) needs to load cubins and launch kernels, with no CUDA toolkit
// at build time and no CUDA dependency for a process that never loads a GPU model. Only the
// few entry points used are declared, with the driver's own (stable, C) signatures; handles are
// opaque pointers and device addresses 64-bit integers, as in cuda.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace coil::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncSetCacheConfig)(CUfunction, int);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

/// cuBLAS, for the plain products an exported model calls it for (its SGEMMs), loaded once per
/// process with dlopen: $COIL_CUBLAS if set (a path), else libcublas.so.13, .12, .11, then
/// libcublas.so, through the loader's search path (a pip-installed CUDA keeps it in
/// site-packages/nvidia/cublas/lib: put that on LD_LIBRARY_PATH or name it in COIL_CUBLAS).
using CublasHandle = void*;
struct Blas {
  int (*cublasCreate)(CublasHandle*);
  int (*cublasSetStream)(CublasHandle, CUstream);
  int (*cublasSgemm)(CublasHandle, int, int, int, int, int, const float*, const float*, int,
                     const float*, int, const float*, float*, int);
  int (*cublasSgemmStridedBatched)(CublasHandle, int, int, int, int, int, const float*,
                                   const float*, int, long long, const float*, int, long long,
                                   const float*, float*, int, long long, int);
};
const Blas& blas();

/// The driver, loaded once per process; a coil::Error saying why when there is none
/// (libcuda.so.1 missing: no NVIDIA driver on this machine).
const Driver& driver();

/// Raises a coil::Error "WHAT: CUDA error N (its message)" unless `r` is 0 (CUDA_SUCCESS).
void check(CUresult r, const std::string& what);

// Attribute numbers of cuda.h used here.
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedPerBlockOptin = 97;
inline constexpr int kFuncAttrSharedSizeBytes = 1;
inline constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
inline constexpr int kFuncCachePreferShared = 1;

}  // namespace coil::cuda

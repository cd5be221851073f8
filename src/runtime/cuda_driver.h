// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"): what an exported GPU
// model (runtime/gpu_export.cpp) needs to load cubins and launch kernels, with no CUDA toolkit
// at build time and no CUDA dependency for a process that never loads a GPU model. Only the
// few entry points used are declared, with the driver's own (stable, C) signatures; handles are
// opaque pointers and device addresses 64-bit integers, as in cuda.h.
//
// Signatures, versioned symbol names and enum values as in cuda.h of CUDA 11.6 (CUDA_VERSION
// 11060: its `#define cuStreamBeginCapture cuStreamBeginCapture_v2`, `cuMemcpyHtoDAsync
// cuMemcpyHtoDAsync_v2`, ... are resolved by their versioned names, what a program compiled
// against that header calls); cublas_api.h of CUDA 12.x for cuBLAS; cudnn_ops_infer.h /
// cudnn_cnn_infer.h of cuDNN 8.x, whose legacy API cuDNN 9 keeps (cudnn_ops.h, cudnn_cnn.h).
// Where a build finds NVIDIA's headers, tests/gpu_fake/cuda_headers_test.cpp compares every
// declaration, value and the perf struct's layout with them (checked with CUDA 13.0's cuda.h,
// cuBLAS 13.1 and cuDNN 9.19; their libcudnn.so.9, libcublas.so.13 and the driver stub export
// every name resolved here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace coil::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
using CUgraph = void*;
using CUgraphExec = void*;

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
  // Streams, async copies and CUDA graphs (GpuLoadOptions::cuda_graph). Resolved when present:
  // a driver without them fails only a model that asks for a graph (require_graphs()).
  CUresult (*cuStreamCreate)(CUstream*, unsigned);                            // cuStreamCreate
  CUresult (*cuStreamDestroy)(CUstream);                                      // cuStreamDestroy_v2
  CUresult (*cuStreamSynchronize)(CUstream);                                  // cuStreamSynchronize
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);  // _v2
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);        // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  // _v2
  CUresult (*cuStreamBeginCapture)(CUstream, int);     // cuStreamBeginCapture_v2
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);  // cuStreamEndCapture
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  /// Why the entry points above are not all there ("" when they are).
  std::string graphs_missing;
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
  int (*cublasSetMathMode)(CublasHandle, int);
  // bf16 / f16 products, as torch calls them (aten/src/ATen/cuda/CUDABlas.cpp): A, B and C of
  // one data type, float alpha and beta, fp32 accumulation.
  int (*cublasGemmEx)(CublasHandle, int, int, int, int, int, const void*, const void*, int, int,
                      const void*, int, int, const void*, void*, int, int, int, int);
  int (*cublasGemmStridedBatchedEx)(CublasHandle, int, int, int, int, int, const void*, const void*,
                                    int, int, long long, const void*, int, int, long long,
                                    const void*, void*, int, int, long long, int, int, int);
};
const Blas& blas();

// cublas_api.h / library_types.h values.
inline constexpr int kCudaR32F = 0;                    // CUDA_R_32F
inline constexpr int kCudaR16F = 2;                    // CUDA_R_16F
inline constexpr int kCudaR16BF = 14;                  // CUDA_R_16BF
inline constexpr int kCublasCompute32F = 68;           // CUBLAS_COMPUTE_32F
inline constexpr int kCublasGemmDefaultTensorOp = 99;  // CUBLAS_GEMM_DEFAULT_TENSOR_OP (torch's)
// cublasMath_t: CUBLAS_DEFAULT_MATH 0, CUBLAS_TF32_TENSOR_OP_MATH 3,
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION 16 (a flag).
inline constexpr int kCublasDefaultMath = 0;
inline constexpr int kCublasTf32TensorOpMath = 3;
inline constexpr int kCublasDisallowReducedPrecisionReduction = 16;

/// cuDNN's legacy convolution API, for the convolutions of an exported model, loaded once per
/// process with dlopen: $COIL_CUDNN if set (a path), else libcudnn.so.9, then .8 (a pip torch
/// keeps it in site-packages/nvidia/cudnn/lib). Handles and descriptors are opaque pointers;
/// statuses ints (CUDNN_STATUS_SUCCESS 0).
using CudnnHandle = void*;
using CudnnDesc = void*;
/// cudnnConvolutionFwdAlgoPerf_t of cuDNN 8 and 9 (cudnn_cnn_infer.h / cudnn_cnn.h): 48 bytes.
struct CudnnFwdAlgoPerf {
  int algo;  // cudnnConvolutionFwdAlgo_t
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;  // cudnnMathType_t
  int reserved[3];
};
static_assert(sizeof(CudnnFwdAlgoPerf) == 48, "cudnnConvolutionFwdAlgoPerf_t is 48 bytes");
struct Dnn {
  size_t (*cudnnGetVersion)();
  const char* (*cudnnGetErrorString)(int);
  int (*cudnnCreate)(CudnnHandle*);
  int (*cudnnDestroy)(CudnnHandle);
  int (*cudnnSetStream)(CudnnHandle, CUstream);
  int (*cudnnCreateTensorDescriptor)(CudnnDesc*);
  int (*cudnnDestroyTensorDescriptor)(CudnnDesc);
  // (desc, dataType, n, c, h, w, nStride, cStride, hStride, wStride)
  int (*cudnnSetTensor4dDescriptorEx)(CudnnDesc, int, int, int, int, int, int, int, int, int);
  int (*cudnnCreateFilterDescriptor)(CudnnDesc*);
  int (*cudnnDestroyFilterDescriptor)(CudnnDesc);
  // (desc, dataType, format, k, c, h, w): the data type before the format
  int (*cudnnSetFilter4dDescriptor)(CudnnDesc, int, int, int, int, int, int);
  int (*cudnnCreateConvolutionDescriptor)(CudnnDesc*);
  int (*cudnnDestroyConvolutionDescriptor)(CudnnDesc);
  // (desc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType)
  int (*cudnnSetConvolution2dDescriptor)(CudnnDesc, int, int, int, int, int, int, int, int);
  int (*cudnnSetConvolutionGroupCount)(CudnnDesc, int);
  int (*cudnnSetConvolutionMathType)(CudnnDesc, int);
  // (handle, xDesc, wDesc, convDesc, yDesc, requestedAlgoCount, *returnedAlgoCount, perf)
  int (*cudnnGetConvolutionForwardAlgorithm_v7)(CudnnHandle, CudnnDesc, CudnnDesc, CudnnDesc,
                                                CudnnDesc, int, int*, CudnnFwdAlgoPerf*);
  int (*cudnnGetConvolutionForwardWorkspaceSize)(CudnnHandle, CudnnDesc, CudnnDesc, CudnnDesc,
                                                 CudnnDesc, int, size_t*);
  // (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceBytes, beta, yDesc, y)
  int (*cudnnConvolutionForward)(CudnnHandle, const void*, CudnnDesc, const void*, CudnnDesc,
                                 const void*, CudnnDesc, int, void*, size_t, const void*, CudnnDesc,
                                 void*);
  // (handle, alpha, aDesc, A, beta, cDesc, C): C = alpha * A + beta * C, A broadcast
  int (*cudnnAddTensor)(CudnnHandle, const void*, CudnnDesc, const void*, const void*, CudnnDesc,
                        void*);
};
const Dnn& dnn();

// cudnn_ops_infer.h / cudnn_cnn_infer.h values.
inline constexpr int kCudnnDataFloat = 0;         // CUDNN_DATA_FLOAT
inline constexpr int kCudnnDataHalf = 2;          // CUDNN_DATA_HALF
inline constexpr int kCudnnDataBfloat16 = 9;      // CUDNN_DATA_BFLOAT16
inline constexpr int kCudnnTensorNchw = 0;        // CUDNN_TENSOR_NCHW
inline constexpr int kCudnnCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION
inline constexpr int kCudnnDefaultMath = 0;       // CUDNN_DEFAULT_MATH
inline constexpr int kCudnnTensorOpMath = 1;      // CUDNN_TENSOR_OP_MATH
inline constexpr int kCudnnFmaMath = 3;           // CUDNN_FMA_MATH
inline constexpr int kCudnnFwdAlgoCount = 8;      // CUDNN_CONVOLUTION_FWD_ALGO_COUNT

/// Raises a coil::Error "WHAT: cuDNN status N (its message)" unless `status` is 0.
void check_dnn(int status, const std::string& what);

/// dlopen's first library of `names` that loads ($VAR's path alone when set: a named library or
/// nothing), or a coil::Error saying what `what` needs and what was tried (testable here).
void* open_library(const std::string& forced, const std::vector<std::string>& names,
                   const std::string& what, const std::string& hint);

/// The driver, loaded once per process; a coil::Error saying why when there is none
/// (libcuda.so.1 missing: no NVIDIA driver on this machine).
const Driver& driver();

/// Raises a coil::Error "WHAT: CUDA error N (its message)" unless `r` is 0 (CUDA_SUCCESS).
void check(CUresult r, const std::string& what);

/// The driver, with the entry points CUDA graphs need, or a coil::Error naming the missing one.
const Driver& require_graphs();

// cuda.h values used for graphs.
inline constexpr unsigned kStreamDefault = 0;            // CU_STREAM_DEFAULT
inline constexpr int kStreamCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

// Attribute numbers of cuda.h used here.
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedPerBlockOptin = 97;
inline constexpr int kFuncAttrSharedSizeBytes = 1;
inline constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
inline constexpr int kFuncCachePreferShared = 1;

}  // namespace coil::cuda

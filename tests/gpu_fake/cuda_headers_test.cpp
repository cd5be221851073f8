// src/runtime/cuda_driver.h against NVIDIA's own headers, where the build finds them (a CUDA
// toolkit with cuDNN: tests/CMakeLists.txt adds this file then; the headers are only read, no
// CUDA library is linked). cuda_driver.h declares the entry points coil loads with dlopen by
// hand, so that building needs no toolkit: here every one's signature is compared with the
// header's (as calling conventions see it: pointers, 4- and 8-byte integers and enums, floats),
// every enum value and the cuDNN perf struct's layout with theirs, and the versioned names the
// runtime resolves with the ones cuda.h / cublas_v2.h #define.
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "runtime/cuda_driver.h"

namespace {

template <size_t N>
struct Int {};  // an integer or enum argument of N bytes

template <typename T>
struct canon {
  using type = T;
};
template <typename T>
struct canon<T*> {
  using type = void*;
};
template <typename T>
requires(std::is_enum_v<T> || std::is_integral_v<T>) struct canon<T> {
  using type = Int<sizeof(T)>;
};
template <typename F>
struct canon_fn;
template <typename R, typename... A>
struct canon_fn<R (*)(A...)> {
  using type = typename canon<R>::type (*)(typename canon<A>::type...);
};
template <typename Ours, typename Theirs>
constexpr bool same_abi =
    std::is_same_v<typename canon_fn<Ours>::type, typename canon_fn<Theirs>::type>;

using coil::cuda::Blas;
using coil::cuda::Dnn;
using coil::cuda::Driver;

#define SAME(S, field, real) \
  static_assert(same_abi<decltype(S::field), decltype(&real)>, #S "::" #field " vs " #real)

// cuda.h (the unversioned spellings: its #defines give the versioned functions).
SAME(Driver, cuInit, cuInit);
SAME(Driver, cuDeviceGet, cuDeviceGet);
SAME(Driver, cuDeviceGetCount, cuDeviceGetCount);
SAME(Driver, cuDeviceGetAttribute, cuDeviceGetAttribute);
SAME(Driver, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME(Driver, cuCtxSetCurrent, cuCtxSetCurrent);
SAME(Driver, cuCtxSynchronize, cuCtxSynchronize);
SAME(Driver, cuModuleLoadData, cuModuleLoadData);
SAME(Driver, cuModuleUnload, cuModuleUnload);
SAME(Driver, cuModuleGetFunction, cuModuleGetFunction);
SAME(Driver, cuFuncGetAttribute, cuFuncGetAttribute);
SAME(Driver, cuFuncSetAttribute, cuFuncSetAttribute);
SAME(Driver, cuFuncSetCacheConfig, cuFuncSetCacheConfig);
SAME(Driver, cuMemAlloc, cuMemAlloc);
SAME(Driver, cuMemFree, cuMemFree);
SAME(Driver, cuMemcpyHtoD, cuMemcpyHtoD);
SAME(Driver, cuMemcpyDtoH, cuMemcpyDtoH);
SAME(Driver, cuLaunchKernel, cuLaunchKernel);
SAME(Driver, cuGetErrorString, cuGetErrorString);
SAME(Driver, cuStreamCreate, cuStreamCreate);
SAME(Driver, cuStreamDestroy, cuStreamDestroy);
SAME(Driver, cuStreamSynchronize, cuStreamSynchronize);
SAME(Driver, cuMemcpyHtoDAsync, cuMemcpyHtoDAsync);
SAME(Driver, cuMemcpyDtoHAsync, cuMemcpyDtoHAsync);
SAME(Driver, cuMemcpyDtoDAsync, cuMemcpyDtoDAsync);
SAME(Driver, cuStreamBeginCapture, cuStreamBeginCapture);
SAME(Driver, cuStreamEndCapture, cuStreamEndCapture);
SAME(Driver, cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags);
SAME(Driver, cuGraphLaunch, cuGraphLaunch);
SAME(Driver, cuGraphExecDestroy, cuGraphExecDestroy);
SAME(Driver, cuGraphDestroy, cuGraphDestroy);

// cublas_v2.h / cublas_api.h. GemmEx and GemmStridedBatchedEx are overloaded in C++ (an inline
// wrapper taking the old cudaDataType compute type): the exported one is picked by its type.
SAME(Blas, cublasCreate, cublasCreate);
SAME(Blas, cublasSetStream, cublasSetStream);
SAME(Blas, cublasSgemm, cublasSgemm);
SAME(Blas, cublasSgemmStridedBatched, cublasSgemmStridedBatched);
SAME(Blas, cublasSetMathMode, cublasSetMathMode);
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                                cublasOperation_t, int, int, int, const void*,
                                                const void*, cudaDataType, int, long long,
                                                const void*, cudaDataType, int, long long,
                                                const void*, void*, cudaDataType, int, long long,
                                                int, cublasComputeType_t, cublasGemmAlgo_t);
[[maybe_unused]] constexpr GemmEx kGemmEx = &cublasGemmEx;
[[maybe_unused]] constexpr GemmStridedBatchedEx kGemmStridedBatchedEx = &cublasGemmStridedBatchedEx;
static_assert(same_abi<decltype(Blas::cublasGemmEx), GemmEx>);
static_assert(same_abi<decltype(Blas::cublasGemmStridedBatchedEx), GemmStridedBatchedEx>);

// cudnn.h (cudnn_ops.h, cudnn_cnn.h, cudnn_graph.h).
SAME(Dnn, cudnnGetVersion, cudnnGetVersion);
SAME(Dnn, cudnnGetErrorString, cudnnGetErrorString);
SAME(Dnn, cudnnCreate, cudnnCreate);
SAME(Dnn, cudnnDestroy, cudnnDestroy);
SAME(Dnn, cudnnSetStream, cudnnSetStream);
SAME(Dnn, cudnnCreateTensorDescriptor, cudnnCreateTensorDescriptor);
SAME(Dnn, cudnnDestroyTensorDescriptor, cudnnDestroyTensorDescriptor);
SAME(Dnn, cudnnSetTensor4dDescriptorEx, cudnnSetTensor4dDescriptorEx);
SAME(Dnn, cudnnCreateFilterDescriptor, cudnnCreateFilterDescriptor);
SAME(Dnn, cudnnDestroyFilterDescriptor, cudnnDestroyFilterDescriptor);
SAME(Dnn, cudnnSetFilter4dDescriptor, cudnnSetFilter4dDescriptor);
SAME(Dnn, cudnnCreateConvolutionDescriptor, cudnnCreateConvolutionDescriptor);
SAME(Dnn, cudnnDestroyConvolutionDescriptor, cudnnDestroyConvolutionDescriptor);
SAME(Dnn, cudnnSetConvolution2dDescriptor, cudnnSetConvolution2dDescriptor);
SAME(Dnn, cudnnSetConvolutionGroupCount, cudnnSetConvolutionGroupCount);
SAME(Dnn, cudnnSetConvolutionMathType, cudnnSetConvolutionMathType);
SAME(Dnn, cudnnGetConvolutionForwardWorkspaceSize, cudnnGetConvolutionForwardWorkspaceSize);
SAME(Dnn, cudnnConvolutionForward, cudnnConvolutionForward);
SAME(Dnn, cudnnAddTensor, cudnnAddTensor);
SAME(Dnn, cudnnGetConvolutionForwardAlgorithm_v7, cudnnGetConvolutionForwardAlgorithm_v7);

// The perf struct the runtime reads.
using Perf = coil::cuda::CudnnFwdAlgoPerf;
static_assert(sizeof(Perf) == sizeof(cudnnConvolutionFwdAlgoPerf_t));
static_assert(offsetof(Perf, algo) == offsetof(cudnnConvolutionFwdAlgoPerf_t, algo));
static_assert(offsetof(Perf, status) == offsetof(cudnnConvolutionFwdAlgoPerf_t, status));
static_assert(offsetof(Perf, memory) == offsetof(cudnnConvolutionFwdAlgoPerf_t, memory));
static_assert(offsetof(Perf, math_type) == offsetof(cudnnConvolutionFwdAlgoPerf_t, mathType));

// Values.
namespace c = coil::cuda;
static_assert(c::kAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(c::kAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(c::kAttrMaxSharedPerBlockOptin ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(c::kFuncAttrSharedSizeBytes == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
static_assert(c::kFuncAttrMaxDynamicSharedSizeBytes ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(c::kFuncCachePreferShared == CU_FUNC_CACHE_PREFER_SHARED);
static_assert(c::kStreamDefault == CU_STREAM_DEFAULT);
static_assert(c::kStreamCaptureModeThreadLocal == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(c::kCudaR32F == CUDA_R_32F && c::kCudaR16F == CUDA_R_16F &&
              c::kCudaR16BF == CUDA_R_16BF);
static_assert(c::kCublasCompute32F == CUBLAS_COMPUTE_32F);
static_assert(c::kCublasGemmDefaultTensorOp == CUBLAS_GEMM_DEFAULT_TENSOR_OP);
static_assert(c::kCublasDefaultMath == CUBLAS_DEFAULT_MATH);
static_assert(c::kCublasTf32TensorOpMath == CUBLAS_TF32_TENSOR_OP_MATH);
static_assert(c::kCublasDisallowReducedPrecisionReduction ==
              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
static_assert(c::kCudnnDataFloat == CUDNN_DATA_FLOAT && c::kCudnnDataHalf == CUDNN_DATA_HALF &&
              c::kCudnnDataBfloat16 == CUDNN_DATA_BFLOAT16);
static_assert(c::kCudnnTensorNchw == CUDNN_TENSOR_NCHW);
static_assert(c::kCudnnCrossCorrelation == CUDNN_CROSS_CORRELATION);
static_assert(c::kCudnnDefaultMath == CUDNN_DEFAULT_MATH &&
              c::kCudnnTensorOpMath == CUDNN_TENSOR_OP_MATH && c::kCudnnFmaMath == CUDNN_FMA_MATH);
static_assert(c::kCudnnFwdAlgoCount == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);

#define NAME(x) NAME_(x)
#define NAME_(x) #x

// The names cuda_driver.cpp resolves are the ones these headers' #defines give.
TEST(CudaHeaders, VersionedNamesAreTheHeadersOwn) {
  EXPECT_STREQ(NAME(cuMemAlloc), "cuMemAlloc_v2");
  EXPECT_STREQ(NAME(cuMemFree), "cuMemFree_v2");
  EXPECT_STREQ(NAME(cuMemcpyHtoD), "cuMemcpyHtoD_v2");
  EXPECT_STREQ(NAME(cuMemcpyDtoH), "cuMemcpyDtoH_v2");
  EXPECT_STREQ(NAME(cuMemcpyHtoDAsync), "cuMemcpyHtoDAsync_v2");
  EXPECT_STREQ(NAME(cuMemcpyDtoHAsync), "cuMemcpyDtoHAsync_v2");
  EXPECT_STREQ(NAME(cuMemcpyDtoDAsync), "cuMemcpyDtoDAsync_v2");
  EXPECT_STREQ(NAME(cuStreamDestroy), "cuStreamDestroy_v2");
  EXPECT_STREQ(NAME(cuStreamBeginCapture), "cuStreamBeginCapture_v2");
  EXPECT_STREQ(NAME(cuStreamCreate), "cuStreamCreate");
  EXPECT_STREQ(NAME(cuStreamEndCapture), "cuStreamEndCapture");
  EXPECT_STREQ(NAME(cuStreamSynchronize), "cuStreamSynchronize");
  EXPECT_STREQ(NAME(cuGraphLaunch), "cuGraphLaunch");
  EXPECT_STREQ(NAME(cuGraphInstantiateWithFlags), "cuGraphInstantiateWithFlags");
  EXPECT_STREQ(NAME(cuLaunchKernel), "cuLaunchKernel");
  EXPECT_STREQ(NAME(cublasCreate), "cublasCreate_v2");
  EXPECT_STREQ(NAME(cublasSetStream), "cublasSetStream_v2");
  EXPECT_STREQ(NAME(cublasSgemm), "cublasSgemm_v2");
  EXPECT_STREQ(NAME(cublasSgemmStridedBatched), "cublasSgemmStridedBatched");
  EXPECT_STREQ(NAME(cublasGemmEx), "cublasGemmEx");
  EXPECT_STREQ(NAME(cudnnGetConvolutionForwardAlgorithm_v7),
               "cudnnGetConvolutionForwardAlgorithm_v7");
  // What the headers are (the report's provenance).
  std::printf("cuda.h CUDA_VERSION %d, cuBLAS %d.%d, cuDNN %d.%d.%d\n", CUDA_VERSION,
              CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
}

}  // namespace

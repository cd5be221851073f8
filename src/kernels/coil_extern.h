// Extern kernels: the library calls generated code makes where a library beats a generated loop
// nest (Inductor's extern kernels: aten.mm, aten.convolution). This header only declares them;
// they are compiled once into libcoil_extern.so (src/kernels/extern/extern_kernels.cpp), which
// generated modules link (runtime/isa.h: extern_link_flags()), so that a module with extern
// calls does not compile oneDNN's handles, error paths and convolution planning again (the
// demo's module: 0.21-0.24 s of g++ less). Embedded into libcoil with the other runtime headers
// and written next to generated sources by the code cache. C++17, like all generated code.
//
//   sgemm_dnnl       row-major C = op(A) op(B) (alpha 1, beta 0) through oneDNN's dnnl_sgemm
//   sgemm_openblas   the same through OpenBLAS's cblas_sgemm; declared only when
//                    COIL_HAVE_OPENBLAS is defined (runtime/isa.h: extern_have_openblas())
//   Conv2d           a 2-D convolution (NCHW in and out, torch's conventions) through a oneDNN
//                    convolution primitive created once per call site:
//                      static coil::ext::Conv2d conv0(1, 64, 56, 56, 64, 3, 3, {1, 1},
//                                                     {1, 1, 1, 1}, {1, 1}, 1, true, false, true);
//                      conv0.run(x, w, bias, y);
//
// oneDNN and OpenBLAS (its OpenMP build) both run on the OpenMP runtime that gcc's -fopenmp
// links (libgomp), so they share the kernels' thread pool and follow omp_set_num_threads
// (coil::set_num_threads).
//
// Errors (a oneDNN status other than success, bad arguments) throw std::runtime_error naming
// the call, its shape and the status; generated code lets it propagate to CompiledModel::run.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#define COIL_EXTERN_API __attribute__((visibility("default")))

namespace coil {
namespace ext {

// ---- GEMM ----------------------------------------------------------------------------------

/// Row-major C[M,N] = op(A)[M,K] op(B)[K,N], alpha 1, beta 0. op(A) = A ([M,K], row stride lda)
/// or, with transA, A^T where A is [K,M] (row stride lda); B likewise with ldb. C's row stride
/// is ldc. Any C contents are overwritten (NaN included); K = 0 writes zeros.
COIL_EXTERN_API void sgemm_dnnl(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                bool transA, const float* B, int64_t ldb, bool transB, float* C,
                                int64_t ldc);

#ifdef COIL_HAVE_OPENBLAS
/// sgemm_dnnl through OpenBLAS (its OpenMP build; sizes must fit its 32-bit integers).
COIL_EXTERN_API void sgemm_openblas(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                    bool transA, const float* B, int64_t ldb, bool transB, float* C,
                                    int64_t ldc);
#endif

// ---- Conv2d --------------------------------------------------------------------------------

/// How Conv2d hands activations to the primitive. Blocked (the default): the primitive chooses
/// its layouts (nChw16c on AVX-512) and the NCHW input and output are reordered to and from them
/// on every call. Plain: NCHW src/dst memory descriptors, no copies, but oneDNN 2.6 then only
/// has its im2col+GEMM implementation. Measured on this project's AVX-512 machine (oneDNN 2.6.3,
/// 1 / 2 threads, reorders included), Blocked is 2-20x faster: resnet 3x3 C=OC=64 56x56 2.3 /
/// 1.25 ms vs 4.4 / 6.5 ms; 1x1 64->256 56x56 1.5 / 1.3 ms vs 7.0 / 6.8 ms; depthwise 3x3 C=64
/// 56x56 0.19 / 0.10 ms vs 1.8 / 1.0 ms (docs/dependencies.md, "oneDNN and OpenBLAS").
enum class ConvLayout { Plain, Blocked };

/// oneDNN's convolution algorithm: Direct (dnnl_convolution_direct), or Auto
/// (dnnl_convolution_auto, which may pick Winograd where oneDNN has it: faster for some 3x3
/// shapes, less accurate). Direct: auto picked the same implementations in the measurements
/// above, and direct's rounding is a plain dot product.
enum class ConvAlgorithm { Direct, Auto };

/// An activation applied to the convolution's output inside the primitive (a oneDNN eltwise
/// post-op, on each output block while it is in cache): none, relu max(y, 0) with a NaN kept,
/// or silu y * sigmoid(y) (oneDNN's swish with alpha 1). The loop IR folds a conv's sole relu
/// or silu consumer into it (lower/fold_conv_activations.cpp). relu is not oneDNN's relu
/// post-op, which (like its clip, for relu6) turns a NaN into 0 where torch and coil's
/// reference keep the NaN, but elu with alpha 0 followed by 1 * y + 0 (extern_kernels.cpp).
/// relu6 has no such exact form and is not a post-op.
enum class ConvPostOp { none, relu, silu };

/// A 2-D convolution, torch.nn.functional.conv2d's conventions: x [N, C, H, W], weights
/// [OC, C/groups, KH, KW], bias [OC], y [N, OC, OH, OW], all contiguous f32.
struct Conv2dParams {
  int64_t N = 1, C = 1, H = 1, W = 1, OC = 1, KH = 1, KW = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  /// torch's convention: 1 = dense (oneDNN counts the gaps: dilation - 1).
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool has_bias = false;
  /// y = activation(conv + bias), fused into the primitive.
  ConvPostOp post_op = ConvPostOp::none;
  /// The weights never change while their pointer stays the same (graph constants): they are
  /// reordered into the primitive's layout on the first run and reused; a different pointer is
  /// reordered again. Without it they are reordered on every run.
  bool weights_constant = false;
  ConvLayout layout = ConvLayout::Blocked;
  ConvAlgorithm algorithm = ConvAlgorithm::Direct;
  /// x / y are channels-last (NHWC: element (n, c, h, w) at ((n * H + h) * W + w) * C + c)
  /// instead of NCHW: the layout oneDNN's AVX-512 kernels choose for activations, so a tensor
  /// passed from one call to the next this way is not reordered on either side
  /// (lower/conv_layouts.cpp decides where). The Blocked layout still lets oneDNN choose.
  bool src_nhwc = false, dst_nhwc = false;

  int64_t out_h() const {
    return (H + pad_top + pad_bottom - dilation_h * (KH - 1) - 1) / stride_h + 1;
  }
  int64_t out_w() const {
    return (W + pad_left + pad_right - dilation_w * (KW - 1) - 1) / stride_w + 1;
  }
};

class COIL_EXTERN_API Conv2d {
 public:
  /// Validates the parameters and plans the primitive (throws on bad sizes).
  explicit Conv2d(const Conv2dParams& p);
  /// The form generated code writes, e.g. a resnet 3x3 convolution with constant weights:
  ///   static coil::ext::Conv2d conv0(1, 64, 56, 56, 64, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1,
  ///                                  true, coil::ext::ConvPostOp::relu, true);
  /// stride {h, w}; padding {top, left, bottom, right}; dilation {h, w} (1 = dense).
  /// src_nhwc / dst_nhwc: Conv2dParams's.
  Conv2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
         std::array<int64_t, 2> stride, std::array<int64_t, 4> padding,
         std::array<int64_t, 2> dilation, int64_t groups, bool has_bias, ConvPostOp post_op,
         bool weights_constant, bool src_nhwc = false, bool dst_nhwc = false);
  ~Conv2d();
  Conv2d(const Conv2d&) = delete;
  Conv2d& operator=(const Conv2d&) = delete;

  /// y = conv(x, w) (+ bias) (post-op). x, w, y: contiguous NCHW (or NHWC) / OIHW / NCHW (or
  /// NHWC) f32; bias: [OC] or
  /// null without has_bias. Thread-safe (calls on one object are serialized); uses as many
  /// threads as OpenMP would here (1 inside a parallel region), rebuilding the primitive when
  /// that count changed.
  void run(const float* x, const float* w, const float* bias, float* y);

  const Conv2dParams& params() const;
  int64_t out_h() const { return params().out_h(); }
  int64_t out_w() const { return params().out_w(); }
  /// oneDNN's name of the implementation it picked ("brg:avx512_core", "gemm:jit", ...).
  std::string implementation() const;
  /// Whether weights / activations are copied into another layout around the primitive.
  bool reorders_weights() const;
  bool reorders_activations() const;

 private:
  struct Impl;  // the oneDNN handles (extern_kernels.cpp)
  std::unique_ptr<Impl> impl_;
};

}  // namespace ext
}  // namespace coil

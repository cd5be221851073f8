// Extern kernels: the library calls generated code makes where a library beats a generated loop
// nest (Inductor's extern kernels: aten.mm, aten.convolution). Real code, compiled by
// tests/unit/extern_runtime_test.cpp, embedded into libcoil with the other runtime headers and
// written next to generated sources by the code cache. C++17, like all generated code.
//
//   sgemm_dnnl       row-major C = op(A) op(B) (alpha 1, beta 0) through oneDNN's dnnl_sgemm
//   sgemm_openblas   the same through OpenBLAS's cblas_sgemm; only when COIL_HAVE_OPENBLAS is
//                    defined (runtime/isa.h: extern_have_openblas())
//   Conv2d           a 2-D convolution (NCHW in and out, torch's conventions) through a oneDNN
//                    convolution primitive created once per call site:
//                      static coil::ext::Conv2d conv0(1, 64, 56, 56, 64, 3, 3, {1, 1},
//                                                     {1, 1, 1, 1}, {1, 1}, 1, true, false, true);
//                      conv0.run(x, w, bias, y);
//
// Linking: generated modules that include this header need runtime/isa.h's extern_link_flags()
// (-ldnnl; OpenBLAS's OpenMP build by path). Only oneDNN's C API is used (dnnl.h: smaller and
// faster to compile than dnnl.hpp). oneDNN and OpenBLAS both run on the OpenMP runtime that gcc's
// -fopenmp links (libgomp), so they share the kernels' thread pool and follow
// omp_set_num_threads (coil::set_num_threads).
//
// Errors (a oneDNN status other than success, bad arguments) throw std::runtime_error naming
// the call, its shape and the status; generated code lets it propagate to CompiledModel::run.
#pragma once

#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#ifdef COIL_HAVE_OPENBLAS
// OpenBLAS's own declarations (Debian: the header of whichever OpenBLAS flavour is the
// alternative; the declarations are identical, the library linked is chosen by the link flags).
#include <cblas-openblas.h>
#endif

namespace coil {
namespace ext {

// ---- errors --------------------------------------------------------------------------------

[[noreturn]] inline void fail(const std::string& what) {
  throw std::runtime_error("coil extern kernel: " + what);
}

/// Throws when `status` is not dnnl_success: "<context>: <call> failed: oneDNN status <name>".
inline void check_dnnl(dnnl_status_t status, const char* call, const std::string& context) {
  if (status == dnnl_success) return;
  const char* name = dnnl_status2str(status);
  fail(context + ": " + call + " failed: oneDNN status " + (name ? name : "?") + " (" +
       std::to_string(static_cast<int>(status)) + ")");
}

// ---- the engine and streams ----------------------------------------------------------------

/// One oneDNN CPU engine per process (created on first use, thread-safe; never destroyed, so
/// that no static destructor at exit races oneDNN's own teardown), and one stream per thread
/// (a stream is not meant to be shared between threads that execute concurrently). The
/// function-local statics are gcc "unique" symbols, so every module shares the one engine; a
/// side effect is that dlclose() leaves modules that include this header loaded.
class Runtime {
 public:
  static Runtime& get() {
    static Runtime* runtime = new Runtime();
    return *runtime;
  }
  dnnl_engine_t engine() const { return engine_; }
  dnnl_stream_t stream() {
    struct Holder {
      dnnl_stream_t stream = nullptr;
      ~Holder() {
        if (stream) dnnl_stream_destroy(stream);
      }
    };
    thread_local Holder holder;
    if (!holder.stream) {
      check_dnnl(dnnl_stream_create(&holder.stream, engine_, dnnl_stream_default_flags),
                 "dnnl_stream_create", "creating a oneDNN CPU stream");
    }
    return holder.stream;
  }

 private:
  Runtime() {
    check_dnnl(dnnl_engine_create(&engine_, dnnl_cpu, 0), "dnnl_engine_create",
               "creating the oneDNN CPU engine");
  }
  dnnl_engine_t engine_ = nullptr;
};

/// The thread count oneDNN and OpenBLAS will use for a call made here (outside a parallel
/// region: OpenMP's max threads; inside one: 1, as both run nested calls serially).
inline int current_threads() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

// ---- GEMM ----------------------------------------------------------------------------------

inline std::string gemm_context(const char* name, int64_t M, int64_t N, int64_t K, int64_t lda,
                                bool transA, int64_t ldb, bool transB, int64_t ldc) {
  return std::string(name) + "(M=" + std::to_string(M) + ", N=" + std::to_string(N) +
         ", K=" + std::to_string(K) + ", lda=" + std::to_string(lda) + (transA ? " transA" : "") +
         ", ldb=" + std::to_string(ldb) + (transB ? " transB" : "") +
         ", ldc=" + std::to_string(ldc) + ")";
}

/// Handles the shapes BLAS leaves to conventions: nothing to write, or K = 0 (C = 0). Returns
/// true when the call is done.
inline bool gemm_trivial(int64_t M, int64_t N, int64_t K, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return true;
  if (K > 0) return false;
  for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, sizeof(float) * N);
  return true;
}

/// Row-major C[M,N] = op(A)[M,K] op(B)[K,N], alpha 1, beta 0. op(A) = A ([M,K], row stride lda)
/// or, with transA, A^T where A is [K,M] (row stride lda); B likewise with ldb. C's row stride
/// is ldc. Any C contents are overwritten (NaN included).
inline void sgemm_dnnl(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool transA,
                       const float* B, int64_t ldb, bool transB, float* C, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0)
    fail(gemm_context("sgemm_dnnl", M, N, K, lda, transA, ldb, transB, ldc) + ": negative size");
  if (gemm_trivial(M, N, K, C, ldc)) return;
  dnnl_status_t s = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.0f, A, lda, B,
                               ldb, 0.0f, C, ldc);
  if (s != dnnl_success)
    check_dnnl(s, "dnnl_sgemm", gemm_context("sgemm_dnnl", M, N, K, lda, transA, ldb, transB, ldc));
}

#ifdef COIL_HAVE_OPENBLAS
/// sgemm_dnnl through OpenBLAS (its OpenMP build; 32-bit sizes).
inline void sgemm_openblas(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                           bool transA, const float* B, int64_t ldb, bool transB, float* C,
                           int64_t ldc) {
  auto context = [&] {
    return gemm_context("sgemm_openblas", M, N, K, lda, transA, ldb, transB, ldc);
  };
  if (M < 0 || N < 0 || K < 0) fail(context() + ": negative size");
  if (gemm_trivial(M, N, K, C, ldc)) return;
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  if (M > kMax || N > kMax || K > kMax || lda > kMax || ldb > kMax || ldc > kMax)
    fail(context() + ": a size exceeds OpenBLAS's 32-bit integers");
  // cblas_sgemm reports bad leading dimensions through xerbla (a message, no status); check
  // them here so that a mistake is an exception, not a printed line and a garbage result.
  if (lda < (transA ? M : K) || ldb < (transB ? K : N) || ldc < N || lda < 1 || ldb < 1)
    fail(context() + ": a leading dimension is smaller than its row");
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), 0.0f, C,
              static_cast<blasint>(ldc));
}
#endif

// ---- Conv2d --------------------------------------------------------------------------------

/// Owns one oneDNN C handle.
template <typename T, dnnl_status_t (*Destroy)(T)>
class Handle {
 public:
  Handle() = default;
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  T get() const { return h_; }
  T* out() {
    reset();
    return &h_;
  }
  void reset() {
    if (h_) Destroy(h_);
    h_ = nullptr;
  }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  T h_ = nullptr;
};
using PrimitiveDesc = Handle<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy>;
using Primitive = Handle<dnnl_primitive_t, dnnl_primitive_destroy>;
using Memory = Handle<dnnl_memory_t, dnnl_memory_destroy>;
using Attr = Handle<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy>;
using PostOps = Handle<dnnl_post_ops_t, dnnl_post_ops_destroy>;

/// How Conv2d hands activations to the primitive. Blocked (the default): the primitive chooses
/// its layouts (nChw16c on AVX-512) and the NCHW input and output are reordered to and from them
/// on every call. Plain: NCHW src/dst memory descriptors, no copies, but oneDNN 2.6 then only
/// has its im2col+GEMM implementation. Measured on this project's AVX-512 machine (oneDNN 2.6.3,
/// 1 / 2 threads, reorders included), Blocked is 2-20x faster: resnet 3x3 C=OC=64 56x56 2.3 /
/// 1.25 ms vs 4.4 / 6.5 ms; 1x1 64->256 56x56 1.5 / 1.3 ms vs 7.0 / 6.8 ms; depthwise 3x3 C=64
/// 56x56 0.19 / 0.10 ms vs 1.8 / 1.0 ms (docs/dependencies.md, "oneDNN and OpenBLAS").
enum class ConvLayout { Plain, Blocked };

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
  /// y = max(conv + bias, 0), fused into the primitive.
  bool post_op_relu = false;
  /// The weights never change while their pointer stays the same (graph constants): they are
  /// reordered into the primitive's layout on the first run and reused; a different pointer is
  /// reordered again. Without it they are reordered on every run.
  bool weights_constant = false;
  ConvLayout layout = ConvLayout::Blocked;
  /// dnnl_convolution_direct or dnnl_convolution_auto (which may pick Winograd where oneDNN has
  /// it: faster for some 3x3 shapes, less accurate). Direct: auto picked the same
  /// implementations in the measurements above, and direct's rounding is a plain dot product.
  dnnl_alg_kind_t algorithm = dnnl_convolution_direct;

  int64_t out_h() const {
    return (H + pad_top + pad_bottom - dilation_h * (KH - 1) - 1) / stride_h + 1;
  }
  int64_t out_w() const {
    return (W + pad_left + pad_right - dilation_w * (KW - 1) - 1) / stride_w + 1;
  }

  std::string describe() const {
    auto s = [](int64_t v) { return std::to_string(v); };
    return "conv2d N=" + s(N) + " C=" + s(C) + " H=" + s(H) + " W=" + s(W) + " OC=" + s(OC) +
           " kernel " + s(KH) + "x" + s(KW) + " stride " + s(stride_h) + "x" + s(stride_w) +
           " padding t" + s(pad_top) + " l" + s(pad_left) + " b" + s(pad_bottom) + " r" +
           s(pad_right) + " dilation " + s(dilation_h) + "x" + s(dilation_w) + " groups " +
           s(groups) + (has_bias ? " bias" : "") + (post_op_relu ? " relu" : "");
  }
};

class Conv2d {
 public:
  explicit Conv2d(const Conv2dParams& p) : p_(p) {
    validate();
    std::lock_guard<std::mutex> lock(mutex_);
    build();
  }
  /// The form generated code writes, e.g. a resnet 3x3 convolution with constant weights:
  ///   static coil::ext::Conv2d conv0(1, 64, 56, 56, 64, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1,
  ///                                  true, false, true);
  /// stride {h, w}; padding {top, left, bottom, right}; dilation {h, w} (1 = dense).
  Conv2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
         std::array<int64_t, 2> stride, std::array<int64_t, 4> padding,
         std::array<int64_t, 2> dilation, int64_t groups, bool has_bias, bool post_op_relu,
         bool weights_constant)
      : Conv2d(make_params(N, C, H, W, OC, KH, KW, stride, padding, dilation, groups, has_bias,
                           post_op_relu, weights_constant)) {}
  Conv2d(const Conv2d&) = delete;
  Conv2d& operator=(const Conv2d&) = delete;

  /// y = conv(x, w) (+ bias) (relu). x, w, y: contiguous NCHW / OIHW / NCHW f32; bias: [OC] or
  /// null without has_bias. Thread-safe (calls on one object are serialized); uses
  /// current_threads() threads, rebuilding the primitive when that count changed.
  void run(const float* x, const float* w, const float* bias, float* y) {
    if (p_.has_bias && !bias) fail(p_.describe() + ": the bias pointer is null");
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_threads() != threads_) build();
    dnnl_stream_t stream = Runtime::get().stream();
    const std::string& ctx = context_;

    // Weights: reordered into the primitive's layout unless it uses the plain one.
    dnnl_memory_t weights = user_weights_.get();
    check_dnnl(dnnl_memory_set_data_handle(user_weights_.get(), const_cast<float*>(w)),
               "dnnl_memory_set_data_handle", ctx);
    if (weights_reorder_) {
      if (!p_.weights_constant || cached_weights_ != w) {
        execute(weights_reorder_, DNNL_ARG_FROM, user_weights_.get(), DNNL_ARG_TO, weights_.get(),
                stream);
        cached_weights_ = p_.weights_constant ? w : nullptr;
      }
      weights = weights_.get();
    }

    check_dnnl(dnnl_memory_set_data_handle(user_src_.get(), const_cast<float*>(x)),
               "dnnl_memory_set_data_handle", ctx);
    check_dnnl(dnnl_memory_set_data_handle(user_dst_.get(), y), "dnnl_memory_set_data_handle", ctx);
    dnnl_memory_t src = user_src_.get(), dst = user_dst_.get();
    if (src_reorder_) {
      execute(src_reorder_, DNNL_ARG_FROM, user_src_.get(), DNNL_ARG_TO, src_.get(), stream);
      src = src_.get();
    }
    if (dst_reorder_) dst = dst_.get();

    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    int nargs = 3;
    if (p_.has_bias) {
      check_dnnl(dnnl_memory_set_data_handle(bias_.get(), const_cast<float*>(bias)),
                 "dnnl_memory_set_data_handle", ctx);
      args[nargs++] = {DNNL_ARG_BIAS, bias_.get()};
    }
    check_dnnl(dnnl_primitive_execute(conv_.get(), stream, nargs, args), "dnnl_primitive_execute",
               ctx + ": running the convolution");
    if (dst_reorder_) {
      execute(dst_reorder_, DNNL_ARG_FROM, dst_.get(), DNNL_ARG_TO, user_dst_.get(), stream);
    }
    check_dnnl(dnnl_stream_wait(stream), "dnnl_stream_wait", ctx);
  }

  const Conv2dParams& params() const { return p_; }
  int64_t out_h() const { return p_.out_h(); }
  int64_t out_w() const { return p_.out_w(); }
  /// oneDNN's name of the implementation it picked ("brg:avx512_core", "gemm:jit", ...).
  std::string implementation() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return impl_;
  }
  /// Whether weights / activations are copied into another layout around the primitive.
  bool reorders_weights() const { return static_cast<bool>(weights_reorder_); }
  bool reorders_activations() const { return src_reorder_ || dst_reorder_; }

 private:
  static Conv2dParams make_params(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC,
                                  int64_t KH, int64_t KW, std::array<int64_t, 2> stride,
                                  std::array<int64_t, 4> padding, std::array<int64_t, 2> dilation,
                                  int64_t groups, bool has_bias, bool post_op_relu,
                                  bool weights_constant) {
    Conv2dParams p;
    p.N = N, p.C = C, p.H = H, p.W = W, p.OC = OC, p.KH = KH, p.KW = KW;
    p.stride_h = stride[0], p.stride_w = stride[1];
    p.pad_top = padding[0], p.pad_left = padding[1];
    p.pad_bottom = padding[2], p.pad_right = padding[3];
    p.dilation_h = dilation[0], p.dilation_w = dilation[1], p.groups = groups;
    p.has_bias = has_bias, p.post_op_relu = post_op_relu, p.weights_constant = weights_constant;
    return p;
  }

  void validate() {
    context_ = p_.describe();
    const Conv2dParams& p = p_;
    if (p.N < 1 || p.C < 1 || p.H < 1 || p.W < 1 || p.OC < 1 || p.KH < 1 || p.KW < 1)
      fail(context_ + ": sizes must be positive");
    if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1)
      fail(context_ + ": strides and dilations must be positive");
    if (p.pad_top < 0 || p.pad_left < 0 || p.pad_bottom < 0 || p.pad_right < 0)
      fail(context_ + ": padding must not be negative");
    if (p.groups < 1 || p.C % p.groups != 0 || p.OC % p.groups != 0)
      fail(context_ + ": groups must divide both C and OC");
    if (p.out_h() < 1 || p.out_w() < 1)
      fail(context_ + ": the output is empty (the dilated kernel is larger than the padded input)");
  }

  static void execute(const Primitive& prim, int arg0, dnnl_memory_t m0, int arg1, dnnl_memory_t m1,
                      dnnl_stream_t stream) {
    dnnl_exec_arg_t args[2] = {{arg0, m0}, {arg1, m1}};
    check_dnnl(dnnl_primitive_execute(prim.get(), stream, 2, args), "dnnl_primitive_execute",
               "running a oneDNN reorder");
  }

  static dnnl_memory_desc_t plain_md(int ndims, const int64_t* dims, dnnl_format_tag_t tag,
                                     const std::string& ctx) {
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {};
    for (int i = 0; i < ndims; ++i) d[i] = dims[i];
    check_dnnl(dnnl_memory_desc_init_by_tag(&md, ndims, d, dnnl_f32, tag),
               "dnnl_memory_desc_init_by_tag", ctx);
    return md;
  }

  /// A reorder from `from` to `to` when they differ (else left empty), and a memory object of
  /// layout `chosen` that the library allocates.
  void plan_reorder(const dnnl_memory_desc_t& from, const dnnl_memory_desc_t& to,
                    const dnnl_memory_desc_t& chosen, Primitive& reorder, Memory& mem) {
    reorder.reset();
    mem.reset();
    if (dnnl_memory_desc_equal(&from, &to)) return;
    dnnl_engine_t engine = Runtime::get().engine();
    PrimitiveDesc pd;
    check_dnnl(dnnl_reorder_primitive_desc_create(pd.out(), &from, engine, &to, engine, nullptr),
               "dnnl_reorder_primitive_desc_create", context_ + ": planning a layout reorder");
    check_dnnl(dnnl_primitive_create(reorder.out(), pd.get()), "dnnl_primitive_create",
               context_ + ": creating a layout reorder");
    check_dnnl(dnnl_memory_create(mem.out(), &chosen, engine, DNNL_MEMORY_ALLOCATE),
               "dnnl_memory_create", context_ + ": allocating a reordered buffer");
  }

  // Creates the primitive for the current thread count, its reorders and memory objects.
  void build() {
    const Conv2dParams& p = p_;
    dnnl_engine_t engine = Runtime::get().engine();
    const std::string& ctx = context_;
    const int64_t g = p.groups;
    const int64_t src_dims[4] = {p.N, p.C, p.H, p.W};
    const int64_t dst_dims[4] = {p.N, p.OC, p.out_h(), p.out_w()};
    const int64_t wdims[5] = {g, p.OC / g, p.C / g, p.KH, p.KW};
    const int64_t bias_dims[1] = {p.OC};

    dnnl_memory_desc_t user_src = plain_md(4, src_dims, dnnl_nchw, ctx);
    dnnl_memory_desc_t user_dst = plain_md(4, dst_dims, dnnl_nchw, ctx);
    dnnl_memory_desc_t user_w =
        g == 1 ? plain_md(4, wdims + 1, dnnl_oihw, ctx) : plain_md(5, wdims, dnnl_goihw, ctx);
    dnnl_memory_desc_t bias_md = plain_md(1, bias_dims, dnnl_x, ctx);
    const bool blocked = p.layout == ConvLayout::Blocked;
    dnnl_memory_desc_t src_any =
        blocked ? plain_md(4, src_dims, dnnl_format_tag_any, ctx) : user_src;
    dnnl_memory_desc_t dst_any =
        blocked ? plain_md(4, dst_dims, dnnl_format_tag_any, ctx) : user_dst;
    dnnl_memory_desc_t w_any = g == 1 ? plain_md(4, wdims + 1, dnnl_format_tag_any, ctx)
                                      : plain_md(5, wdims, dnnl_format_tag_any, ctx);

    dnnl_dims_t strides = {p.stride_h, p.stride_w};
    dnnl_dims_t dilates = {p.dilation_h - 1, p.dilation_w - 1};
    dnnl_dims_t pad_l = {p.pad_top, p.pad_left};
    dnnl_dims_t pad_r = {p.pad_bottom, p.pad_right};
    dnnl_convolution_desc_t desc;
    check_dnnl(dnnl_dilated_convolution_forward_desc_init(
                   &desc, dnnl_forward_inference, p.algorithm, &src_any, &w_any,
                   p.has_bias ? &bias_md : nullptr, &dst_any, strides, dilates, pad_l, pad_r),
               "dnnl_dilated_convolution_forward_desc_init", ctx);
    Attr attr;
    check_dnnl(dnnl_primitive_attr_create(attr.out()), "dnnl_primitive_attr_create", ctx);
    if (p.post_op_relu) {
      PostOps ops;
      check_dnnl(dnnl_post_ops_create(ops.out()), "dnnl_post_ops_create", ctx);
      check_dnnl(dnnl_post_ops_append_eltwise(ops.get(), 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f),
                 "dnnl_post_ops_append_eltwise", ctx);
      check_dnnl(dnnl_primitive_attr_set_post_ops(attr.get(), ops.get()),
                 "dnnl_primitive_attr_set_post_ops", ctx);
    }
    threads_ = current_threads();
    PrimitiveDesc pd;
    check_dnnl(dnnl_primitive_desc_create(pd.out(), &desc, attr.get(), engine, nullptr),
               "dnnl_primitive_desc_create", ctx + ": choosing a convolution implementation");
    const char* impl = nullptr;
    if (dnnl_primitive_desc_query(pd.get(), dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl)
      impl_ = impl;
    check_dnnl(dnnl_primitive_create(conv_.out(), pd.get()), "dnnl_primitive_create",
               ctx + ": creating the convolution primitive");

    const dnnl_memory_desc_t* src_md = dnnl_primitive_desc_query_md(pd.get(), dnnl_query_src_md, 0);
    const dnnl_memory_desc_t* w_md =
        dnnl_primitive_desc_query_md(pd.get(), dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t* dst_md = dnnl_primitive_desc_query_md(pd.get(), dnnl_query_dst_md, 0);
    if (!src_md || !w_md || !dst_md) fail(ctx + ": oneDNN returned no memory descriptors");
    plan_reorder(user_w, *w_md, *w_md, weights_reorder_, weights_);
    plan_reorder(user_src, *src_md, *src_md, src_reorder_, src_);
    plan_reorder(*dst_md, user_dst, *dst_md, dst_reorder_, dst_);
    cached_weights_ = nullptr;

    check_dnnl(dnnl_memory_create(user_src_.out(), &user_src, engine, DNNL_MEMORY_NONE),
               "dnnl_memory_create", ctx);
    check_dnnl(dnnl_memory_create(user_dst_.out(), &user_dst, engine, DNNL_MEMORY_NONE),
               "dnnl_memory_create", ctx);
    check_dnnl(dnnl_memory_create(user_weights_.out(), &user_w, engine, DNNL_MEMORY_NONE),
               "dnnl_memory_create", ctx);
    if (p.has_bias)
      check_dnnl(dnnl_memory_create(bias_.out(), &bias_md, engine, DNNL_MEMORY_NONE),
                 "dnnl_memory_create", ctx);
  }

  Conv2dParams p_;
  std::string context_;
  mutable std::mutex mutex_;
  int threads_ = 0;
  std::string impl_;
  Primitive conv_, weights_reorder_, src_reorder_, dst_reorder_;
  Memory weights_, src_, dst_;  // the primitive's layouts, where they differ from the user's
  Memory user_src_, user_dst_, user_weights_, bias_;  // the caller's pointers, set per run
  const float* cached_weights_ = nullptr;             // weights_constant: what weights_ holds
};

}  // namespace ext
}  // namespace coil

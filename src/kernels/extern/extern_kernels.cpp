// libcoil_extern: the extern kernels declared in src/kernels/coil_extern.h, compiled
// once (generated modules link this library instead of compiling them; see that header). Only
// oneDNN's C API is used (dnnl.h: smaller and faster to compile than dnnl.hpp).
#include "kernels/coil_extern.h"

#include <omp.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>

#include "kernels/extern/dnnl_util.h"

#ifdef COIL_HAVE_OPENBLAS
// OpenBLAS's own declarations (Debian: the header of whichever OpenBLAS flavour is the
// alternative; the declarations are identical, the library linked is chosen by CMake: the
// OpenMP build, by its directory).
#include <cblas-openblas.h>
#endif

namespace coil {
namespace ext {
namespace {

/// The thread count oneDNN and OpenBLAS will use for a call made here (outside a parallel
/// region: OpenMP's max threads; inside one: 1, as both run nested calls serially).
int current_threads() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

// ---- GEMM helpers --------------------------------------------------------------------------

std::string gemm_context(const char* name, int64_t M, int64_t N, int64_t K, int64_t lda,
                         bool transA, int64_t ldb, bool transB, int64_t ldc) {
  return std::string(name) + "(M=" + std::to_string(M) + ", N=" + std::to_string(N) +
         ", K=" + std::to_string(K) + ", lda=" + std::to_string(lda) + (transA ? " transA" : "") +
         ", ldb=" + std::to_string(ldb) + (transB ? " transB" : "") +
         ", ldc=" + std::to_string(ldc) + ")";
}

/// Handles the shapes BLAS leaves to conventions: nothing to write, or K = 0 (C = 0). Returns
/// true when the call is done.
bool gemm_trivial(int64_t M, int64_t N, int64_t K, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return true;
  if (K > 0) return false;
  for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, sizeof(float) * N);
  return true;
}

std::string describe_params(const Conv2dParams& p) {
  auto s = [](int64_t v) { return std::to_string(v); };
  return "conv2d N=" + s(p.N) + " C=" + s(p.C) + " H=" + s(p.H) + " W=" + s(p.W) +
         " OC=" + s(p.OC) + " kernel " + s(p.KH) + "x" + s(p.KW) + " stride " + s(p.stride_h) +
         "x" + s(p.stride_w) + " padding t" + s(p.pad_top) + " l" + s(p.pad_left) + " b" +
         s(p.pad_bottom) + " r" + s(p.pad_right) + " dilation " + s(p.dilation_h) + "x" +
         s(p.dilation_w) + " groups " + s(p.groups) + (p.has_bias ? " bias" : "") +
         (p.post_op == ConvPostOp::relu   ? " relu"
          : p.post_op == ConvPostOp::silu ? " silu"
                                          : "") +
         (p.src_nhwc ? " x NHWC" : "") + (p.dst_nhwc ? " y NHWC" : "");
}

Conv2dParams make_params(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH,
                         int64_t KW, std::array<int64_t, 2> stride, std::array<int64_t, 4> padding,
                         std::array<int64_t, 2> dilation, int64_t groups, bool has_bias,
                         ConvPostOp post_op, bool weights_constant, bool src_nhwc, bool dst_nhwc) {
  Conv2dParams p;
  p.N = N, p.C = C, p.H = H, p.W = W, p.OC = OC, p.KH = KH, p.KW = KW;
  p.stride_h = stride[0], p.stride_w = stride[1];
  p.pad_top = padding[0], p.pad_left = padding[1];
  p.pad_bottom = padding[2], p.pad_right = padding[3];
  p.dilation_h = dilation[0], p.dilation_w = dilation[1], p.groups = groups;
  p.has_bias = has_bias, p.post_op = post_op, p.weights_constant = weights_constant;
  p.src_nhwc = src_nhwc, p.dst_nhwc = dst_nhwc;
  return p;
}

}  // namespace

// ---- the engine and streams ----------------------------------------------------------------

dnnl_engine_t cpu_engine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    check_dnnl(dnnl_engine_create(&e, dnnl_cpu, 0), "dnnl_engine_create",
               "creating the oneDNN CPU engine");
    return e;
  }();
  return engine;
}

dnnl_stream_t thread_stream() {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream) dnnl_stream_destroy(stream);
    }
  };
  thread_local Holder holder;
  if (!holder.stream) {
    check_dnnl(dnnl_stream_create(&holder.stream, cpu_engine(), dnnl_stream_default_flags),
               "dnnl_stream_create", "creating a oneDNN CPU stream");
  }
  return holder.stream;
}

// ---- GEMM ----------------------------------------------------------------------------------

void sgemm_dnnl(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool transA,
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
void sgemm_openblas(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool transA,
                    const float* B, int64_t ldb, bool transB, float* C, int64_t ldc) {
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

struct Conv2d::Impl {
  explicit Impl(const Conv2dParams& p) : p_(p), context_(describe_params(p)) {
    validate();
    std::lock_guard<std::mutex> lock(mutex_);
    build();
  }

  void run(const float* x, const float* w, const float* bias, float* y) {
    if (p_.has_bias && !bias) fail(context_ + ": the bias pointer is null");
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_threads() != threads_) build();
    dnnl_stream_t stream = thread_stream();
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

  void validate() {
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
    dnnl_engine_t engine = cpu_engine();
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
    dnnl_engine_t engine = cpu_engine();
    const std::string& ctx = context_;
    const int64_t g = p.groups;
    const int64_t src_dims[4] = {p.N, p.C, p.H, p.W};
    const int64_t dst_dims[4] = {p.N, p.OC, p.out_h(), p.out_w()};
    const int64_t wdims[5] = {g, p.OC / g, p.C / g, p.KH, p.KW};
    const int64_t bias_dims[1] = {p.OC};

    dnnl_memory_desc_t user_src = plain_md(4, src_dims, p.src_nhwc ? dnnl_nhwc : dnnl_nchw, ctx);
    dnnl_memory_desc_t user_dst = plain_md(4, dst_dims, p.dst_nhwc ? dnnl_nhwc : dnnl_nchw, ctx);
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
    const dnnl_alg_kind_t algorithm =
        p.algorithm == ConvAlgorithm::Auto ? dnnl_convolution_auto : dnnl_convolution_direct;
    dnnl_convolution_desc_t desc;
    check_dnnl(dnnl_dilated_convolution_forward_desc_init(
                   &desc, dnnl_forward_inference, algorithm, &src_any, &w_any,
                   p.has_bias ? &bias_md : nullptr, &dst_any, strides, dilates, pad_l, pad_r),
               "dnnl_dilated_convolution_forward_desc_init", ctx);
    Attr attr;
    check_dnnl(dnnl_primitive_attr_create(attr.out()), "dnnl_primitive_attr_create", ctx);
    // IEEE fp32 whatever ONEDNN_DEFAULT_FPMATH_MODE says (coil's precision contract,
    // codegen/precision.h: x86 has no TF32, so both precisions are strict on the CPU).
    check_dnnl(dnnl_primitive_attr_set_fpmath_mode(attr.get(), dnnl_fpmath_mode_strict),
               "dnnl_primitive_attr_set_fpmath_mode", ctx);
    if (p.post_op != ConvPostOp::none) {
      PostOps ops;
      check_dnnl(dnnl_post_ops_create(ops.out()), "dnnl_post_ops_create", ctx);
      if (p.post_op == ConvPostOp::relu) {
        // relu as elu with alpha 0: y > 0 ? y : 0 * (exp(y) - 1). oneDNN's own relu (alpha 0)
        // is max(y, 0), which turns a NaN into 0; elu's compare-and-blend keeps y where y > 0
        // and 0 * (exp(y) - 1) elsewhere, which is NaN for a NaN and -0 for y <= 0 (-inf
        // included: exp(-inf) - 1 = -1). The linear post-op 1 * y + 0 turns that -0 into +0,
        // relu's zero. Measured on oneDNN 2.6.3 (brgconv, jit and 1x1 kernels alike) by
        // extern_runtime_test.cpp's ReluKeepsNanAndGivesPlusZero.
        check_dnnl(dnnl_post_ops_append_eltwise(ops.get(), 1.0f, dnnl_eltwise_elu, 0.0f, 0.0f),
                   "dnnl_post_ops_append_eltwise", ctx);
        check_dnnl(dnnl_post_ops_append_eltwise(ops.get(), 1.0f, dnnl_eltwise_linear, 1.0f, 0.0f),
                   "dnnl_post_ops_append_eltwise", ctx);
      } else {
        // swish: y * sigmoid(alpha * y), alpha 1 (silu), which keeps a NaN.
        check_dnnl(dnnl_post_ops_append_eltwise(ops.get(), 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f),
                   "dnnl_post_ops_append_eltwise", ctx);
      }
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

Conv2d::Conv2d(const Conv2dParams& p) : impl_(std::make_unique<Impl>(p)) {}

Conv2d::Conv2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
               std::array<int64_t, 2> stride, std::array<int64_t, 4> padding,
               std::array<int64_t, 2> dilation, int64_t groups, bool has_bias, ConvPostOp post_op,
               bool weights_constant, bool src_nhwc, bool dst_nhwc)
    : Conv2d(make_params(N, C, H, W, OC, KH, KW, stride, padding, dilation, groups, has_bias,
                         post_op, weights_constant, src_nhwc, dst_nhwc)) {}

Conv2d::~Conv2d() = default;

void Conv2d::run(const float* x, const float* w, const float* bias, float* y) {
  impl_->run(x, w, bias, y);
}

const Conv2dParams& Conv2d::params() const {
  return impl_->p_;
}

std::string Conv2d::implementation() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->impl_;
}

bool Conv2d::reorders_weights() const {
  return static_cast<bool>(impl_->weights_reorder_);
}

bool Conv2d::reorders_activations() const {
  return impl_->src_reorder_ || impl_->dst_reorder_;
}

}  // namespace ext
}  // namespace coil

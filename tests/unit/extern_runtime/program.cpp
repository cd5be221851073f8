// Built by tests/unit/extern_runtime_test.cpp the way generated modules are built (ISA flags,
// runtime/isa.h's extern_link_flags(), the embedded runtime headers): thin extern "C" wrappers
// over coil_extern.h for the test to call through dlsym. The test prepends
// `#define COIL_HAVE_OPENBLAS 1` when libcoil has OpenBLAS.
#include "coil_vec.h"
// (after coil_vec.h, as generated code does, so that the precompiled header stays usable)
#include "coil_extern.h"

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

// a[0..19]: N C H W OC KH KW stride_h stride_w pad_top pad_left pad_bottom pad_right dilation_h
// dilation_w groups has_bias post_op (0 none, 1 relu, 2 silu) weights_constant blocked
// src_nhwc dst_nhwc
coil::ext::Conv2dParams params_of(const int64_t* a) {
  coil::ext::Conv2dParams p;
  p.N = a[0], p.C = a[1], p.H = a[2], p.W = a[3], p.OC = a[4], p.KH = a[5], p.KW = a[6];
  p.stride_h = a[7], p.stride_w = a[8];
  p.pad_top = a[9], p.pad_left = a[10], p.pad_bottom = a[11], p.pad_right = a[12];
  p.dilation_h = a[13], p.dilation_w = a[14], p.groups = a[15];
  p.has_bias = a[16] != 0, p.post_op = static_cast<coil::ext::ConvPostOp>(a[17]);
  p.weights_constant = a[18] != 0;
  p.layout = a[19] ? coil::ext::ConvLayout::Blocked : coil::ext::ConvLayout::Plain;
  p.src_nhwc = a[20] != 0, p.dst_nhwc = a[21] != 0;
  return p;
}

}  // namespace

extern "C" {

void* conv_create(const int64_t* args) {
  return new coil::ext::Conv2d(params_of(args));
}

void conv_run(void* conv, const float* x, const float* w, const float* b, float* y) {
  static_cast<coil::ext::Conv2d*>(conv)->run(x, w, b, y);
}

// The implementation oneDNN picked, written into buf (NUL-terminated, truncated to n).
void conv_implementation(void* conv, char* buf, int64_t n) {
  std::string s = static_cast<coil::ext::Conv2d*>(conv)->implementation();
  std::snprintf(buf, static_cast<size_t>(n), "%s", s.c_str());
}

void conv_destroy(void* conv) {
  delete static_cast<coil::ext::Conv2d*>(conv);
}

// The form generated code uses: a function-local static built on the first call.
void conv_static_call_site(const float* x, const float* w, const float* b, float* y) {
  static coil::ext::Conv2d conv(2, 6, 9, 7, 4, 3, 3, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2, true,
                                coil::ext::ConvPostOp::relu, true);
  conv.run(x, w, b, y);
}

void gemm_dnnl(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta,
               const float* B, int64_t ldb, bool tb, float* C, int64_t ldc) {
  coil::ext::sgemm_dnnl(M, N, K, A, lda, ta, B, ldb, tb, C, ldc);
}

int have_openblas() {
#ifdef COIL_HAVE_OPENBLAS
  return 1;
#else
  return 0;
#endif
}

#ifdef COIL_HAVE_OPENBLAS
// OpenBLAS's own query, resolved at load time from libcoil_extern's dependencies.
int openblas_get_parallel();
#endif

// Which threading the loaded OpenBLAS uses (0 none, 1 pthreads, 2 OpenMP); -1 without it.
int openblas_parallel() {
#ifdef COIL_HAVE_OPENBLAS
  return openblas_get_parallel();
#else
  return -1;
#endif
}

void gemm_openblas(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta,
                   const float* B, int64_t ldb, bool tb, float* C, int64_t ldc) {
#ifdef COIL_HAVE_OPENBLAS
  coil::ext::sgemm_openblas(M, N, K, A, lda, ta, B, ldb, tb, C, ldc);
#else
  throw std::runtime_error("built without COIL_HAVE_OPENBLAS");
#endif
}

}  // extern "C"

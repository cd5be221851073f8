// The explicit instantiations of coil::gemm's run_matmul that libcoil_vmath exports for one ISA
// (gemm_avx512.cpp, gemm_avx512_bf16.cpp, gemm_avx2.cpp define the ISA's macros, then include
// this). Generated modules of that ISA declare them `extern template` (COIL_GEMM_PRECOMPILED in
// coil_gemm_driver.h) and link them from here, so each module no longer compiles the blocking
// loops, packing and micro-kernels itself.
#pragma once

// gcc 12's AVX-512 intrinsics read an "undefined" register (GCC PR 105593; see
// coil_vec_avx512.h): a false -W(maybe-)uninitialized after inlining.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#pragma GCC visibility push(default)
#include "kernels/coil_gemm.h"

namespace coil::gemm::detail {
#define COIL_GEMM_DEFINE_RUN(P)                                                                 \
  template void run_matmul<P>(int64_t, int64_t, int64_t, int64_t,                               \
                              FunctionRef<const typename P::AElem*(int64_t)>, int64_t, int64_t, \
                              const void*, FunctionRef<const void*(int64_t)>, int64_t, int64_t, \
                              int64_t, EpilogueRef, const RawB*);
COIL_GEMM_DEFINE_RUN(PathF32<float>)
COIL_GEMM_DEFINE_RUN(PathF32<bfloat16>)
#if COIL_GEMM_HAS_BF16_KERNEL
COIL_GEMM_DEFINE_RUN(PathBf16)
#endif
#if COIL_GEMM_HAS_AMX_KERNEL
COIL_GEMM_DEFINE_RUN(PathAmx)
#endif
#undef COIL_GEMM_DEFINE_RUN
}  // namespace coil::gemm::detail
#pragma GCC visibility pop

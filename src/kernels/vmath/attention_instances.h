// The explicit instantiations of coil::attention::forward, logsumexp, backward and backward_kv
// that
// libcoil_vmath exports for one ISA (attention_avx512.cpp and attention_avx2.cpp define the
// ISA's macros, then include this).
// Generated modules of that ISA declare them `extern template` (COIL_GEMM_PRECOMPILED in
// coil_attention.h) and link them from here: 0.7 s less g++ per module with attention.
#pragma once

// gcc 12's AVX-512 intrinsics read an "undefined" register (GCC PR 105593; see
// coil_vec_avx512.h): a false -W(maybe-)uninitialized after inlining.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#pragma GCC visibility push(default)
#include "kernels/coil_attention.h"

namespace coil::attention {
#define COIL_ATTENTION_DEFINE(T, M)                                                                \
  template void forward<T, M>(const Params&, const T*, const T*, const T*, const M*, T*, float*);  \
  template void logsumexp<T, M>(const Params&, const T*, const T*, const M*, float*);              \
  template void backward<T, M>(const Params&, Grad, const T*, const T*, const T*, const T*,        \
                               const T*, const float*, const M*, T*);                              \
  template void backward_kv<T, M>(const Params&, const T*, const T*, const T*, const T*, const T*, \
                                  const float*, const M*, T*, T*);
COIL_ATTENTION_INSTANCES(COIL_ATTENTION_DEFINE)
#undef COIL_ATTENTION_DEFINE
}  // namespace coil::attention
#pragma GCC visibility pop

// Timing the library GEMMs that generated code can call (kernels/coil_extern.h), for
// compile-time autotuning: which of oneDNN, OpenBLAS or a generated kernel to use for a shape.
//
// Each function times the library (the fastest sample) on random data that it allocates itself (per
// thread, grown as needed and kept up to 32 MiB for later calls, so repeated queries cost only the
// GEMMs), at the thread count the call would run with (omp_get_max_threads():
// coil::set_num_threads). One untimed warm-up call (oneDNN generates its kernels on first use),
// then a calibration call (the first sample); calls far shorter than 20 us are timed in batches
// (the clock's overhead), and the number of samples is cut so that they take about `max_seconds` in
// all (a call longer than max_seconds costs two calls: the warm-up and the one sample).
#pragma once

#include <cstdint>

namespace coil {

/// The fastest of up to `reps` timed samples (seconds) of one row-major C[M,N] = op(A)[M,K]
/// op(B)[K,N] through dnnl_sgemm (coil::ext::sgemm_dnnl), over up to `reps` samples. Dense
/// operands: lda = transA ? M : K, ldb = transB ? K : N, ldc = N. 0 when M, N or K is 0; throws
/// coil::Error when one is negative or the library fails.
double time_sgemm_dnnl(int64_t M, int64_t N, int64_t K, bool transA, bool transB, int reps = 5,
                       double max_seconds = 0.1);

/// The same through OpenBLAS's cblas_sgemm (coil::ext::sgemm_openblas). +infinity when libcoil
/// was built without OpenBLAS (extern_have_openblas() in runtime/isa.h), so that "take the
/// fastest" never picks it.
double time_sgemm_openblas(int64_t M, int64_t N, int64_t K, bool transA, bool transB, int reps = 5,
                           double max_seconds = 0.1);

}  // namespace coil

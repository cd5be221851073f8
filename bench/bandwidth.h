// Memory-bandwidth ceilings for the CPU benchmark suite (bench/cpu_bench.cpp): a STREAM-like
// copy and a read-only sum, parallelized with OpenMP over a static partition, with ordinary
// (temporal) stores. bandwidth.cpp is compiled with -O3 -march=native and with the compiler's
// loop-to-memcpy rewriting turned off, so that the copy stays a plain vector loop: glibc's
// memcpy would switch to non-temporal stores for large blocks, which generated kernels (coil's
// and Inductor's) do not use.
#pragma once

#include <cstdint>

namespace coil::bench {

/// dst[i] = src[i] for i < n, on `threads` OpenMP threads. Moves 8*n bytes (read + write).
void copy_floats(float* __restrict__ dst, const float* __restrict__ src, int64_t n, int threads);

/// The same copy with non-temporal (streaming) stores, which bypass the caches: a second,
/// informative number (generated kernels use ordinary stores). dst must be 64-byte aligned.
/// Returns false, copying with ordinary stores, where no streaming store is available.
bool copy_floats_nontemporal(float* __restrict__ dst, const float* __restrict__ src, int64_t n,
                             int threads);

/// Sum of src[0..n) (in any order), on `threads` OpenMP threads. Moves 4*n bytes (read only).
float sum_floats(const float* src, int64_t n, int threads);

/// Fills dst[0..n) with `value` on `threads` threads (first touch of the ceiling buffers).
void fill_floats(float* dst, int64_t n, float value, int threads);

}  // namespace coil::bench

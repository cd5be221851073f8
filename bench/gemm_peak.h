// The arithmetic peaks the matmul benchmark (gemm_bench.cpp) divides by: register-resident
// loops of independent AVX-512 instructions, no memory traffic, on every thread of an OpenMP
// team. Compiled with -mavx512f -mavx512bf16 -mfma (bench/CMakeLists.txt); call only on a CPU
// that has them (the caller checks __builtin_cpu_supports in a file built without those flags).
#pragma once

namespace coil::bench {

/// fp32 FLOP/s of `threads` threads each running vfmadd231ps zmm (16 lanes x 2 FLOPs) over 16
/// independent accumulators: the best of `samples` measurements lasting `seconds` in all (short
/// samples, so that on a shared machine some of them run undisturbed).
double fp32_fma_peak_flops(int threads, double seconds, int samples);

/// The same with vdpbf16ps zmm (16 lanes x 2 bf16 pairs x 2 FLOPs = 64 FLOPs per instruction).
double bf16_dot_peak_flops(int threads, double seconds, int samples);

}  // namespace coil::bench

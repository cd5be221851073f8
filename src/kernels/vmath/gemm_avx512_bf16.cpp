// coil::gemm::run_matmul for generated modules of the avx512 ISA on a CPU with AVX512-BF16
// (gemm_instances.h): as gemm_avx512.cpp plus -mavx512bf16, which selects the bf16 kernel.
#include "kernels/vmath/gemm_instances.h"

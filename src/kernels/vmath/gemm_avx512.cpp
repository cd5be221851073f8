// coil::gemm::run_matmul for generated modules of the avx512 ISA without bf16
// (gemm_instances.h). Compiled with the target features and -DCOIL_CPU_AVX512 that
// runtime/isa.cpp gives such a module (CMakeLists.txt), so both sides see the same code under
// the same names.
#include "kernels/vmath/gemm_instances.h"

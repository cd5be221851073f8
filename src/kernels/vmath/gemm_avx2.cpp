// coil::gemm::run_matmul for generated modules of the avx2 ISA (gemm_instances.h). Compiled
// with the target features and -DCOIL_CPU_AVX2 that runtime/isa.cpp gives such a module
// (CMakeLists.txt).
#include "kernels/vmath/gemm_instances.h"

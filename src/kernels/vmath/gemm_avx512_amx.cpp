// coil::gemm::run_matmul for generated modules of the avx512_amx ISA (gemm_instances.h): as
// gemm_avx512_bf16.cpp plus -mamx-tile -mamx-bf16, which selects the AMX bf16 kernel
// (PathAmx). Compiling needs no AMX CPU; only modules of that ISA call it.
#include "kernels/vmath/gemm_instances.h"

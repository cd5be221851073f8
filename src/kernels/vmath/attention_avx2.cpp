// coil::attention::forward, logsumexp and backward for generated modules of the avx2 ISA
// (attention_instances.h), compiled with the target features and -DCOIL_CPU_AVX2 that
// runtime/isa.cpp gives such a module (CMakeLists.txt).
#include "kernels/vmath/attention_instances.h"

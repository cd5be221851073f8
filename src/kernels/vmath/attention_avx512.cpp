// coil::attention::forward, logsumexp and backward for generated modules of the avx512 ISAs
// (attention_instances.h), compiled with the target features and -DCOIL_CPU_AVX512 that
// runtime/isa.cpp gives such a module (CMakeLists.txt), so both sides see the same code under the
// same names.
#include "kernels/vmath/attention_instances.h"

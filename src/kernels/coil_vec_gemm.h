// What a generated module with a matmul template includes first: the vector header and the GEMM
// header together, so that both come from one precompiled header (the code cache builds one
// per first-included header: coil_vec.h for other modules). Parsing coil_gemm.h took a fifth of
// such a module's compile time.
#pragma once

#include <vector>

#include "coil_gemm.h"
#include "coil_vec.h"

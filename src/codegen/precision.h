// The fp32 precision contract (CompileOptions::precision, `--precision`): which arithmetic f32
// matmuls and convolutions may use. The names are torch.set_float32_matmul_precision's.
//   highest  IEEE fp32 everywhere (the default): Triton tl.dot input_precision='ieee', cuBLAS and
//            cuDNN with TF32 off, oneDNN fpmath strict, coil's own C++ templates.
//   high     TF32 allowed on NVIDIA GPUs (tl.dot input_precision='tf32', cuBLAS and cuDNN TF32
//            on): a 10-bit mantissa for the products, f32 accumulation. x86 CPUs have no TF32,
//            so the CPU backend computes IEEE fp32 in both modes (the same code, the same cache
//            entry); docs/numerics.md gives the measured errors.
// bf16/f16 matmuls are unaffected: they always use the tensor cores with f32 accumulation.
#pragma once

#include <string>

#include "support/check.h"

namespace coil {

enum class Fp32Precision { highest, high };

inline const char* precision_name(Fp32Precision p) {
  return p == Fp32Precision::highest ? "highest" : "high";
}

/// CompileOptions::precision as the enum; a user error naming the value otherwise.
inline Fp32Precision parse_precision(const std::string& s) {
  if (s == "highest") return Fp32Precision::highest;
  if (s == "high") return Fp32Precision::high;
  COIL_USER_CHECK(false,
                  "precision '{}': expected highest (IEEE fp32, the default) or high (TF32 "
                  "matmuls and convolutions on NVIDIA GPUs)",
                  s);
  return Fp32Precision::highest;
}

}  // namespace coil

// COIL_TESTING_INJECT_BUG: a bug put into generated code on purpose, so that tests can prove
// that the tools which hunt bugs find one (`coil minify`, the fuzzer's shrinker). Inductor has
// the same switch (`inject_relu_bug_TESTING_ONLY`). Only the relu of generated kernels changes:
// relu fused into a library call (oneDNN's convolution post-op, cuBLASLt's epilogue) and the
// reference interpreter stay right, which is what makes the bug visible.
#pragma once

#include <string>

namespace coil {

enum class InjectedBug {
  none,
  relu_wrong,          // "relu": relu(-x) instead of relu(x), a wrong result
  relu_compile_error,  // "relu_compile_error": the generated code does not compile
  relu_crash,          // "relu_crash": the kernel traps when it runs (CPU only)
};

/// The bug COIL_TESTING_INJECT_BUG asks for; a value it does not know is a coil::Error naming
/// it and the known ones.
InjectedBug injected_bug();

/// How generated code spells relu: `coil::relu(x)` (scalar C++), `x.relu()` (a C++ vector) or
/// Triton's `tl.where`.
enum class ReluSyntax { cpp_call, cpp_method, triton };

/// The relu expression of `x` that generated code prints (with the injected bug, if any).
std::string relu_expression(const std::string& x, ReluSyntax syntax);

}  // namespace coil

// Internal to the CPU backend: kernels that are not loop nests (cpp_template.cpp). The kernel
// printer (cpp_kernel.cpp) opens the function and names the arguments; these print its body.
#pragma once

#include <optional>

#include "codegen/cpp/cpp_kernel.h"
#include "codegen/cpp/cpp_nest.h"

namespace coil {

/// The C++ lvalue of the accumulator tile at the epilogue's current element.
std::string accumulator_access(const Nest& n);

/// A template matmul whose B is a constant packs B once at load time: the packed copy (its
/// `param` left for the kernel printer to name). nullopt for any other computation.
std::optional<PackedOperand> load_time_packing(const NestPrinter& p, const ComputedBuffer& t);

/// The matmul template: packing of B (per call, or the load-time copy of out.packed),
/// coil::gemm::matmul, and the epilogue lambda running the `fused` pointwise nest (null: none)
/// on each output tile. `product_is_local`: the product is read only by the epilogue, so it is
/// never stored.
void emit_matmul_template(NestPrinter& p, const ComputedBuffer& t, const Nest* fused,
                          bool product_is_local, const CppKernelSource& out);
/// A matmul given to a library by autotuning: one sgemm call per batch.
void emit_library_matmul(NestPrinter& p, const ComputedBuffer& t);
/// conv2d through oneDNN.
void emit_extern_conv2d(NestPrinter& p, const ComputedBuffer& t);

}  // namespace coil

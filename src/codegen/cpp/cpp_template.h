// Internal to the CPU backend: kernels that are not loop nests (cpp_template.cpp). The kernel
// printer (cpp_kernel.cpp) opens the function and names the arguments; these print its body.
#pragma once

#include <optional>
#include <vector>

#include "codegen/cpp/cpp_kernel.h"
#include "codegen/cpp/cpp_nest.h"

namespace coil {

/// The C++ lvalue of the accumulator tile at the epilogue's current element.
std::string accumulator_access(const Nest& n);

struct CppKernelPlan;

/// The operands a template matmul packs once at load time, each with its `param` left for the
/// planner to name: a constant B, and a constant f32 A that is the same for every batch (the
/// weight of a 1x1 convolution run as W @ x). Empty for any other computation.
std::vector<PackedOperand> load_time_packing(const IrProgram& p, const ComputedBuffer& t);

/// The epilogue nest of template `t`: the product read from the accumulator tile, stored to
/// its buffer when it outlives the kernel (`store_product`), then the `fused` pointwise body
/// (null: none), its loads of the product redirected to the tile unless the product is
/// `product_narrowed` (stored in bf16, read back rounded).
Nest epilogue_nest(const ComputedBuffer& t, int product_buffer, bool product_narrowed,
                   const Nest* fused, bool store_product, int tmp_base);

/// The matmul template (plan.lead): packing of B (per call, or the load-time copy of
/// plan.packed), coil::gemm::matmul (matmul_packed_a where A was packed at load time), and the
/// epilogue lambda running plan.epilogue on each output tile as plan.epilogue_plan says.
void emit_matmul_template(NestPrinter& p, const CppKernelPlan& plan);

/// The shape part of a matmul kernel's heading comment: " batch [b..] [m, k] x [k, n]", with
/// a size-generic module's symbolic sizes printed as the code prints them.
std::string matmul_shape_text(const IrProgram& p, const ComputedBuffer& t);
/// A matmul given to a library by autotuning: one sgemm call per batch.
void emit_library_matmul(NestPrinter& p, const ComputedBuffer& t);
/// conv2d through oneDNN.
void emit_extern_conv2d(NestPrinter& p, const ComputedBuffer& t);
/// attention through coil_attention.h's flash kernel; `second_buffer` (or -1) the logsumexp
/// that a forward writes in the same pass (its attention_lse computation shares the kernel), or
/// the gradient of v that a gradient of k writes (backward_kv).
void emit_extern_attention(NestPrinter& p, const ComputedBuffer& t, int second_buffer = -1);
/// index_add as loops, each thread over its range of result rows, src rows added in index
/// order (deterministic).
void emit_extern_index_add(NestPrinter& p, const ComputedBuffer& t);

}  // namespace coil

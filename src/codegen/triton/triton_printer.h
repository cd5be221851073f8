// Spelling of loop-IR values and index expressions in Triton (Python): the "ops handler" of
// the GPU backend, Inductor's TritonOverrides. Every LoopOp has a case here (a missing one is a
// -Wswitch compile error), like codegen/cpp/cpp_printer.h for the CPU.
#pragma once

#include <string>
#include <vector>

#include "ir/loop_body.h"
#include "sym/analyzer.h"

namespace coil {

/// Triton element type of dtype `t` ("tl.float32", "tl.int1", "tl.bfloat16", ...).
std::string triton_dtype(DType t);
/// torch dtype spelled in the wrapper ("torch.float32", "torch.bool", ...).
std::string torch_dtype(DType t);

/// Python literal of a floating value: the shortest text that reads back as the same value of
/// dtype `t`, with float("inf") / float("nan") for the specials.
std::string python_float_literal(double value, DType t);

/// Prints an index expression of a kernel. Floor division and modulo print as `//` and `%`
/// where the analyzer proves the dividend non-negative; elsewhere as an expression with the
/// floored meaning, since Triton's integer `//` and `%` truncate toward zero (C semantics).
/// Min/Max print as tl.minimum/tl.maximum.
std::string triton_index(const sym::Expr& e, const sym::Analyzer& analyzer);

/// The Triton expression computing body op `op` from operands named `args` (already defined
/// temporaries of dtypes `arg_dtypes`). Not for load, store, reduction, index_expr and
/// constant, which the kernel printer spells itself (they need the kernel's masks and shapes).
std::string triton_op(const BodyOp& op, const std::vector<std::string>& args,
                      const std::vector<DType>& arg_dtypes);

/// The module-level @triton.jit helper `triton_op(op, ...)` calls ("_coil_int_pow" for an
/// integer pow), or "" for none.
std::string triton_op_helper(const BodyOp& op);

/// The value masked-out lanes take in a reduction over `t` values of dtype `value_dtype`,
/// so that they never change the result ("0", "float(\"-inf\")", "-2147483648", ...).
std::string reduction_identity(ReductionType t, DType value_dtype);

/// Combining two partial values of a reduction elementwise (the loop body of a looped
/// reduction): "{a} + {b}", "_coil_maximum({a}, {b})", ... Not for argmax/argmin.
std::string reduction_combine(ReductionType t, DType dtype, const std::string& a,
                              const std::string& b);
/// Reducing a [XBLOCK, R0_BLOCK] block along axis 1, keeping the axis:
/// "tl.sum({v}, 1)[:, None]". Not for argmax/argmin.
std::string reduction_over_axis(ReductionType t, DType dtype, const std::string& v);
/// The module-level @triton.jit helper a reduction needs ("_coil_maximum"), or "" for none.
std::string reduction_helper(ReductionType t, DType dtype);

/// Source of a module-level @triton.jit helper by name (NaN-propagating max/min, product,
/// argmax/argmin combine with eager's tie rule, integer pow).
std::string triton_helper_source(const std::string& name);

}  // namespace coil

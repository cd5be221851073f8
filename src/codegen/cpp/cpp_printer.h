// Spelling of loop-IR values and index expressions in C++: the scalar "ops handler" of the
// CPU backend. Every LoopOp has a case here (a missing one is a -Wswitch compile error).
#pragma once

#include <string>
#include <vector>

#include "ir/loop_body.h"
#include "sym/analyzer.h"

namespace coil {

/// C++ type a value of compute dtype `t` is held in ("float", "int64_t", "bool", ...).
std::string cpp_value_type(DType t);
/// C++ literal of `value` in dtype `t` ("0.5f", "static_cast<int64_t>(3)", NaN/inf spelled out).
std::string cpp_literal(double fvalue, int64_t ivalue, DType t);

/// Prints an index expression with int64 arithmetic. Floor division and modulo print as plain
/// `/` and `%` when the analyzer proves the dividend non-negative, else as coil::floordiv/mod.
std::string cpp_index(const sym::Expr& e, const sym::Analyzer& analyzer);

/// The C++ expression computing body op `op` whose operands are named `args` (already
/// declared temporaries). Not for load/store/reduction, which kernels print themselves.
std::string cpp_scalar_op(const BodyOp& op, const std::vector<std::string>& args,
                          const std::vector<DType>& arg_dtypes);

}  // namespace coil

// The one list of loop-IR ops. Every printer of loop bodies spells exactly this list: the
// scalar C++ printer (codegen/cpp/cpp_printer.cpp), the vector C++ printer (cpp_vec_kernel.cpp),
// the Triton printer (codegen/triton/triton_printer.cpp) and the IR dump (loop_body.cpp). Each
// switches over LoopOp without a `default:` and the build makes -Wswitch an error
// (CMakeLists.txt), so an op added here without a spelling in every printer does not compile;
// a table indexed by op checks its size against kNumLoopOps with a static_assert. Code that
// treats all math ops alike (print "name(args)", forward to the printer) lists them with
// COIL_LOOP_MATH_OPS, which keeps its switch complete as ops are added.
//
// Value semantics: every value in a loop body has a compute dtype (bool, u8, i8, i32, i64,
// f32, f64; never f16/bf16, which load as f32 and are rounded on store). A conversion to
// f16/bf16 inside a body (an explicit cast, a promoted operand, a forwarded store) is a
// round_to_f16/round_to_bf16 op: an f32 value with the precision of the narrow type, so that
// no rewrite can drop the rounding by mistaking the conversion for f32 -> f32. Float ops follow
// IEEE with no fast-math; integer division by zero is a user error in the reference and
// undefined in generated code (as in PyTorch).
//
// Indirect indexing (gather): `indirect_index(v)` turns an integer value v into an i64 index
// into a dim of size `ivalue`: v + size when v < 0 (ONNX/numpy wrapping). An index still
// outside [0, size) is an error, as in torch and the reference interpreter: generated code
// records the first one (value, size and the op, BodyOp::site) and clamps it so that nothing
// is read out of bounds, and the run then raises it as a coil::Error. Integer fmod by zero and
// integer pow with a negative exponent are checked the same way (BodyOp::site >= 0). A `load` whose
// args[0] is such a value may use the symbol indirect_var() ("ind") in its index, standing for that
// value.
#pragma once

#include <cstdint>
#include <string_view>

namespace coil {

// X(name, number of value operands, doc)
// The list is three, in enum order: sources (printed by each kernel from its buffers and
// indices), math (a pure function of its operands; each printer spells it), effects.
#define COIL_LOOP_OPS(X) COIL_LOOP_SOURCE_OPS(X) COIL_LOOP_MATH_OPS(X) COIL_LOOP_EFFECT_OPS(X)

#define COIL_LOOP_SOURCE_OPS(X)                                           \
  X(load, 0, "buffer[index], converted to its compute dtype")             \
  X(constant, 0, "a literal of the op's dtype")                           \
  X(index_expr, 0, "an index expression (sym::Expr) as an integer value") \
  X(indirect_index, 1, "an integer value as a clamped index (gather)")

#define COIL_LOOP_MATH_OPS(X)                                             \
  /* conversion */                                                        \
  X(to_dtype, 1, "static_cast to the op's dtype")                         \
  X(round_to_bf16, 1, "f32 rounded to the nearest bfloat16, kept as f32") \
  X(round_to_f16, 1, "f32 rounded to the nearest half, kept as f32")      \
  /* unary math */                                                        \
  X(abs, 1, "|x|")                                                        \
  X(neg, 1, "-x")                                                         \
  X(exp, 1, "e^x")                                                        \
  X(log, 1, "natural log")                                                \
  X(log1p, 1, "log(1 + x), accurate near 0")                              \
  X(expm1, 1, "e^x - 1, accurate near 0")                                 \
  X(sqrt, 1, "square root")                                               \
  X(rsqrt, 1, "1 / sqrt(x)")                                              \
  X(reciprocal, 1, "1 / x")                                               \
  X(relu, 1, "max(x, 0), NaN propagates")                                 \
  X(sigmoid, 1, "1 / (1 + e^-x)")                                         \
  X(tanh, 1, "hyperbolic tangent")                                        \
  X(erf, 1, "error function")                                             \
  X(sin, 1, "sine")                                                       \
  X(cos, 1, "cosine")                                                     \
  X(floor, 1, "round toward -inf")                                        \
  X(ceil, 1, "round toward +inf")                                         \
  X(round, 1, "round half to even (torch.round)")                         \
  X(sign, 1, "-1, 0 or 1 (NaN stays NaN)")                                \
  X(logical_not, 1, "!x as bool")                                         \
  X(isnan, 1, "x != x as bool")                                           \
  /* binary */                                                            \
  X(add, 2, "a + b")                                                      \
  X(sub, 2, "a - b")                                                      \
  X(mul, 2, "a * b")                                                      \
  X(div, 2, "a / b (true division; integers are converted before)")       \
  X(pow, 2, "a ^ b")                                                      \
  X(maximum, 2, "max(a, b), NaN propagates")                              \
  X(minimum, 2, "min(a, b), NaN propagates")                              \
  X(fmod, 2, "remainder with the sign of a (C fmod / integer %)")         \
  X(eq, 2, "a == b")                                                      \
  X(ne, 2, "a != b")                                                      \
  X(lt, 2, "a < b")                                                       \
  X(le, 2, "a <= b")                                                      \
  X(gt, 2, "a > b")                                                       \
  X(ge, 2, "a >= b")                                                      \
  X(logical_and, 2, "a && b")                                             \
  X(logical_or, 2, "a || b")                                              \
  /* ternary */                                                           \
  X(where, 3, "cond ? a : b")

#define COIL_LOOP_EFFECT_OPS(X)                                  \
  X(reduction, 1, "combines the value over the reduction loops") \
  X(store, 1, "buffer[index] = value, converted to the buffer's dtype")

enum class LoopOp : uint8_t {
#define COIL_LOOP_OP_ENUM(name, arity, doc) name,
  COIL_LOOP_OPS(COIL_LOOP_OP_ENUM)
#undef COIL_LOOP_OP_ENUM
};

#define COIL_LOOP_OP_COUNT(name, arity, doc) +1
/// Number of LoopOps: the size every table indexed by LoopOp must have.
inline constexpr int kNumLoopOps = 0 COIL_LOOP_OPS(COIL_LOOP_OP_COUNT);
#undef COIL_LOOP_OP_COUNT

/// `case LoopOp::name:` for each op of a list: `COIL_LOOP_MATH_OPS(COIL_LOOP_OP_CASE)`.
#define COIL_LOOP_OP_CASE(name, arity, doc) case LoopOp::name:

std::string_view loop_op_name(LoopOp op);
int loop_op_arity(LoopOp op);
/// exp, log, tanh, erf, sin, pow, ...: a vector math library call in generated code (tens of
/// instructions per vector), which the cost model and the CPU kernel printers weigh apart.
bool is_transcendental(LoopOp op);

// X(name, doc)
#define COIL_REDUCTION_TYPES(X)                                   \
  X(sum, "a + b; init 0")                                         \
  X(prod, "a * b; init 1")                                        \
  X(max, "NaN-propagating max; init -inf (lowest for integers)")  \
  X(min, "NaN-propagating min; init +inf (highest for integers)") \
  X(argmax, "index of the first max (NaN counts as max)")         \
  X(argmin, "index of the first min (NaN counts as min)")

enum class ReductionType : uint8_t {
#define COIL_RED_ENUM(name, doc) name,
  COIL_REDUCTION_TYPES(COIL_RED_ENUM)
#undef COIL_RED_ENUM
};

std::string_view reduction_type_name(ReductionType t);

}  // namespace coil

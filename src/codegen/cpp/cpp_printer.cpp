#include "codegen/cpp/cpp_printer.h"

#include <cmath>

#include <fmt/format.h>

#include "codegen/cpp/cpp_nest.h"
#include "codegen/inject_bug.h"
#include "support/check.h"

namespace coil {

std::string cpp_value_type(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::U8:
      return "uint8_t";
    case DType::I8:
      return "int8_t";
    case DType::I32:
      return "int32_t";
    case DType::I64:
      return "int64_t";
    case DType::I16:
      return "int16_t";
    case DType::U16:
      return "uint16_t";
    case DType::U32:
      return "uint32_t";
    case DType::U64:
      return "uint64_t";
    case DType::F16:
    case DType::BF16:
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
  }
  COIL_UNREACHABLE("bad dtype");
}

std::string cpp_literal(double fvalue, int64_t ivalue, DType t) {
  if (t == DType::Bool) return ivalue ? "true" : "false";
  if (!is_floating(t)) {
    if (t == DType::U64)  // ivalue holds the bits; 2^63 and above are not int64 literals
      return fmt::format("static_cast<uint64_t>({}ULL)", static_cast<uint64_t>(ivalue));
    if (t == DType::I64)
      return fmt::format("static_cast<int64_t>({}{})", ivalue,
                         ivalue > INT32_MAX || ivalue < INT32_MIN ? "LL" : "");
    return fmt::format("static_cast<{}>({})", cpp_value_type(t), ivalue);
  }
  std::string ty = cpp_value_type(t);
  if (std::isnan(fvalue)) return fmt::format("std::numeric_limits<{}>::quiet_NaN()", ty);
  if (std::isinf(fvalue))
    return fmt::format("{}std::numeric_limits<{}>::infinity()", fvalue < 0 ? "-" : "", ty);
  if (t == DType::F64) {
    std::string s = fmt::format("{}", fvalue);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
  // Shortest text that reads back as the same float.
  std::string s = fmt::format("{}", static_cast<float>(fvalue));
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

namespace {

std::string int_literal(int64_t v) {
  return v > INT32_MAX || v < INT32_MIN ? fmt::format("{}LL", v) : std::to_string(v);
}

std::string print(const sym::Expr& e, const sym::Analyzer& a, bool parens);

std::string print_term(const sym::Expr& e, const sym::Analyzer& a) {
  return print(e, a, e.kind() == sym::ExprKind::Add);
}

std::string print(const sym::Expr& e, const sym::Analyzer& a, bool parens) {
  using K = sym::ExprKind;
  auto ops = e.operands();
  std::string s;
  switch (e.kind()) {
    case K::Const:
      return e.const_value() < 0 && parens ? fmt::format("({})", int_literal(e.const_value()))
                                           : int_literal(e.const_value());
    case K::Symbol:
      return e.symbol_name();
    case K::Add: {
      // Constant last, negative terms as subtraction.
      for (size_t i = 0; i < ops.size(); ++i) {
        std::string t = print(ops[i], a, false);
        if (i > 0) {
          if (!t.empty() && t[0] == '-')
            s += " - " + t.substr(1);
          else
            s += " + " + t;
        } else {
          s = t;
        }
      }
      return parens ? "(" + s + ")" : s;
    }
    case K::Mul: {
      std::vector<std::string> parts;
      for (const auto& o : ops) parts.push_back(print_term(o, a));
      s = fmt::format("{}", fmt::join(parts, "*"));
      return s;
    }
    case K::FloorDiv:
    case K::Mod: {
      bool div = e.kind() == K::FloorDiv;
      if (a.statically_known_nonnegative(ops[0]) && a.statically_known_nonnegative(ops[1] - 1)) {
        s = fmt::format("{} {} {}", print(ops[0], a, true), div ? "/" : "%",
                        print(ops[1], a, true));
        return "(" + s + ")";
      }
      return fmt::format("coil::{}({}, {})", div ? "floordiv" : "floormod", print(ops[0], a, false),
                         print(ops[1], a, false));
    }
    case K::Min:
    case K::Max: {
      std::string acc = print(ops[0], a, false);
      for (size_t i = 1; i < ops.size(); ++i)
        acc = fmt::format("std::{}<int64_t>({}, {})", e.kind() == K::Min ? "min" : "max", acc,
                          print(ops[i], a, false));
      return acc;
    }
  }
  COIL_UNREACHABLE("bad expr kind");
}

}  // namespace

std::string cpp_index(const sym::Expr& e, const sym::Analyzer& analyzer) {
  return print(e, analyzer, false);
}

std::string cpp_scalar_op(const BodyOp& op, const std::vector<std::string>& args,
                          const std::vector<DType>& arg_dtypes) {
  const std::string ty = cpp_value_type(op.dtype);
  auto a = [&](size_t i) -> const std::string& { return args[i]; };
  bool fp = is_floating(op.dtype);
  switch (op.op) {
    case LoopOp::load:
    case LoopOp::store:
    case LoopOp::reduction:
    case LoopOp::index_expr:
      COIL_UNREACHABLE("{} is printed by the kernel", loop_op_name(op.op));
    case LoopOp::constant:
      return cpp_literal(op.fvalue, op.ivalue, op.dtype);
    case LoopOp::indirect_index:
      // Wraps a negative index once; one still out of range is recorded for the run's error
      // and clamped, so nothing is read out of bounds (coil_kernel.h).
      // (a size-generic gather's dim prints as its size expression, ks0)
      return fmt::format(
          "coil::checked_index(static_cast<int64_t>({}), {}, coil_run_error, {})", a(0),
          op.extent.defined() ? extent_text(op.extent, op.ivalue) : std::to_string(op.ivalue),
          op.site);
    case LoopOp::to_dtype:
      // int -> float through coil::int_to_float: g++ folds (float)(int)x into trunc(x), -0.0
      // for x in (-1, 0] (coil_kernel.h).
      if (fp && !is_floating(arg_dtypes[0]) && arg_dtypes[0] != DType::Bool)
        return fmt::format("coil::int_to_float<{}>({})", ty, a(0));
      // f64 -> f32 through coil::f64_to_f32: g++ 12's SLP vectorizer folds (double)(float)x
      // back into x (coil_kernel.h).
      if (op.dtype == DType::F32 && arg_dtypes[0] == DType::F64)
        return fmt::format("coil::f64_to_f32({})", a(0));
      return fmt::format("static_cast<{}>({})", ty, a(0));
    case LoopOp::round_to_bf16:
      return fmt::format("static_cast<float>(coil::bfloat16({}))", a(0));
    case LoopOp::round_to_f16:
      return fmt::format("static_cast<float>(coil::half({}))", a(0));
    case LoopOp::abs:
      if (fp) return fmt::format("std::abs({})", a(0));
      // std::abs of an unsigned int or long is ambiguous; |x| of an unsigned type is x.
      if (!is_signed_integer(op.dtype)) return a(0);
      return fmt::format("static_cast<{}>(std::abs({}))", ty, a(0));
    case LoopOp::neg:
      return fmt::format("-{}", a(0));
    case LoopOp::exp:
      return fmt::format("coil::lane::exp({})", a(0));
    case LoopOp::log:
      return fmt::format("coil::lane::log({})", a(0));
    case LoopOp::log1p:
      return fmt::format("coil::lane::log1p({})", a(0));
    case LoopOp::expm1:
      return fmt::format("coil::lane::expm1({})", a(0));
    case LoopOp::sqrt:
      return fmt::format("std::sqrt({})", a(0));
    case LoopOp::rsqrt:
      return fmt::format("{}(1) / std::sqrt({})", ty, a(0));
    case LoopOp::reciprocal:
      return fmt::format("{}(1) / {}", ty, a(0));
    case LoopOp::relu:
      return relu_expression(a(0), ReluSyntax::cpp_call);
    case LoopOp::sigmoid:
      return fmt::format("coil::lane::sigmoid({})", a(0));
    case LoopOp::tanh:
      return fmt::format("coil::lane::tanh({})", a(0));
    case LoopOp::erf:
      return fmt::format("coil::lane::erf({})", a(0));
    case LoopOp::sin:
      return fmt::format("coil::lane::sin({})", a(0));
    case LoopOp::cos:
      return fmt::format("coil::lane::cos({})", a(0));
    case LoopOp::floor:
      return fp ? fmt::format("std::floor({})", a(0)) : a(0);
    case LoopOp::ceil:
      return fp ? fmt::format("std::ceil({})", a(0)) : a(0);
    case LoopOp::round:
      return fp ? fmt::format("std::nearbyint({})", a(0)) : a(0);
    case LoopOp::sign:
      return fmt::format("coil::sign({})", a(0));
    case LoopOp::logical_not:
      return fmt::format("!{}", a(0));
    case LoopOp::isnan:
      return fmt::format("coil::isnan_({})", a(0));
    case LoopOp::add:
      return fmt::format("{} + {}", a(0), a(1));
    case LoopOp::sub:
      return fmt::format("{} - {}", a(0), a(1));
    case LoopOp::mul:
      // u16 operands promote to int, whose product overflows (65535 * 65535): undefined.
      if (op.dtype == DType::U16)
        return fmt::format("static_cast<uint16_t>(static_cast<uint32_t>({}) * {})", a(0), a(1));
      return fmt::format("{} * {}", a(0), a(1));
    case LoopOp::div:
      return fmt::format("{} / {}", a(0), a(1));
    case LoopOp::pow:
      if (fp) return fmt::format("coil::lane::pow({}, {})", a(0), a(1));
      if (op.site >= 0)
        return fmt::format("coil::checked_ipow<{}>({}, {}, coil_run_error, {})", ty, a(0), a(1),
                           op.site);
      return fmt::format("coil::ipow<{}>({}, {})", ty, a(0), a(1));
    // No explicit template argument: coil_vec.h's vector overloads must not be instantiated.
    case LoopOp::maximum:
      return fmt::format("coil::maximum({}, {})", a(0), a(1));
    case LoopOp::minimum:
      return fmt::format("coil::minimum({}, {})", a(0), a(1));
    case LoopOp::fmod:
      if (fp) return fmt::format("std::fmod({}, {})", a(0), a(1));
      if (op.site >= 0)
        return fmt::format("coil::checked_int_fmod({}, {}, coil_run_error, {})", a(0), a(1),
                           op.site);
      return fmt::format("coil::int_fmod({}, {})", a(0), a(1));
    case LoopOp::eq:
      return fmt::format("{} == {}", a(0), a(1));
    case LoopOp::ne:
      return fmt::format("{} != {}", a(0), a(1));
    case LoopOp::lt:
      return fmt::format("{} < {}", a(0), a(1));
    case LoopOp::le:
      return fmt::format("{} <= {}", a(0), a(1));
    case LoopOp::gt:
      return fmt::format("{} > {}", a(0), a(1));
    case LoopOp::ge:
      return fmt::format("{} >= {}", a(0), a(1));
    // Not && and ||: they branch (see where below); both operands are values already.
    case LoopOp::logical_and:
      return fmt::format("static_cast<bool>({}) & static_cast<bool>({})", a(0), a(1));
    case LoopOp::logical_or:
      return fmt::format("static_cast<bool>({}) | static_cast<bool>({})", a(0), a(1));
    case LoopOp::where:
      // Not `c ? a : b`: a branch, which g++ 12/13 can turn into wrong masked loads (coil::select).
      return fmt::format("coil::select<{}>({}, {}, {})", ty, a(0), a(1), a(2));
  }
  (void)arg_dtypes;
  COIL_UNREACHABLE("bad loop op");
}

}  // namespace coil

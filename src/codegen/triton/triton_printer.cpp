#include "codegen/triton/triton_printer.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/inject_bug.h"
#include "support/check.h"

namespace coil {

std::string triton_dtype(DType t) {
  switch (t) {
    case DType::Bool:
      return "tl.int1";
    case DType::U8:
      return "tl.uint8";
    case DType::I8:
      return "tl.int8";
    case DType::I32:
      return "tl.int32";
    case DType::I64:
      return "tl.int64";
    case DType::F16:
      return "tl.float16";
    case DType::BF16:
      return "tl.bfloat16";
    case DType::F32:
      return "tl.float32";
    case DType::F64:
      return "tl.float64";
    case DType::I16:
      return "tl.int16";
    case DType::U16:
      return "tl.uint16";
    case DType::U32:
      return "tl.uint32";
    case DType::U64:
      return "tl.uint64";
  }
  COIL_UNREACHABLE("bad dtype");
}

std::string torch_dtype(DType t) {
  switch (t) {
    case DType::Bool:
      return "torch.bool";
    case DType::U8:
      return "torch.uint8";
    case DType::I8:
      return "torch.int8";
    case DType::I32:
      return "torch.int32";
    case DType::I64:
      return "torch.int64";
    case DType::F16:
      return "torch.float16";
    case DType::BF16:
      return "torch.bfloat16";
    case DType::F32:
      return "torch.float32";
    case DType::F64:
      return "torch.float64";
    // torch 2.3 added uint16/32/64; the module's loader needs such a torch for these.
    case DType::I16:
      return "torch.int16";
    case DType::U16:
      return "torch.uint16";
    case DType::U32:
      return "torch.uint32";
    case DType::U64:
      return "torch.uint64";
  }
  COIL_UNREACHABLE("bad dtype");
}

std::string python_float_literal(double value, DType t) {
  if (std::isnan(value)) return "float(\"nan\")";
  if (std::isinf(value)) return value < 0 ? "float(\"-inf\")" : "float(\"inf\")";
  // Shortest text that reads back as the same value in the dtype's precision (Triton turns a
  // Python float into an fp32 constant when it meets fp32 tensors).
  std::string s =
      t == DType::F64 ? fmt::format("{}", value) : fmt::format("{}", static_cast<float>(value));
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string print(const sym::Expr& e, const sym::Analyzer& a);

/// A factor of a product or an operand of // and %: wrapped when it is a sum.
std::string print_operand(const sym::Expr& e, const sym::Analyzer& a) {
  std::string s = print(e, a);
  if (e.kind() == sym::ExprKind::Add || (e.is_const() && e.const_value() < 0)) return "(" + s + ")";
  return s;
}

std::string print(const sym::Expr& e, const sym::Analyzer& a) {
  using K = sym::ExprKind;
  auto ops = e.operands();
  switch (e.kind()) {
    case K::Const:
      return std::to_string(e.const_value());
    case K::Symbol:
      return e.symbol_name();
    case K::Add: {
      // Constants last, negative coefficients as subtraction (the canonical order puts the
      // constant first).
      std::vector<sym::Expr> terms(ops.begin(), ops.end());
      std::stable_partition(terms.begin(), terms.end(),
                            [](const sym::Expr& t) { return !t.is_const(); });
      std::string s;
      for (size_t i = 0; i < terms.size(); ++i) {
        std::string t = print(terms[i], a);
        if (i == 0) {
          s = t;
        } else if (!t.empty() && t[0] == '-') {
          s += " - " + t.substr(1);
        } else {
          s += " + " + t;
        }
      }
      return s;
    }
    case K::Mul: {
      // -1*x prints as -x.
      bool negated = ops.size() > 1 && ops[0].is_const() && ops[0].const_value() == -1;
      std::vector<std::string> factors;
      for (size_t i = negated ? 1 : 0; i < ops.size(); ++i)
        factors.push_back(print_operand(ops[i], a));
      return fmt::format("{}{}", negated ? "-" : "", fmt::join(factors, "*"));
    }
    case K::FloorDiv:
    case K::Mod: {
      bool div = e.kind() == K::FloorDiv;
      std::string x = print_operand(ops[0], a), m = print_operand(ops[1], a);
      if (a.statically_known_nonnegative(ops[0]))
        return fmt::format("({} {} {})", x, div ? "//" : "%", m);
      // Triton's integer // and % truncate toward zero; rebuild the floored meaning from the
      // truncated remainder, which lies in (-m, m): ((x % m) + m) % m is in [0, m).
      std::string floored_mod = fmt::format("((({} % {}) + {}) % {})", x, m, m, m);
      if (!div) return floored_mod;
      return fmt::format("(({} - {}) // {})", x, floored_mod, m);
    }
    case K::Min:
    case K::Max: {
      std::string acc = print(ops[0], a);
      for (size_t i = 1; i < ops.size(); ++i)
        acc = fmt::format("tl.{}({}, {})", e.kind() == K::Min ? "minimum" : "maximum", acc,
                          print(ops[i], a));
      return acc;
    }
  }
  COIL_UNREACHABLE("bad expr kind");
}

}  // namespace

std::string triton_index(const sym::Expr& e, const sym::Analyzer& analyzer) {
  return print(e, analyzer);
}

namespace {

/// `{x} / {y}`, as `tl.div_rn` where both are f32 (`f32`): Triton's `/` on f32 is PTX's
/// div.full.f32, within 2 ulp and flushing subnormals, so x / x came out as 0.99999994 and
/// x / 1.0 differed from x; torch divides correctly rounded. f64's `/` is already div.rn.f64.
std::string f32_div(const std::string& x, const std::string& y, bool f32) {
  if (f32) return fmt::format("tl.div_rn({}, {})", x, y);
  return fmt::format("{} / {}", x, y);
}

/// Exponent bits `_coil_int_pow` walks for an exponent of dtype `t` (a negative exponent gives
/// 0, so a signed type's sign bit is not one of them).
int int_pow_bits(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::U8:
      return 8;
    case DType::I8:
      return 7;
    case DType::I32:
      return 31;
    case DType::I16:
      return 15;
    case DType::U16:
      return 16;
    case DType::U32:
      return 32;
    case DType::U64:
      return 64;
    default:
      return 63;
  }
}

}  // namespace

std::string triton_op_helper(const BodyOp& op) {
  if (op.op == LoopOp::pow && !is_floating(op.dtype)) return "_coil_int_pow";
  return "";
}

std::string triton_op(const BodyOp& op, const std::vector<std::string>& args,
                      const std::vector<DType>& arg_dtypes) {
  auto a = [&](size_t i) -> const std::string& { return args[i]; };
  const bool fp = is_floating(op.dtype);
  const std::string ty = triton_dtype(op.dtype);
  switch (op.op) {
    case LoopOp::load:
    case LoopOp::store:
    case LoopOp::reduction:
    case LoopOp::index_expr:
    case LoopOp::indirect_index:
    case LoopOp::constant:
      COIL_UNREACHABLE("{} is printed by the kernel", loop_op_name(op.op));
    case LoopOp::to_dtype:
      // Triton converts to int1 by truncation; torch's bool() is `!= 0`.
      if (op.dtype == DType::Bool) return fmt::format("{} != 0", a(0));
      return fmt::format("{}.to({})", a(0), ty);
    case LoopOp::round_to_bf16:
      return fmt::format("{}.to(tl.bfloat16).to(tl.float32)", a(0));
    case LoopOp::round_to_f16:
      return fmt::format("{}.to(tl.float16).to(tl.float32)", a(0));
    case LoopOp::abs:
      return fmt::format("tl.abs({})", a(0));
    case LoopOp::neg:
      return fmt::format("-{}", a(0));
    case LoopOp::exp:
      return fmt::format("tl.exp({})", a(0));
    case LoopOp::log:
      return fmt::format("tl.log({})", a(0));
    case LoopOp::log1p:
      return fmt::format("libdevice.log1p({})", a(0));
    case LoopOp::expm1:
      return fmt::format("libdevice.expm1({})", a(0));
    // tl.sqrt is an approximation on NVIDIA GPUs; libdevice's is correctly rounded.
    case LoopOp::sqrt:
      return fmt::format("libdevice.sqrt({})", a(0));
    case LoopOp::rsqrt:
      return fmt::format("libdevice.rsqrt({})", a(0));
    case LoopOp::reciprocal:
      return f32_div("1.0", a(0), op.dtype == DType::F32 && arg_dtypes[0] == DType::F32);
    case LoopOp::relu:
      return relu_expression(a(0), ReluSyntax::triton);
    case LoopOp::sigmoid:
      return fmt::format("tl.sigmoid({})", a(0));
    case LoopOp::tanh:
      return fmt::format("libdevice.tanh({})", a(0));
    case LoopOp::erf:
      return fmt::format("libdevice.erf({})", a(0));
    case LoopOp::sin:
      return fmt::format("libdevice.sin({})", a(0));
    case LoopOp::cos:
      return fmt::format("libdevice.cos({})", a(0));
    case LoopOp::floor:
      return fp ? fmt::format("libdevice.floor({})", a(0)) : a(0);
    case LoopOp::ceil:
      return fp ? fmt::format("libdevice.ceil({})", a(0)) : a(0);
    case LoopOp::round:
      // Half to even under the default rounding mode, like torch.round.
      return fp ? fmt::format("libdevice.nearbyint({})", a(0)) : a(0);
    case LoopOp::sign:
      // -1, 0 or 1; NaN stays NaN; +-0 gives +0, as torch.sign and the CPU backend (coil::sign).
      // (Returning the operand for "neither > 0 nor < 0" kept -0.0: coil_fuzz seed 500 graph 1976.)
      if (fp)
        return fmt::format(
            "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, tl.where({0} != {0}, {0}, 0.0)))",
            a(0));
      return fmt::format("(({0} > 0).to({1}) - ({0} < 0).to({1}))", a(0), ty);
    case LoopOp::logical_not:
      return fmt::format("{} == 0", a(0));
    case LoopOp::isnan:
      return fmt::format("{0} != {0}", a(0));
    case LoopOp::add:
      // torch's bool + bool is logical or; `+` on int1 wraps (True + True is False).
      if (op.dtype == DType::Bool) return fmt::format("{} | {}", a(0), a(1));
      return fmt::format("{} + {}", a(0), a(1));
    case LoopOp::sub:
      return fmt::format("{} - {}", a(0), a(1));
    case LoopOp::mul:
      return fmt::format("{} * {}", a(0), a(1));
    case LoopOp::div:
      return f32_div(
          a(0), a(1),
          op.dtype == DType::F32 && arg_dtypes[0] == DType::F32 && arg_dtypes[1] == DType::F32);
    case LoopOp::pow:
      if (fp) return fmt::format("libdevice.pow({}, {})", a(0), a(1));
      // Integer powers by squaring in the integer type, wrapping like torch's. Through f64 they
      // were wrong twice over: libdevice's pow is not exact (pow(3, 1) truncated to 2), and an
      // f64 beyond the range of the result type converts to an undefined value.
      return fmt::format("{}({}, {}, {})", triton_op_helper(op), a(0), a(1),
                         int_pow_bits(arg_dtypes[1]));
    // tl.maximum alone returns the non-NaN operand; torch.maximum propagates NaN.
    case LoopOp::maximum:
      return fp ? fmt::format("tl.maximum({}, {}, propagate_nan=tl.PropagateNan.ALL)", a(0), a(1))
                : fmt::format("tl.maximum({}, {})", a(0), a(1));
    case LoopOp::minimum:
      return fp ? fmt::format("tl.minimum({}, {}, propagate_nan=tl.PropagateNan.ALL)", a(0), a(1))
                : fmt::format("tl.minimum({}, {})", a(0), a(1));
    case LoopOp::fmod:
      // Triton's integer % truncates like C's, which is fmod's sign rule.
      return fp ? fmt::format("libdevice.fmod({}, {})", a(0), a(1))
                : fmt::format("{} % {}", a(0), a(1));
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
    case LoopOp::logical_and:
    case LoopOp::logical_or: {
      // Bitwise on int1 values; other operands are tested against zero first.
      std::string l = arg_dtypes[0] == DType::Bool ? a(0) : fmt::format("({} != 0)", a(0));
      std::string r = arg_dtypes[1] == DType::Bool ? a(1) : fmt::format("({} != 0)", a(1));
      return fmt::format("{} {} {}", l, op.op == LoopOp::logical_and ? "&" : "|", r);
    }
    case LoopOp::where:
      return fmt::format("tl.where({}, {}, {})", a(0), a(1), a(2));
  }
  COIL_UNREACHABLE("bad loop op");
}

namespace {

/// Lowest and highest values of an integer dtype, as Python literals.
std::pair<std::string, std::string> int_limits(DType t) {
  switch (t) {
    case DType::Bool:
      return {"0", "1"};
    case DType::U8:
      return {"0", "255"};
    case DType::I8:
      return {"-128", "127"};
    case DType::I32:
      return {"-2147483648", "2147483647"};
    case DType::I16:
      return {"-32768", "32767"};
    case DType::U16:
      return {"0", "65535"};
    case DType::U32:
      return {"0", "4294967295"};
    case DType::U64:
      return {"0", "18446744073709551615"};
    default:
      return {"-9223372036854775808", "9223372036854775807"};
  }
}

bool is_max_like(ReductionType t) {
  return t == ReductionType::max || t == ReductionType::argmax;
}

}  // namespace

std::string reduction_identity(ReductionType t, DType value_dtype) {
  switch (t) {
    case ReductionType::sum:
      return "0";
    case ReductionType::prod:
      return "1";
    case ReductionType::max:
    case ReductionType::min:
    case ReductionType::argmax:
    case ReductionType::argmin:
      if (is_floating(value_dtype)) return is_max_like(t) ? "float(\"-inf\")" : "float(\"inf\")";
      return is_max_like(t) ? int_limits(value_dtype).first : int_limits(value_dtype).second;
  }
  COIL_UNREACHABLE("bad reduction");
}

std::string reduction_helper(ReductionType t, DType dtype) {
  switch (t) {
    case ReductionType::sum:
      return "";
    case ReductionType::prod:
      return "_coil_prod";
    case ReductionType::max:
      return is_floating(dtype) ? "_coil_maximum" : "";
    case ReductionType::min:
      return is_floating(dtype) ? "_coil_minimum" : "";
    case ReductionType::argmax:
      return "_coil_argmax_combine";
    case ReductionType::argmin:
      return "_coil_argmin_combine";
  }
  COIL_UNREACHABLE("bad reduction");
}

std::string reduction_combine(ReductionType t, DType dtype, const std::string& a,
                              const std::string& b) {
  switch (t) {
    case ReductionType::sum:
      return fmt::format("{} + {}", a, b);
    case ReductionType::prod:
      return fmt::format("{} * {}", a, b);
    case ReductionType::max:
    case ReductionType::min: {
      std::string helper = reduction_helper(t, dtype);
      if (!helper.empty()) return fmt::format("{}({}, {})", helper, a, b);
      return fmt::format("tl.{}({}, {})", t == ReductionType::max ? "maximum" : "minimum", a, b);
    }
    case ReductionType::argmax:
    case ReductionType::argmin:
      break;
  }
  COIL_UNREACHABLE("{} combines values with their indices", reduction_type_name(t));
}

std::string reduction_over_axis(ReductionType t, DType dtype, const std::string& v) {
  switch (t) {
    case ReductionType::sum:
      return fmt::format("tl.sum({}, 1)[:, None]", v);
    case ReductionType::prod:
      return fmt::format("tl.reduce({}, 1, _coil_prod)[:, None]", v);
    case ReductionType::max:
    case ReductionType::min: {
      // tl.max/tl.min drop NaN for floats; torch.amax/amin propagate it.
      std::string helper = reduction_helper(t, dtype);
      if (!helper.empty()) return fmt::format("tl.reduce({}, 1, {})[:, None]", v, helper);
      return fmt::format("tl.{}({}, 1)[:, None]", t == ReductionType::max ? "max" : "min", v);
    }
    case ReductionType::argmax:
    case ReductionType::argmin:
      break;
  }
  COIL_UNREACHABLE("{} reduces values with their indices", reduction_type_name(t));
}

std::string triton_helper_source(const std::string& name) {
  if (name == "_coil_maximum" || name == "_coil_minimum") {
    bool mx = name == "_coil_maximum";
    return fmt::format(
        "@triton.jit\n"
        "def {0}(a, b):\n"
        "    # NaN-propagating {1} (torch.{1}, torch.a{2}); tl.{1} alone drops NaN\n"
        "    return tl.{1}(a, b, propagate_nan=tl.PropagateNan.ALL)\n",
        name, mx ? "maximum" : "minimum", mx ? "max" : "min");
  }
  if (name == "_coil_int_pow") {
    return "@triton.jit\n"
           "def _coil_int_pow(base, exponent, BITS: tl.constexpr):\n"
           "    # torch's integer pow: square and multiply over the exponent's low BITS bits,\n"
           "    # wrapping in the integer type; a negative exponent gives 0 (torch raises)\n"
           "    base, exponent = tl.broadcast(base, exponent)\n"
           "    result = tl.full(base.shape, 1, base.dtype)\n"
           "    for i in tl.static_range(BITS):\n"
           "        result = tl.where(((exponent >> i) & 1) != 0, result * base, result)\n"
           "        base = base * base\n"
           "    return tl.where(exponent < 0, tl.zeros_like(result), result)\n";
  }
  if (name == "_coil_prod") {
    return "@triton.jit\n"
           "def _coil_prod(a, b):\n"
           "    return a * b\n";
  }
  if (name == "_coil_argmax_combine" || name == "_coil_argmin_combine") {
    bool mx = name == "_coil_argmax_combine";
    return fmt::format(
        "@triton.jit\n"
        "def {0}(a_value, a_index, b_value, b_index):\n"
        "    # eager's {1}: the first index of the {2}imum, NaN counting as the {2}imum\n"
        "    a_nan = a_value != a_value\n"
        "    b_nan = b_value != b_value\n"
        "    a_wins = (a_value {3} b_value) | (a_nan & (b_nan == 0))\n"
        "    tie = (a_value == b_value) | (a_nan & b_nan)\n"
        "    a_wins = a_wins | (tie & (a_index < b_index))\n"
        "    return tl.where(a_wins, a_value, b_value), tl.where(a_wins, a_index, b_index)\n",
        name, mx ? "argmax" : "argmin", mx ? "max" : "min", mx ? ">" : "<");
  }
  COIL_UNREACHABLE("no Triton helper named {}", name);
}

}  // namespace coil

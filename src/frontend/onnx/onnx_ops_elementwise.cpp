// Elementwise ONNX ops that map onto one coil op, or a few: unary and binary math, comparisons,
// logic, Where, Cast, Clip, Mod, BitShift, the variadic Sum/Mean/Max/Min.
#include <cmath>
#include <limits>
#include <map>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::onnxfe {

void map_unary(OnnxNode& n) {
  static const std::map<std::string, std::string_view, std::less<>> ops = {
      {"Abs", "abs"},     {"Neg", "neg"},         {"Exp", "exp"},
      {"Log", "log"},     {"Sqrt", "sqrt"},       {"Reciprocal", "reciprocal"},
      {"Relu", "relu"},   {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"},
      {"Erf", "erf"},     {"Sin", "sin"},         {"Cos", "cos"},
      {"Floor", "floor"}, {"Ceil", "ceil"},       {"Round", "round"},
      {"Sign", "sign"},   {"Not", "logical_not"}, {"IsNaN", "isnan"},
  };
  int x = n.in(0);
  n.set_output(0, n.add(ops.at(n.op_type()), {x}));
}

void map_identity(OnnxNode& n) {
  int x = n.in(0);
  if (n.op_type() == "Dropout") {
    // Inference: the identity, and an all-true mask. In training mode (opset 12) only a ratio of
    // 0 is deterministic: nothing is dropped and the scale 1 / (1 - ratio) is 1, the identity.
    if (n.has_input(2) && n.const_scalar(2, "training_mode") != 0) {
      double ratio = n.has_input(1) ? n.const_scalar(1, "ratio") : 0.5;
      if (ratio != 0) unsupported("training_mode is true with ratio {} (random drops)", ratio);
    }
    // Opsets 1 to 6: is_test=0 (the default) is training mode; only is_test=1 is the identity.
    if (n.opset() < 7 && n.attr_int("is_test", 0) == 0)
      unsupported("is_test=0 (training mode; opset {} needs is_test=1 for inference)", n.opset());
    // The drop probability and the random seed apply in training only.
    n.ignore_attr("ratio");
    n.ignore_attr("seed");
    if (n.wants_output(1)) {
      std::vector<int64_t> shape = n.static_shape(x, "the input");
      n.set_output(
          1, n.add("full", {}, Attrs{{"shape", shape}, {"value", 1.0}, {"dtype", DType::Bool}}));
    }
  }
  n.set_output(0, x);
}

namespace {

// Integer division truncates toward zero (as onnxruntime's does), computed in f64: exact for
// magnitudes below 2^53.
int int_div(OnnxNode& n, int a, int b) {
  DType t = n.dtype(a);
  int q = n.add("div", {n.cast(a, DType::F64), n.cast(b, DType::F64)});
  return n.cast(q, t);
}

// Opsets 1 to 6: a binary op broadcasts only with broadcast=1, and then B onto A's shape: B's
// dims line up with A's from `axis` on (default: A's trailing dims), each equal or 1. B becomes
// A's rank by unsqueezes, after which numpy broadcasting computes the same thing.
int legacy_broadcast(OnnxNode& n, int a, int b) {
  const Shape& sa = n.type(a).shape;
  const Shape& sb = n.type(b).shape;
  if (n.attr_int("broadcast", 0) == 0) {
    n.ignore_attr("axis");  // where B lines up in A: meaningless without broadcast
    if (sa != sb)
      n.error(
          "inputs of shapes {} and {} differ and broadcast is 0 (opset {} broadcasts only "
          "with broadcast=1)",
          shape_str(sa), shape_str(sb), n.opset());
    return b;
  }
  auto ra = static_cast<int64_t>(sa.size()), rb = static_cast<int64_t>(sb.size());
  // Without `axis`, B of a higher rank than A made the default axis negative and read before A's
  // shape (found by tests/fuzz/parsers/onnx_parser_fuzzer).
  if (rb > ra) n.error("B {} has more dims than A {} (broadcast=1)", shape_str(sb), shape_str(sa));
  int64_t axis = n.has_attr("axis") ? n.axis(n.attr_int("axis", 0), ra) : ra - rb;
  if (axis + rb > ra)
    n.error("B {} does not fit into A {} from axis {} (broadcast=1)", shape_str(sb), shape_str(sa),
            axis);
  for (int64_t i = 0; i < rb; ++i) {
    const sym::Expr& db = sb[static_cast<size_t>(i)];
    if (db != sa[static_cast<size_t>(axis + i)] && db != sym::Expr(1))
      n.error("cannot broadcast B {} onto A {} from axis {} (dim {}: {} vs {})", shape_str(sb),
              shape_str(sa), axis, i, sym::to_string(db),
              sym::to_string(sa[static_cast<size_t>(axis + i)]));
  }
  for (int64_t i = 0; i < ra - axis - rb; ++i)
    b = n.add("unsqueeze", {b}, Attrs{{"dim", int64_t{-1}}});
  return b;
}

}  // namespace

void map_binary(OnnxNode& n) {
  static const std::map<std::string, std::string_view, std::less<>> ops = {
      {"Add", "add"},           {"Sub", "sub"},         {"Mul", "mul"},        {"Div", "div"},
      {"Pow", "pow"},           {"And", "logical_and"}, {"Or", "logical_or"},  {"Xor", "ne"},
      {"Equal", "eq"},          {"Less", "lt"},         {"LessOrEqual", "le"}, {"Greater", "gt"},
      {"GreaterOrEqual", "ge"},
  };
  int a = n.in(0), b = n.in(1);
  const std::string& op = n.op_type();
  if (n.opset() < 7) b = legacy_broadcast(n, a, b);
  if (op == "Div" && !is_floating(n.dtype(a))) return n.set_output(0, int_div(n, a, b));
  int r = n.add(ops.at(op), {a, b});
  // Pow's result has the base's type (the exponent may differ from opset 12 on).
  if (op == "Pow") r = n.cast(r, n.dtype(a));
  n.set_output(0, r);
}

void map_variadic(OnnxNode& n) {
  static const std::map<std::string, std::string_view, std::less<>> ops = {
      {"Sum", "add"}, {"Mean", "add"}, {"Max", "maximum"}, {"Min", "minimum"}};
  if (n.num_inputs() == 0) n.error("needs at least one input");
  int acc = n.in(0);
  for (int i = 1; i < n.num_inputs(); ++i) {
    // Broadcasting came with opset 8; before, the inputs have one shape.
    if (n.opset() < 8 && n.type(n.in(i)).shape != n.type(acc).shape)
      n.error("inputs of shapes {} and {} differ (opset {} does not broadcast them)",
              shape_str(n.type(acc).shape), shape_str(n.type(n.in(i)).shape), n.opset());
    acc = n.add(ops.at(n.op_type()), {acc, n.in(i)});
  }
  if (n.op_type() == "Mean" && n.num_inputs() > 1) {
    DType t = n.dtype(acc);
    int count = n.scalar(static_cast<double>(n.num_inputs()), t);
    acc = is_floating(t) ? n.add("div", {acc, count}) : int_div(n, acc, count);
  }
  n.set_output(0, acc);
}

void map_mod(OnnxNode& n) {
  int a = n.in(0), b = n.in(1);
  int r = n.add("fmod", {a, b});  // the sign of a (C's fmod and %)
  if (n.attr_int("fmod", 0) == 0) {
    // Python's % (the sign of b): add b where the remainder is nonzero and its sign differs.
    DType t = n.dtype(r);
    int zero = n.scalar(0, t);
    int fix = n.add("logical_and", {n.add("ne", {r, zero}),
                                    n.add("ne", {n.add("lt", {r, zero}), n.add("lt", {b, zero})})});
    r = n.add("where", {fix, n.add("add", {r, b}), r});
  }
  n.set_output(0, r);
}

namespace {

// 2^y in f64 for a shift y (f64, an integer in [0, bits)), from y's binary digits: the product
// of 2^(2^k) over the set bits k (exact: powers of two), where pow's result need not be exact.
// y of `bits` or more gives `beyond`.
int pow2_f64(OnnxNode& n, int fy, int bits, double beyond) {
  DType f = DType::F64;
  int p = n.scalar(1, f);
  for (int k = 0; (1 << k) < bits; ++k) {
    int digit =
        n.add("fmod", {n.add("floor", {n.add("div", {fy, n.scalar(1 << k, f)})}), n.scalar(2, f)});
    int factor = n.add("where", {n.add("eq", {digit, n.scalar(1, f)}),
                                 n.scalar(std::ldexp(1.0, 1 << k), f), n.scalar(1, f)});
    p = n.add("mul", {p, factor});
  }
  return n.add("where", {n.add("ge", {fy, n.scalar(bits, f)}), n.scalar(beyond, f), p});
}

// BitShift of uint16, uint32, uint64 (bits = 16, 32, 64). LEFT is x * 2^y in x's type, whose
// unsigned product wraps modulo 2^bits (the bits shifted out are lost); a shift of `bits` or
// more multiplies by 0. RIGHT is floor(x / 2^y) in f64, exact for x below 2^53; a u64 is split
// into its high part h = x - x mod 2^32 (at most 32 significant bits, exact in f64) and its low
// 32 bits l: floor((h + l) / 2^y) = floor(h / 2^y) + floor(l / 2^y), since h is a multiple of
// 2^32 (for y <= 32 h / 2^y is an integer; for y > 32 the second term is 0 and l cannot carry).
int wide_bitshift(OnnxNode& n, int x, int y, bool left) {
  DType t = n.dtype(x), f = DType::F64;
  int bits = dtype_size(t) * 8;
  int fy = n.cast(y, f);
  if (left) return n.add("mul", {x, n.cast(pow2_f64(n, fy, bits, 0), t)});
  int p = pow2_f64(n, fy, bits, std::ldexp(1.0, bits));
  auto shr = [&](int v) { return n.cast(n.add("floor", {n.add("div", {n.cast(v, f), p})}), t); };
  if (t != DType::U64) return shr(x);
  int lo = n.add("fmod", {x, n.scalar(std::ldexp(1.0, 32), t)});
  return n.add("add", {shr(n.add("sub", {x, lo})), shr(lo)});
}

}  // namespace

// BitShift of uint8 in f32, where every step is exact: LEFT is x * 2^y mod 256 (the bits shifted
// out of the byte are lost), RIGHT is floor(x / 2^y). A shift of 8 or more gives 0 either way,
// so 2^y is picked from 2^0 .. 2^8 by comparisons rather than computed by pow (whose f32 result
// need not be exact). The wider unsigned types: wide_bitshift above.
void map_bitshift(OnnxNode& n) {
  int x = n.in(0), y = n.in(1);
  if (n.dtype(x) != n.dtype(y))
    n.error("X is {} and Y is {}: they must have one type", dtype_name(n.dtype(x)),
            dtype_name(n.dtype(y)));
  DType t = n.dtype(x);
  if (t != DType::U8 && !is_wide_unsigned(t))
    n.error("dtype {} is not an unsigned integer type (uint8, uint16, uint32, uint64)",
            dtype_name(t));
  std::string dir = n.attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    n.error("direction '{}' is not LEFT or RIGHT", printable(dir));
  if (t != DType::U8) return n.set_output(0, wide_bitshift(n, x, y, dir == "LEFT"));
  DType f = DType::F32;
  int fx = n.cast(x, f), fy = n.cast(y, f);
  int pow2 = n.scalar(256, f);
  for (int k = 7; k >= 0; --k)
    pow2 = n.add("where", {n.add("eq", {fy, n.scalar(k, f)}), n.scalar(1 << k, f), pow2});
  int r;
  if (dir == "LEFT") {
    int v = n.add("mul", {fx, pow2});  // < 2^16
    int wraps = n.add("floor", {n.add("div", {v, n.scalar(256, f)})});
    r = n.add("sub", {v, n.add("mul", {wraps, n.scalar(256, f)})});
  } else {
    r = n.add("floor", {n.add("div", {fx, pow2})});
  }
  n.set_output(0, n.cast(r, DType::U8));
}

void map_where(OnnxNode& n) {
  n.set_output(0, n.add("where", {n.in(0), n.in(1), n.in(2)}));
}

void map_cast(OnnxNode& n) {
  int x = n.in(0);
  DType to;
  if (n.op_type() == "CastLike") {
    to = n.dtype(n.in(1));
  } else {
    if (!n.has_attr("to")) n.error("attribute 'to' is required");
    int32_t et = 0;
    if (n.opset() < 6 && n.find_attr("to")->type() == onnx::AttributeProto::STRING) {
      // Cast-1 names the type: "FLOAT", "INT64", ...
      std::string name = n.attr_string("to", "");
      onnx::TensorProto_DataType v;
      if (!onnx::TensorProto_DataType_Parse(name, &v) || v == onnx::TensorProto::UNDEFINED)
        n.error("attribute 'to' names no ONNX type: '{}'", printable(name));
      et = static_cast<int32_t>(v);
    } else {
      et = static_cast<int32_t>(n.attr_int("to", 0));
    }
    std::optional<DType> t = dtype_from_onnx(et);
    if (!t) unsupported("cast to {}", onnx_dtype_name(et));
    to = *t;
  }
  n.set_output(0, n.cast(x, to));
}

void map_clip(OnnxNode& n) {
  int x = n.in(0);
  int y = x;
  if (n.opset() < 11) {
    Attrs a{{"min", n.attr_float("min", -std::numeric_limits<double>::infinity())},
            {"max", n.attr_float("max", std::numeric_limits<double>::infinity())}};
    y = n.add("clamp", {x}, a);
  } else {
    // Bounds are optional inputs; constant ones become clamp's attributes.
    Attrs a;
    for (int i : {1, 2}) {
      if (!n.has_input(i)) continue;
      const char* name = i == 1 ? "min" : "max";
      if (n.constant(n.in(i))) {
        a.set(name, n.const_scalar(i, name));
      } else {
        y = n.add(i == 1 ? "maximum" : "minimum", {y, n.cast(n.in(i), n.dtype(x))});
      }
    }
    if (a.has("min") && a.has("max") && a.get_float("clamp", "min") > a.get_float("clamp", "max"))
      a.set("min", a.get_float("clamp", "max"));  // ONNX: every element becomes max
    if (!a.items().empty()) y = n.add("clamp", {y}, a);
  }
  n.set_output(0, y);
}

void map_isinf(OnnxNode& n) {
  int x = n.in(0);
  DType t = n.dtype(x);
  double inf = std::numeric_limits<double>::infinity();
  bool pos = n.attr_int("detect_positive", 1) != 0, neg = n.attr_int("detect_negative", 1) != 0;
  int r = -1;
  if (pos) r = n.add("eq", {x, n.scalar(inf, t)});
  if (neg) {
    int m = n.add("eq", {x, n.scalar(-inf, t)});
    r = r < 0 ? m : n.add("logical_or", {r, m});
  }
  if (r < 0) r = n.add("ne", {x, x}), r = n.add("logical_and", {r, n.add("eq", {x, x})});
  n.set_output(0, r);
}

}  // namespace coil::onnxfe

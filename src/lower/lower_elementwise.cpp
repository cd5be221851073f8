// Lowerings of sources and elementwise ops: loaders that compute one element.
#include <cmath>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "lower/lower_ops.h"
#include "lower/op_lowering.h"
#include "support/check.h"

namespace coil {

/// Maps an index of the broadcast output shape to an index of `in` (numpy rules): leading
/// dims dropped, size-1 dims read at 0.
static std::vector<sym::Expr> broadcast_index(const Shape& in, const Shape& out,
                                              const std::vector<sym::Expr>& idx) {
  std::vector<sym::Expr> r;
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    bool broadcast = in[i] == sym::Expr(1) && out[i + lead] != sym::Expr(1);
    r.push_back(broadcast ? sym::Expr(0) : idx[i + lead]);
  }
  return r;
}

TensorBox lower_full(LowerContext&, const Node& node, const std::vector<TensorBox>&) {
  double value = node.attrs.get_float("full", "value");
  DType dtype = node.type.dtype;
  return TensorBox{dtype, node.type.shape,
                   [value, dtype](LoopBody& b, const std::vector<sym::Expr>&) {
                     return b.constant(value, dtype);
                   }};
}

TensorBox lower_iota(LowerContext&, const Node& node, const std::vector<TensorBox>&) {
  int64_t start = node.attrs.get_int_or("iota", "start", 0);
  int64_t step = node.attrs.get_int_or("iota", "step", 1);
  DType dtype = node.type.dtype;
  return TensorBox{dtype, node.type.shape, [=](LoopBody& b, const std::vector<sym::Expr>& idx) {
                     return b.to_dtype(
                         b.index_expr(sym::Expr(start) + sym::Expr(step) * idx[0], DType::I64),
                         dtype);
                   }};
}

/// Whether body value `v` is the constant 2 (a float constant, or an integer one converted;
/// rounded to bf16/f16 for an operand of that dtype, which 2 survives exactly).
static bool is_constant_two(const LoopBody& b, int v) {
  const BodyOp& op = b.op(v);
  if (op.op == LoopOp::to_dtype || op.op == LoopOp::round_to_bf16 || op.op == LoopOp::round_to_f16)
    return is_constant_two(b, op.args[0]);
  if (op.op != LoopOp::constant) return false;
  return is_floating(op.dtype) ? op.fvalue == 2.0 : op.ivalue == 2;
}

/// Builds the element computation of one elementwise node from its operands' values, which
/// are already converted to the promoted compute dtype `t`.
static int emit_elementwise(LoopBody& b, const Node& node, DType t, DType out,
                            const std::vector<int>& v, int site) {
  std::string_view name = node.op_name();
  DType ct = compute_dtype(out);
  auto c = [&](double x) { return b.constant(x, ct); };
  if (name == "gelu") {
    int x = v[0];
    int half_x = b.compute(LoopOp::mul, ct, {x, c(0.5)});
    int inner;
    if (node.attrs.get_string_or("gelu", "approximate", "none") == "tanh") {
      // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
      int x3 = b.compute(LoopOp::mul, ct, {b.compute(LoopOp::mul, ct, {x, x}), x});
      int s = b.compute(LoopOp::add, ct, {x, b.compute(LoopOp::mul, ct, {x3, c(0.044715)})});
      inner = b.compute(LoopOp::tanh, ct, {b.compute(LoopOp::mul, ct, {s, c(0.7978845608028654)})});
    } else {
      // 0.5 * x * (1 + erf(x / sqrt(2)))
      inner = b.compute(LoopOp::erf, ct, {b.compute(LoopOp::mul, ct, {x, c(0.7071067811865476)})});
    }
    return b.compute(LoopOp::mul, ct, {half_x, b.compute(LoopOp::add, ct, {inner, c(1.0)})});
  }
  if (name == "pow" && is_floating(ct) && is_constant_two(b, v[1])) {
    // x ** 2 (RMSNorm's mean of squares, a variance): one multiply. x * x is x^2 correctly
    // rounded, which is what the reference's double pow rounds to (a float's square is exact
    // in double); the vector pow took 26 us for RMSNorm's 768 squares of a decode step.
    return b.compute(LoopOp::mul, ct, {v[0], v[0]});
  }
  if (name == "silu")
    return b.compute(LoopOp::mul, ct, {v[0], b.compute(LoopOp::sigmoid, ct, {v[0]})});
  if (name == "cast") return t == out ? v[0] : b.to_dtype(v[0], out);
  if (name == "clamp") {
    // The bound first: maximum/minimum return their second operand between equal values, so
    // clamp(-0.0, min=0.0) keeps -0.0, as torch's clamp does.
    int x = v[0];
    if (node.attrs.has("min"))
      x = b.compute(LoopOp::maximum, ct, {c(node.attrs.get_float("clamp", "min")), x});
    if (node.attrs.has("max"))
      x = b.compute(LoopOp::minimum, ct, {c(node.attrs.get_float("clamp", "max")), x});
    return x;
  }
  LoopOp op = find_lowering(node.op_name())->loop_op;
  (void)t;
  switch (v.size()) {
    case 1:
      return b.compute(op, ct, {v[0]});
    case 2:
      return b.compute(op, ct, {v[0], v[1]}, site);
    default:
      return b.compute(op, ct, {v[0], v[1], v[2]});
  }
}

/// Integer fmod by zero and integer pow with a negative exponent raise in torch and in the
/// reference: such a node gets a run check (IrProgram::run_checks), -1 otherwise.
static int run_check_site(LowerContext& ctx, const Node& node, DType compute_t) {
  std::string_view name = node.op_name();
  if (is_floating(compute_t) || (name != "fmod" && name != "pow")) return -1;
  ctx.program.run_checks.push_back(
      {name == "fmod" ? RunCheck::Kind::nonzero_divisor : RunCheck::Kind::nonnegative_exponent,
       fmt::format("{} (node {})", name, node.name)});
  return static_cast<int>(ctx.program.run_checks.size()) - 1;
}

TensorBox lower_elementwise(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  std::vector<TensorType> types;
  for (const TensorBox& t : in) types.push_back(TensorType{t.dtype, t.sizes});
  std::vector<const TensorType*> type_ptrs;
  for (const auto& t : types) type_ptrs.push_back(&t);
  const bool is_where = node.op_name() == "where";
  std::vector<const TensorType*> values(type_ptrs.begin() + (is_where ? 1 : 0), type_ptrs.end());
  DType promoted = elementwise_promoted_dtype(values);
  DType out = node.type.dtype;
  // Ops whose result is float compute in float: convert integer operands first.
  DType operand_t = promoted;
  if (node.op->dtype_rule == DTypeRule::Float) operand_t = out;
  if (node.op_name() == "cast") operand_t = in[0].dtype;
  Shape shape = node.type.shape;
  const Node* np = &node;
  const int site = run_check_site(ctx, node, compute_dtype(out));
  return TensorBox{
      out, shape,
      [in, np, operand_t, out, shape, is_where, site](LoopBody& b,
                                                      const std::vector<sym::Expr>& idx) {
        std::vector<int> v;
        for (size_t i = 0; i < in.size(); ++i) {
          int x = in[i].load(b, broadcast_index(in[i].sizes, shape, idx));
          // A promoted operand is converted (a 0-dim f32 compared with a bf16 tensor is
          // rounded to bf16 first, as torch does); one already of operand_t is not.
          bool is_cond = is_where && i == 0;
          v.push_back(is_cond || in[i].dtype == operand_t ? x : b.to_dtype(x, operand_t));
        }
        return emit_elementwise(b, *np, operand_t, out, v, site);
      }};
}

}  // namespace coil

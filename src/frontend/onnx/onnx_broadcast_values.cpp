// Broadcast values: a ConstantOfShape whose shape holds symbolic sizes (torch's `zeros_like` of
// an attention mask, [4*batch, 1, seq]) is a constant of 1s of that rank, recorded with the
// shape it stands for (SplitViews::broadcast, onnx_context.h), since coil's `full` and `expand`
// take integer sizes. An elementwise op computes the same on it as on the expanded tensor, up
// to the expansion of its result; this check, run after every node that reads one, makes sure
// that the result either has the ONNX shape or is recorded as a broadcast value in turn, and
// refuses every other use.
#include <set>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {

void check_broadcast_use(OnnxNode& n) {
  static const std::set<std::string, std::less<>> elementwise = {"Add",
                                                                 "Sub",
                                                                 "Mul",
                                                                 "Div",
                                                                 "Where",
                                                                 "Cast",
                                                                 "Equal",
                                                                 "Less",
                                                                 "Greater",
                                                                 "LessOrEqual",
                                                                 "GreaterOrEqual",
                                                                 "And",
                                                                 "Or",
                                                                 "Xor",
                                                                 "Not",
                                                                 "Neg",
                                                                 "Abs",
                                                                 "Exp",
                                                                 "Log",
                                                                 "Sqrt",
                                                                 "Relu",
                                                                 "Sigmoid",
                                                                 "Tanh",
                                                                 "Identity"};
  const Shape* first = nullptr;
  int at = -1;
  while (!first && ++at < n.num_inputs())
    if (n.has_input(at)) first = n.broadcast_shape(n.in(at));
  if (!first) return;
  if (!elementwise.count(n.op_type()) || n.opset() < 7)
    unsupported(
        "input {} is a ConstantOfShape of the symbolic shape {}, which only elementwise "
        "ops may read (coil cannot expand to symbolic sizes)",
        at, shape_str(*first));
  // numpy broadcasting of the inputs' ONNX shapes.
  Shape want;
  for (int i = 0; i < n.num_inputs(); ++i) {
    if (!n.has_input(i)) continue;
    const Shape* b = n.broadcast_shape(n.in(i));
    const Shape& s = b ? *b : n.type(n.in(i)).shape;
    if (s.size() > want.size()) want.insert(want.begin(), s.size() - want.size(), sym::Expr(1));
    for (size_t k = 0; k < s.size(); ++k) {
      sym::Expr& w = want[want.size() - s.size() + k];
      if (w == sym::Expr(1))
        w = s[k];
      else if (s[k] != sym::Expr(1) && s[k] != w)
        unsupported("inputs of shapes that do not broadcast ({} and {})", shape_str(want),
                    shape_str(s));
    }
  }
  int y = n.outputs()[0];
  const Shape& got = n.type(y).shape;
  if (got == want) return;
  // The result broadcasts to `want` (each dim equal or 1): a broadcast value itself.
  if (got.size() == want.size()) {
    bool ok = true;
    for (size_t k = 0; k < got.size(); ++k) ok &= got[k] == want[k] || got[k] == sym::Expr(1);
    if (ok) return n.set_broadcast_shape(y, want);
  }
  unsupported("a ConstantOfShape of the symbolic shape {} gives {} where {} is due",
              shape_str(*first), shape_str(got), shape_str(want));
}

}  // namespace coil::onnxfe

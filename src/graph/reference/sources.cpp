// Reference kernels of the source ops: full, iota, constant (input values are bound by the
// interpreter, never computed).
#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {

Tensor ref_full(const Node& node, const std::vector<Tensor>&) {
  // (`sizes` naming symbols: the interpreter passes them bound; the type keeps the symbols)
  const Shape sizes = node.attrs.has("sizes") ? Shape(target_sizes(node)) : node.type.shape;
  auto shape = static_sizes(sizes);
  COIL_ASSERT(shape.has_value(), "full: shape {} is not constant", shape_str(sizes));
  Tensor out = Tensor::empty(node.type.dtype, *shape);
  ref::Number value = ref::number_attr(node, "value");
  for (int64_t i = 0; i < out.numel(); ++i) {
    // Integer values are stored exactly (an i64 fill beyond 2^53 keeps every bit).
    if (value.is_int)
      ref::set_int(out, i, value.i);
    else
      ref::set_double(out, i, value.d);
  }
  return out;
}

Tensor ref_iota(const Node& node, const std::vector<Tensor>&) {
  int64_t size = node.attrs.get_int("iota", "size");
  Tensor out = Tensor::empty(node.type.dtype, {size});
  ref::Number start =
      node.attrs.has("start") ? ref::number_attr(node, "start") : ref::Number{true, 0, 0.0};
  ref::Number step =
      node.attrs.has("step") ? ref::number_attr(node, "step") : ref::Number{true, 1, 1.0};
  for (int64_t i = 0; i < size; ++i) {
    // torch.arange computes start + i * step (not a running sum), in the accumulate type.
    if (start.is_int && step.is_int)
      ref::set_int(out, i, start.i + i * step.i);
    else
      ref::set_double(out, i, start.d + static_cast<double>(i) * step.d);
  }
  return out;
}

Tensor ref_constant(const Node& node, const std::vector<Tensor>&) {
  COIL_ASSERT(node.data != nullptr, "constant {} has no data", node.name);
  return *node.data;
}

Tensor ref_input(const Node& node, const std::vector<Tensor>&) {
  COIL_UNREACHABLE("input {} is bound by the interpreter, not computed", node.name);
}

}  // namespace coil

#include "graph/interpreter.h"

#include <map>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

// Size symbols bound so far, and the input that bound each (for error messages).
struct Bindings {
  std::map<std::string, int64_t> sizes;
  std::map<std::string, std::string> bound_by;
};

void bind_input(const Node& node, const Tensor& value, Bindings& b) {
  COIL_USER_CHECK(value.defined(), "input {}: the tensor is undefined", node.name);
  COIL_USER_CHECK(value.dtype() == node.type.dtype, "input {}: expected dtype {}, got {}",
                  node.name, dtype_name(node.type.dtype), dtype_name(value.dtype()));
  const Shape& s = node.type.shape;
  const std::vector<int64_t>& actual = value.shape();
  bool matches = value.dim() == node.type.rank();
  for (size_t d = 0; matches && d < s.size(); ++d) {
    if (auto c = s[d].as_const()) {
      matches = *c == actual[d];
      continue;
    }
    const std::string& sym = s[d].symbol_name();
    auto it = b.sizes.find(sym);
    if (it == b.sizes.end()) {
      b.sizes[sym] = actual[d];
      b.bound_by[sym] = node.name;
    } else if (it->second != actual[d]) {
      user_error("input {}: expected shape {} with {} = {} (bound by input {}), got {}", node.name,
                 shape_str(s), sym, it->second, b.bound_by[sym], shape_str(actual));
    }
  }
  COIL_USER_CHECK(matches, "input {}: expected shape {}, got {}", node.name, shape_str(s),
                  shape_str(actual));
}

// The reference kernels compute shapes from the actual tensors; they must agree with the
// graph's inferred type under the bindings, or the kernel (or the shape rule) has a bug.
void check_result(const Node& node, const Tensor& r, const Bindings& b) {
  std::vector<int64_t> expected;
  for (const sym::Expr& e : node.type.shape) expected.push_back(sym::evaluate(e, b.sizes));
  COIL_ASSERT(r.dtype() == node.type.dtype && r.shape() == expected,
              "reference of {} ({}) gave {}{} for type {} = {}", node.name, node.op_name(),
              dtype_name(r.dtype()), shape_str(r.shape()), type_str(node.type),
              shape_str(expected));
}

}  // namespace

std::vector<Tensor> interpret(const Graph& g, const std::vector<Tensor>& inputs) {
  const std::vector<int>& input_ids = g.inputs();
  COIL_USER_CHECK(inputs.size() == input_ids.size(), "the graph has {} inputs, got {} tensors",
                  input_ids.size(), inputs.size());
  std::vector<Tensor> values(static_cast<size_t>(g.num_nodes()));
  Bindings bindings;
  for (size_t k = 0; k < inputs.size(); ++k) {
    bind_input(g.node(input_ids[k]), inputs[k], bindings);
    values[static_cast<size_t>(input_ids[k])] = inputs[k];
  }

  // Nodes no output depends on are not evaluated (compiled code drops them too, so an error in
  // a dead node never surfaces).
  std::vector<bool> live = live_nodes(g);
  std::vector<int> uses(live.size(), 0);  // readers among live nodes, and graph outputs
  for (const auto& node : g.nodes())
    if (live[static_cast<size_t>(node->id)])
      for (int in : node->inputs) ++uses[static_cast<size_t>(in)];
  for (const GraphOutput& o : g.outputs()) ++uses[static_cast<size_t>(o.node)];
  for (const auto& node : g.nodes()) {
    auto id = static_cast<size_t>(node->id);
    if (!live[id] || node->op_name() == "input") continue;
    std::vector<Tensor> args;
    for (int in : node->inputs) args.push_back(values[static_cast<size_t>(in)]);
    // Target sizes as text (`sizes` of full, reshape, expand) name size symbols: the
    // reference kernel gets them bound, as its input shapes are.
    const Node* run = node.get();
    Node bound;
    const std::string_view op = node->op_name();
    if ((op == "full" || op == "reshape" || op == "expand") && node->attrs.has("sizes") &&
        !bindings.sizes.empty()) {
      std::map<sym::Expr, sym::Expr> bind;
      for (const auto& [name, v] : bindings.sizes) bind[sym::make_symbol(name)] = sym::Expr(v);
      bound = *node;
      bound.attrs.set("sizes",
                      substitute_sizes(node->op_name(),
                                       node->attrs.get_string(node->op_name(), "sizes"), bind));
      run = &bound;
    }
    Tensor r;
    try {
      r = node->op->reference(*run, args);
    } catch (const Error& e) {
      throw Error(error_context(*node) + e.what());  // which node, as compile errors say
    }
    check_result(*node, r, bindings);
    values[id] = std::move(r);
    // Free each input after its last reader (graph outputs count as readers, so they stay).
    for (int in : node->inputs)
      if (--uses[static_cast<size_t>(in)] == 0) values[static_cast<size_t>(in)] = Tensor();
  }

  std::vector<Tensor> outputs;
  for (const GraphOutput& o : g.outputs())
    outputs.push_back(values[static_cast<size_t>(o.node)].clone());
  return outputs;
}

}  // namespace coil

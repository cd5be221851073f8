#include "coil/graph.h"

#include <algorithm>
#include <set>

#include "graph/attr_check.h"
#include "graph/op_registry.h"
#include "support/check.h"

namespace coil {

std::string shape_str(const Shape& s) {
  std::vector<std::string> parts;
  for (const auto& e : s) parts.push_back(sym::to_string(e));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string type_str(const TensorType& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), shape_str(t.shape));
}

Shape make_shape(const std::vector<int64_t>& sizes) {
  Shape s;
  for (int64_t v : sizes) s.push_back(sym::make_const(v));
  return s;
}

std::optional<std::vector<int64_t>> static_sizes(const Shape& s) {
  std::vector<int64_t> out;
  for (const auto& e : s) {
    auto c = e.as_const();
    if (!c) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

std::string_view Node::op_name() const {
  return op->name;
}

bool is_identifier(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name[0])) return false;
  for (char c : name)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

std::vector<bool> live_nodes(const Graph& g) {
  std::vector<bool> live(static_cast<size_t>(g.num_nodes()), false);
  for (const GraphOutput& o : g.outputs()) live[static_cast<size_t>(o.node)] = true;
  for (int id = g.num_nodes(); id-- > 0;) {
    if (!live[static_cast<size_t>(id)]) continue;
    for (int in : g.node(id).inputs) live[static_cast<size_t>(in)] = true;
  }
  return live;
}

std::string error_context(const Node& n) {
  if (!n.location.empty()) return n.location + ": ";
  return fmt::format("node {}: ", n.name);
}

void Graph::set_source_name(int node, std::string source_name) {
  COIL_ASSERT(node >= 0 && node < num_nodes(), "set_source_name: no node {}", node);
  nodes_[static_cast<size_t>(node)]->source_name = std::move(source_name);
}

void Graph::set_output_source_name(size_t index, std::string source_name) {
  COIL_ASSERT(index < outputs_.size(), "set_output_source_name: no output {}", index);
  outputs_[index].source_name = std::move(source_name);
}

void Graph::set_location(int node, std::string location) {
  COIL_ASSERT(node >= 0 && node < num_nodes(), "set_location: no node {}", node);
  nodes_[static_cast<size_t>(node)]->location = std::move(location);
}

void Graph::set_composite(int node, std::string composite, std::string composite_node) {
  COIL_ASSERT(node >= 0 && node < num_nodes(), "set_composite: no node {}", node);
  Node& n = *nodes_[static_cast<size_t>(node)];
  n.composite = std::move(composite);
  n.composite_node = std::move(composite_node);
}

std::string Graph::fresh_name() {
  std::string n;
  do n = fmt::format("t{}", next_temp_++);
  while (by_name_.count(n));
  return n;
}

std::string Graph::next_fresh_name() const {
  std::string n;
  int k = next_temp_;
  do n = fmt::format("t{}", k++);
  while (by_name_.count(n));
  return n;
}

/// Shapes whose known sizes multiply to 2^62 or more are rejected so that index arithmetic
/// never overflows int64 (zeros and symbols count as 1). The same bound as the text format's
/// (text_format.cpp: kMaxInputElements), so that every graph coil accepts prints and parses
/// back: [2^31, 2^31, N] passed here and failed there (ONNX libFuzzer run on the GPU host).
static void check_size_limits(const Node& n) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t numel = 1;
  for (const auto& d : n.type.shape) {
    auto c = d.as_const();
    if (!c) continue;
    COIL_USER_CHECK(*c >= 0 && *c < kLimit, "{} ({}): size {} is out of range", n.name, n.op_name(),
                    *c);
    COIL_USER_CHECK(
        !__builtin_mul_overflow(numel, std::max<int64_t>(*c, 1), &numel) && numel < kLimit,
        "{} ({}): shape {} has 2^62 or more elements", n.name, n.op_name(),
        shape_str(n.type.shape));
  }
}

int Graph::push(std::unique_ptr<Node> n) {
  if (n->name.empty()) n->name = fresh_name();
  check_size_limits(*n);
  COIL_USER_CHECK(is_identifier(n->name),
                  "value name '{}' is not an identifier (letters, digits, '_')", n->name);
  COIL_USER_CHECK(!by_name_.count(n->name), "value name '{}' is defined twice", n->name);
  n->id = static_cast<int>(nodes_.size());
  by_name_[n->name] = n->id;
  nodes_.push_back(std::move(n));
  return nodes_.back()->id;
}

int Graph::add_input(const std::string& name, DType dtype, Shape shape) {
  for (const auto& d : shape) {
    if (auto c = d.as_const()) {
      COIL_USER_CHECK(*c >= 0, "input {}: size {} is negative", name, *c);
    } else {
      COIL_USER_CHECK(d.is_symbol(), "input {}: size '{}' must be an integer or a symbol name",
                      name, sym::to_string(d));
      // x0.., r0.. name loop variables in the loop IR: a size must not alias one.
      const std::string& s = d.symbol_name();
      bool reserved = s.size() > 1 && (s[0] == 'x' || s[0] == 'r') &&
                      s.find_first_not_of("0123456789", 1) == std::string::npos;
      COIL_USER_CHECK(!reserved, "input {}: size symbol name '{}' is reserved for loop variables",
                      name, s);
    }
  }
  auto n = std::make_unique<Node>();
  n->op = &get_op("input");
  n->name = name;
  n->type = TensorType{dtype, std::move(shape)};
  int id = push(std::move(n));
  inputs_.push_back(id);
  return id;
}

int Graph::add_constant(Tensor value, const std::string& name) {
  auto n = std::make_unique<Node>();
  n->op = &get_op("constant");
  n->name = name;
  n->type = TensorType{value.dtype(), make_shape(value.shape())};
  n->data = std::make_shared<const Tensor>(value.is_contiguous() ? value : value.clone());
  return push(std::move(n));
}

int Graph::add_node(std::string_view op_name, std::vector<int> inputs, Attrs attrs,
                    const std::string& name) {
  const OpDef& op = get_op(op_name);
  COIL_USER_CHECK(op.kind != OpKind::Source || op.name == "full" || op.name == "iota",
                  "{}: use Graph::add_input/add_constant for source values", op.name);
  int n_in = static_cast<int>(inputs.size());
  COIL_USER_CHECK(n_in >= op.min_inputs && (op.max_inputs < 0 || n_in <= op.max_inputs),
                  "{}: expected {} inputs, got {}", op.name,
                  op.max_inputs < 0 ? fmt::format("at least {}", op.min_inputs)
                  : op.min_inputs == op.max_inputs
                      ? std::to_string(op.min_inputs)
                      : fmt::format("{} to {}", op.min_inputs, op.max_inputs),
                  n_in);
  auto n = std::make_unique<Node>();
  n->op = &op;
  n->name = name;
  // An unnamed node gets its name when it is added, after its checks: an attribute error names
  // it by the name it would get.
  check_attrs(op, attrs, name.empty() ? next_fresh_name() : name);
  n->attrs = std::move(attrs);
  n->attrs.set_owner(op.name);
  std::vector<const TensorType*> types;
  for (int in : inputs) {
    COIL_USER_CHECK(in >= 0 && in < num_nodes(), "{}: input id {} does not exist", op.name, in);
    types.push_back(&nodes_[static_cast<size_t>(in)]->type);
  }
  n->inputs = std::move(inputs);
  n->type = op.infer(*n, types);
  // squeeze() is the one op whose meaning would depend on bound sizes (is a symbolic dim 1?):
  // the dims its type rule dropped are written out, so the reference, binding and lowering all
  // drop exactly those (a symbolic dim bound to 1 stays, as the type says).
  if (op.name == "squeeze" && !n->attrs.has("dims")) {
    std::vector<int64_t> dims;
    for (size_t i = 0; i < types[0]->shape.size(); ++i)
      if (types[0]->shape[i] == sym::Expr(1)) dims.push_back(static_cast<int64_t>(i));
    n->attrs.set("dims", dims);
  }
  return push(std::move(n));
}

void Graph::add_output(int node_id, const std::string& name) {
  COIL_USER_CHECK(node_id >= 0 && node_id < num_nodes(), "output: node id {} does not exist",
                  node_id);
  std::string n = name.empty() ? nodes_[static_cast<size_t>(node_id)]->name : name;
  COIL_USER_CHECK(is_identifier(n), "output name '{}' is not an identifier", n);
  for (const auto& o : outputs_) COIL_USER_CHECK(o.name != n, "output name '{}' is used twice", n);
  outputs_.push_back(GraphOutput{n, node_id});
}

const Node& Graph::node(int id) const {
  COIL_ASSERT(id >= 0 && id < num_nodes(), "node id {} out of range", id);
  return *nodes_[static_cast<size_t>(id)];
}

int Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(nodes_.size(), 0);
  for (const auto& n : nodes_)
    for (int in : n->inputs) ++uses[static_cast<size_t>(in)];
  for (const auto& o : outputs_) ++uses[static_cast<size_t>(o.node)];
  return uses;
}

std::vector<sym::Expr> Graph::size_symbols() const {
  std::set<std::string> names;
  for (int id : inputs_)
    for (const auto& d : node(id).type.shape)
      for (const auto& s : sym::free_symbols(d)) names.insert(s.symbol_name());
  std::vector<sym::Expr> out;
  for (const auto& n : names) out.push_back(sym::make_symbol(n));
  return out;
}

}  // namespace coil

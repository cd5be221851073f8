#include "graph/verify.h"

#include "sym/size_hints.h"

#include <set>

#include <fmt/format.h>

#include "graph/op_registry.h"

namespace coil {

namespace {

std::string node_label(const Node& n) {
  return fmt::format("node {} ({})", n.name, n.op ? n.op->name : "no op");
}

}  // namespace

std::vector<std::string> verify_graph(const Graph& g, GraphStage stage) {
  std::vector<std::string> errors;
  auto fail = [&](std::string message) { errors.push_back(std::move(message)); };
  std::set<std::string> names;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    const std::string label = node_label(n);
    if (n.id != id) fail(fmt::format("{}: id {} at position {}", label, n.id, id));
    if (!n.op) {
      fail(fmt::format("{}: no op", label));
      continue;
    }
    if (!is_identifier(n.name)) fail(fmt::format("{}: name is not an identifier", label));
    if (!names.insert(n.name).second) fail(fmt::format("{}: name is used twice", label));
    bool inputs_ok = true;
    for (int in : n.inputs) {
      if (in < 0 || in >= id) {
        fail(fmt::format("{}: input {} is not an earlier node (use before definition)", label, in));
        inputs_ok = false;
      }
    }
    if (n.op->name == "constant") {
      if (!n.data)
        fail(fmt::format("{}: constant without data", label));
      else if (n.data->dtype() != n.type.dtype || make_shape(n.data->shape()) != n.type.shape)
        fail(fmt::format("{}: constant data {}{} does not match its type {}", label,
                         dtype_name(n.data->dtype()), shape_str(make_shape(n.data->shape())),
                         type_str(n.type)));
    }
    if (inputs_ok && n.op->kind != OpKind::Source) {
      std::vector<const TensorType*> types;
      for (int in : n.inputs) types.push_back(&g.node(in).type);
      try {
        TensorType inferred = n.op->infer(n, types);
        if (inferred != n.type)
          fail(fmt::format("{}: type {} but its type rule infers {} from its inputs", label,
                           type_str(n.type), type_str(inferred)));
      } catch (const std::exception& e) {
        fail(fmt::format("{}: its type rule rejects its inputs now: {}", label, e.what()));
      }
    }
    if (stage == GraphStage::decomposed) {
      if (n.op->kind == OpKind::Composite)
        fail(fmt::format("{}: composite op left after decomposition", label));
      for (const sym::Expr& s : n.type.shape) {
        auto v = sym::hint(s);  // a size-generic compile's symbols have hints
        if (!v || *v < 0) {
          fail(fmt::format("{}: size {} of {} is not a bound size >= 0", label, sym::to_string(s),
                           type_str(n.type)));
          break;
        }
      }
    }
  }
  std::set<int> input_ids;
  for (int id : g.inputs()) {
    input_ids.insert(id);
    if (id < 0 || id >= g.num_nodes())
      fail(fmt::format("graph input {} is not a node", id));
    else if (g.node(id).op == nullptr || g.node(id).op->name != "input")
      fail(fmt::format("graph input {} is not an input node", node_label(g.node(id))));
  }
  std::set<std::string> output_names;
  bool outputs_ok = true;
  for (const GraphOutput& o : g.outputs()) {
    if (o.node < 0 || o.node >= g.num_nodes()) {
      fail(fmt::format("output {} names node {}, which does not exist", o.name, o.node));
      outputs_ok = false;
    }
    if (!is_identifier(o.name)) fail(fmt::format("output name '{}' is not an identifier", o.name));
    if (!output_names.insert(o.name).second)
      fail(fmt::format("output name '{}' is used twice", o.name));
  }
  if (stage == GraphStage::decomposed && outputs_ok && errors.empty()) {
    std::vector<bool> live = live_nodes(g);
    for (int id = 0; id < g.num_nodes(); ++id)
      if (!live[static_cast<size_t>(id)] && !input_ids.count(id))
        fail(fmt::format("{}: dead (no output depends on it) after decomposition",
                         node_label(g.node(id))));
  }
  return errors;
}

}  // namespace coil

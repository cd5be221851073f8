#include "fuzz/graph_edit.h"

#include "support/check.h"

namespace coil::fuzz {

Graph apply_edit(const Graph& g, const GraphEdit& edit) {
  Graph out;
  std::vector<int> map(static_cast<size_t>(g.num_nodes()), -1);
  auto mapped = [&](int old) {
    int id = map[static_cast<size_t>(old)];
    COIL_USER_CHECK(id >= 0, "edit: value '{}' was dropped but is still read", g.node(old).name);
    return id;
  };
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    auto id = static_cast<size_t>(n.id);
    if (edit.drop.count(n.id)) continue;
    if (auto r = edit.replace.find(n.id); r != edit.replace.end()) {
      map[id] = mapped(r->second);
    } else if (edit.fresh_input.count(n.id)) {
      map[id] = out.add_input(n.name, n.type.dtype, n.type.shape);
    } else if (n.op_name() == "input") {
      auto t = edit.input_type.find(n.id);
      const TensorType& type = t == edit.input_type.end() ? n.type : t->second;
      map[id] = out.add_input(n.name, type.dtype, type.shape);
    } else if (n.op_name() == "constant") {
      map[id] = out.add_constant(*n.data, n.name);
    } else {
      auto a_it = edit.args.find(n.id);
      std::vector<int> in;
      for (int i : a_it == edit.args.end() ? n.inputs : a_it->second) in.push_back(mapped(i));
      auto a = edit.attrs.find(n.id);
      map[id] = out.add_node(n.op_name(), in, a == edit.attrs.end() ? n.attrs : a->second, n.name);
    }
  }
  for (const GraphOutput& o : edit.outputs ? *edit.outputs : g.outputs())
    out.add_output(mapped(o.node), o.name);
  return out;
}

}  // namespace coil::fuzz

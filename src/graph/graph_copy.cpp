#include "graph/graph_copy.h"

#include "support/check.h"

namespace coil {

int copy_source_node(Graph& out, const Node& n) {
  if (n.op_name() == "input") {
    const int id = out.add_input(n.name, n.type.dtype, n.type.shape);
    if (!n.source_name.empty()) out.set_source_name(id, n.source_name);
    return id;
  }
  if (n.op_name() == "constant") return out.add_constant(*n.data, n.name);
  return -1;
}

Graph copy_graph(const Graph& g) {
  Graph out;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    int id = copy_source_node(out, n);
    if (id < 0) id = out.add_node(n.op_name(), n.inputs, n.attrs, n.name);
    COIL_ASSERT(id == n.id, "copy_graph: node {} became {}", n.id, id);
    if (!n.location.empty()) out.set_location(id, n.location);
    if (!n.composite.empty()) out.set_composite(id, n.composite, n.composite_node);
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out.add_output(g.outputs()[i].node, g.outputs()[i].name);
    if (!g.outputs()[i].source_name.empty())
      out.set_output_source_name(i, g.outputs()[i].source_name);
  }
  return out;
}

}  // namespace coil

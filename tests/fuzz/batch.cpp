#include "fuzz/batch.h"

#include <fmt/format.h>

namespace coil::fuzz {

FuzzCase merge_cases(const std::vector<const FuzzCase*>& members) {
  FuzzCase merged;
  merged.input_seed = members.at(0)->input_seed;
  merged.threads = members[0]->threads;
  merged.matmul = members[0]->matmul;
  for (size_t k = 0; k < members.size(); ++k) {
    const FuzzCase& m = *members[k];
    const std::string prefix = fmt::format("b{}_", k);
    std::map<sym::Expr, sym::Expr> symbols;
    for (const auto& [name, value] : m.sizes) {
      symbols[sym::make_symbol(name)] = sym::make_symbol(prefix + name);
      merged.sizes[prefix + name] = value;
    }
    std::vector<int> map(static_cast<size_t>(m.graph.num_nodes()), -1);
    for (const auto& np : m.graph.nodes()) {
      const Node& n = *np;
      int id;
      if (n.op_name() == "input") {
        Shape shape;
        for (const sym::Expr& d : n.type.shape) shape.push_back(sym::substitute(d, symbols));
        id = merged.graph.add_input(prefix + n.name, n.type.dtype, shape);
      } else if (n.op_name() == "constant") {
        id = merged.graph.add_constant(*n.data, prefix + n.name);
      } else {
        std::vector<int> in;
        for (int i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
        id = merged.graph.add_node(n.op_name(), in, n.attrs, prefix + n.name);
      }
      map[static_cast<size_t>(n.id)] = id;
    }
    for (const GraphOutput& o : m.graph.outputs())
      merged.graph.add_output(map[static_cast<size_t>(o.node)], prefix + o.name);
  }
  return merged;
}

}  // namespace coil::fuzz

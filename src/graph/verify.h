// The graph verifier: the invariants the graph passes (decompose_and_bind) hand to lowering,
// checked after each of them when IR verification is on (driver: driver/pass_checks.h).
//
// Every graph (GraphStage::input and later):
//   G1  node ids are positions and every input of a node is an earlier node (SSA, topological);
//   G2  value names are unique identifiers;
//   G3  graph inputs are `input` nodes, `constant` nodes carry data of their type, and graph
//       outputs name existing nodes under unique identifiers;
//   G4  each node's type is what its op's type rule infers from its inputs' types now (a pass
//       that edits a type in place, or rewires an input, breaks it).
// After decompose_and_bind (GraphStage::decomposed), what lowering relies on:
//   G5  no composite op is left;
//   G6  every size of every value is a constant >= 0 (all symbols bound);
//   G7  every node except graph inputs is live: some output depends on it.
// A Graph is built through Graph::add_node, which already checks G1-G4 for each node added;
// the verifier re-checks them over the whole graph a pass returns.
#pragma once

#include <string>
#include <vector>

#include "coil/graph.h"

namespace coil {

enum class GraphStage {
  input,       // as built by a frontend: composites and symbolic sizes allowed
  decomposed,  // after decompose_and_bind
};

/// Every broken invariant, one message each naming the node ("node t3 (add): ..."); empty
/// when the graph is valid.
std::vector<std::string> verify_graph(const Graph& g, GraphStage stage);

}  // namespace coil

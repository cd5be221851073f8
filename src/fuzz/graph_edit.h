// Rebuilding a graph with edits: the shrinker's moves (replace a node, drop nodes, change input
// types and attributes, pick other outputs). Graphs are immutable once built, so an edit builds
// a new graph through the builder API, which re-runs every type rule: an edit that makes the
// graph ill-typed throws coil::Error, and the shrinker skips it.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "coil/graph.h"

namespace coil::fuzz {

struct GraphEdit {
  std::map<int, int> replace;            // node -> an earlier node whose value stands in for it
  std::set<int> fresh_input;             // node -> a new graph input of its type and name
  std::set<int> drop;                    // nodes left out (nothing may read them after the edit)
  std::map<int, TensorType> input_type;  // new dtype and shape of an input node
  std::map<int, Attrs> attrs;            // new attributes of a node
  std::map<int, std::vector<int>> args;  // new operands of a node (node ids of the old graph)
  std::optional<std::vector<GraphOutput>> outputs;  // new outputs (node ids of the old graph)
};

/// The edited graph; node names are kept. Throws coil::Error when it is not well-typed.
Graph apply_edit(const Graph& g, const GraphEdit& edit);

// Nodes that some output reads: coil::live_nodes (coil/graph.h).

}  // namespace coil::fuzz

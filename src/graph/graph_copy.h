// Copying graphs node by node: Graph owns its nodes (no copy constructor), so passes that
// rebuild a graph, and owners that keep one (driver/dynamic_model.h), copy through these.
#pragma once

#include "coil/graph.h"

namespace coil {

/// Adds `n` to `out` when it is a source node: an input (with its source name) or a constant
/// (sharing its data). Returns its id there, or -1 for any other node.
int copy_source_node(Graph& out, const Node& n);

/// A copy of `g` with the same node ids, names, attributes, locations, composites and outputs;
/// constants share their data.
Graph copy_graph(const Graph& g);

}  // namespace coil

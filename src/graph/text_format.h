// The text format of graphs: a human-writable form for tests and the `coil` CLI
// (`coil compile model.coil`). The grammar is at the top of graph/text_format.cpp and in
// docs/text-format.md; the printer is `to_text` (coil/graph.h), whose output parses back to a
// graph that prints identically.
//
//   input x: f32[4, s0]
//   const w: f32[3] = [0.5, -1.0, 2.0]
//   t0 = mul(x, w) : f32[4, 3]
//   t1 = sum(t0) {axes=[1], keepdim=true}
//   output y = t1
#pragma once

#include <filesystem>
#include <string_view>

#include "coil/graph.h"

namespace coil {

/// Parses the text format; errors are coil::Error "FILE:LINE:COL: message" pointing at the
/// offending token (lines and columns count from 1; columns count bytes).
Graph parse_graph(std::string_view text, std::string_view filename = "<string>");

/// Reads and parses a file (coil::Error if it cannot be read).
Graph load_graph_file(const std::filesystem::path& path);

/// The type of an input declaration alone, `f32[s0, 128]` (integer or symbol sizes), for the
/// C ABI's coil_graph_add_input; `input` names the input in errors about its shape.
TensorType parse_type_text(std::string_view text, std::string_view input,
                           std::string_view filename = "<string>");

/// The attribute syntax alone, for its tests (no op's attributes take every kind of value) and
/// the C ABI's coil_graph_add_node (Graph::add_node then checks them against the op): parses
/// `{name=value, ...}` as a node writes it, without checking the names against an op, and
/// prints attributes as to_text prints a node's.
Attrs parse_attr_text(std::string_view text, std::string_view filename = "<string>");
std::string attrs_to_text(const Attrs& attrs);

/// The graph as to_text prints it, each constant declared as an input instead (`input w:
/// f32[64, 3]  # a constant of the model, its data left out`): a model's structure without its
/// weights, which parses back (the weights are then inputs).
std::string to_text_without_weights(const Graph& g);

/// The graph as to_text prints it, except that each constant's data is replaced by the
/// XXH3-128 of its bytes (`const w: f32[64, 3] = xxh3:1f0c...`): what identifies the graph in
/// the whole-graph cache (driver/model_cache.h) at hashing speed rather than printing speed
/// (resnet18's weights print as 165 MB). Not parseable.
std::string graph_fingerprint(const Graph& g);

}  // namespace coil

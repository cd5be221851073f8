// coil_fuzz --check-values DIR: the local check (local_check.h) of node values computed
// elsewhere, for the Triton mode (tests/fuzz/README.md, "Triton"): run_triton.py runs a failing
// graph's instrumented module on the GPU and saves every node's value; this reads them back and
// calls check_nodes, as check_locally does with the values of a CPU compile.
//
//   DIR/graph.coil     the graph (a fuzz case file)
//   DIR/values.json    {"nodes": [{"node": ID, "name": NAME, "file": "values/ID.npy"}, ...]}:
//                      the value of every node, inputs included (nodes are matched by name)
//   DIR/verdict.json   written here: {"verdict": "explained" | "node-differs" |
//                      "inconclusive", "node": ID or null, "name", "op", "message"}
#pragma once

#include <filesystem>

namespace coil::fuzz {

/// Checks the values in `dir`, prints the verdict and writes dir/verdict.json. Exit status: 0
/// when every node matches (the difference is rounding), 1 when a node differs or the check is
/// inconclusive, 2 when the directory cannot be read.
int run_check_values(const std::filesystem::path& dir);

/// coil_fuzz --check-placement DIR: the Triton mode's "gone when stored" case (an output
/// differs, and no longer does with every node an output). DIR/graph.coil, DIR/values.json =
/// {"inputs": [{"name", "file"}, ...], "outputs": [{"index": I, "file"}, ...]} (every input;
/// the differing outputs of the fusion-on module, by the graph's output index). Each output
/// is checked against the reference with each rounding placement of its f16/bf16
/// intermediates (evaluate.h: rounding_placement), as the CPU mode does. Writes
/// DIR/verdict.json {"verdict": "explained" | "no-placement", "message"}; exit 0 when every
/// output matches a placement, 1 when one does not, 2 when DIR cannot be read.
int run_check_placement(const std::filesystem::path& dir);

}  // namespace coil::fuzz

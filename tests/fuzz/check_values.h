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

}  // namespace coil::fuzz

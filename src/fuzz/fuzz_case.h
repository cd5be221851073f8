// A fuzz case: a graph plus everything else a run needs to be reproduced exactly (the values of
// its size symbols, the seed of its random inputs, the kernel thread count), and its file form:
// the graph's text format (docs/text-format.md) under a header of `# key: value` comments.
//
//   # sizes: s0=1
//   # input-seed: 1
//   # threads: 2
//   # matmul: dnnl
//   input x: f32[s0]
//   ...
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "coil/graph.h"
#include "coil/tensor.h"

namespace coil::fuzz {

struct FuzzCase {
  Graph graph;
  std::map<std::string, int64_t> sizes;  // every size symbol of the graph's inputs
  uint64_t input_seed = 1;
  int threads = 2;     // OpenMP threads of the compiled kernels
  std::string matmul;  // COIL_MATMUL for the compile: "" (the template), "dnnl" or "openblas"
  /// Input values given by the user (`coil minify --input`), by input name; an input that is
  /// not here, or whose shape or dtype an edit changed, gets seeded random values.
  std::map<std::string, Tensor> given = {};  // copies share the values
};

/// The seed of graph `index` of a run with `seed` (splitmix64 of both): graph i of seed S is the
/// same graph on every run, whatever the other graphs or the number of jobs.
uint64_t mix_seed(uint64_t seed, uint64_t index);

/// A deep copy (Graph holds unique_ptrs, so it has no copy constructor).
FuzzCase clone_case(const FuzzCase& c);

/// The case in its file form. `comments` are extra header lines (each gets "# ").
std::string case_text(const FuzzCase& c, const std::vector<std::string>& comments = {});
/// Parses the file form; the header lines are optional (defaults: no sizes, seed 1, 2 threads,
/// the matmul template).
FuzzCase parse_case(const std::string& text, const std::string& filename);
FuzzCase load_case_file(const std::filesystem::path& path);

/// The inputs of a case: the given ones, the others random, each seeded by the case's seed and
/// the input's name, so that editing other inputs (as the shrinker does) leaves its values
/// unchanged.
std::vector<Tensor> case_inputs(const FuzzCase& c);

}  // namespace coil::fuzz

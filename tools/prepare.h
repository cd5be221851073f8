// What compile/run/check/bench share: the model loaded, its inputs made or read, and the
// sizes they bind.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "coil/coil.h"
#include "commands.h"

namespace coil::cli {

/// "NAME=VALUE" split at the first '='; otherwise a user error naming the option `what` and
/// the `form` it expects ("NAME=FILE.npy").
std::pair<std::string, std::string> split_pair(const std::string& s, const char* what,
                                               const char* form);

/// "a, b, c", or "none", for the lists in error messages.
std::string names_list(const std::vector<std::string>& names);

/// The model's graph, its inputs (files or random), and the size bindings they imply.
struct Prepared {
  Graph graph;
  std::vector<Tensor> inputs;
  CompileOptions options;
};

/// With `make_inputs` false (`coil compile`), --input files still bind their sizes but no
/// random inputs are made, so sizes may stay unbound: the compile is size-generic in them.
Prepared prepare(const ModelArgs& a, bool make_inputs = true);

}  // namespace coil::cli

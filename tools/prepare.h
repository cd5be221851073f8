// What compile/run/check/bench share: the model loaded, its inputs made or read, and the
// sizes they bind.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "coil/coil.h"
#include "commands.h"

namespace coil::cli {

/// "NAME=VALUE" split at the first '=' (a user error naming `what` otherwise).
std::pair<std::string, std::string> split_pair(const std::string& s, const char* what);

/// The model's graph, its inputs (files or random), and the size bindings they imply.
struct Prepared {
  Graph graph;
  std::vector<Tensor> inputs;
  CompileOptions options;
};

Prepared prepare(const ModelArgs& a);

}  // namespace coil::cli

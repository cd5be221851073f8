// Dependencies: what every computation reads and writes, as (buffer, index expression), and
// who produces and consumes each buffer. Fusion, ordering and memory planning all use this one
// graph.
#pragma once

#include <vector>

#include "ir/ir.h"

namespace coil {

/// One access: a buffer and the index expression (in the computation's loop variables).
struct MemoryDep {
  int buffer = -1;
  sym::Expr index;
};

struct ComputationDeps {
  std::vector<MemoryDep> reads;  // every load, in body order (a buffer may appear twice)
  MemoryDep write;               // the one store
};

struct DependencyGraph {
  std::vector<ComputationDeps> computations;   // per computation
  std::vector<int> writer;                     // per buffer: its computation, -1 if none
  std::vector<std::vector<int>> readers;       // per buffer: computations reading it, sorted
  std::vector<std::vector<int>> predecessors;  // per computation: computations it reads from

  /// Graph outputs and buffers read outside `group` must stay in memory.
  bool read_only_within(int buffer, const std::vector<int>& group) const;
};

DependencyGraph build_dependencies(const IrProgram& program);

}  // namespace coil

// Memory planning: every intermediate that leaves its kernel gets an offset in one arena.
// Walking the kernels in order, a buffer takes, in order of preference:
//   1. the slot of a buffer the same kernel reads for the last time, when the kernel is one
//      pointwise nest that reads that buffer only at the index it writes its own output
//      (an in-place update: each element is read before it is overwritten);
//   2. a free slot (its buffer was last used by an earlier kernel) of the same size class:
//      at least the bytes needed and at most twice that (best fit);
//   3. new space at the end of the arena.
// Graph inputs, outputs and constants never live in the arena, so outputs never alias inputs.
#pragma once

#include <vector>

#include "sched/fusion.h"

namespace coil {

struct MemoryPlan {
  static constexpr int64_t kAlignment = 64;
  std::vector<int64_t> offsets;  // per buffer id; -1 when not in the arena
  int64_t arena_bytes = 0;
  int64_t unplanned_bytes = 0;  // what the arena would take without reuse (for reports)
  std::vector<std::pair<int, int>> in_place;  // (buffer, buffer whose slot it took)
};

MemoryPlan plan_memory(const IrProgram& program, const DependencyGraph& deps,
                       const std::vector<KernelGroup>& kernels);

/// Bytes of a buffer: static sizes, or its size at the size hints (sym/size_hints.h).
int64_t buffer_nbytes(const Buffer& b);

}  // namespace coil

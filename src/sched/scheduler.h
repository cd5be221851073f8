// The scheduler: which computations run together as one kernel, in what order, and where
// every intermediate buffer lives. (Today each computation is its own kernel; the fusion
// pass comes with the scheduler issue.)
#pragma once

#include <vector>

#include "ir/ir.h"

namespace coil {

struct ScheduledKernel {
  std::vector<int> computations;  // indices into IrProgram::computations, in execution order
};

/// Where intermediates live: byte offsets into one arena allocated per compiled model.
struct MemoryPlan {
  static constexpr int64_t kAlignment = 64;
  std::vector<int64_t> offsets;  // per buffer id; -1 for inputs, outputs, constants
  int64_t arena_bytes = 0;
};

struct Schedule {
  std::vector<ScheduledKernel> kernels;
  MemoryPlan memory;
};

Schedule schedule_program(const IrProgram& program);

/// Bytes of a buffer with static sizes.
int64_t buffer_nbytes(const Buffer& b);

}  // namespace coil

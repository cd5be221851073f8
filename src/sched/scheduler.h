// The scheduler: dependencies, then fusion into kernels (sched/fusion.h), then the memory plan
// (sched/memory_plan.h). COIL_LOGS=schedule prints the result: each kernel with its graph
// nodes and the bytes it must move, and the arena plan.
#pragma once

#include <vector>

#include "sched/memory_plan.h"

namespace coil {

struct ScheduleOptions {
  FusionOptions fusion;
};

struct Schedule {
  DependencyGraph deps;
  std::vector<KernelGroup> kernels;  // in execution order
  MemoryPlan memory;
};

Schedule schedule_program(const IrProgram& program, const ScheduleOptions& options = {});

/// The minimum bytes kernel `k` must move: every buffer it reads from outside the kernel, once,
/// and every buffer it writes that outlives the kernel, once.
struct KernelTraffic {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};
KernelTraffic kernel_traffic(const IrProgram& program, const Schedule& schedule, size_t k);

}  // namespace coil

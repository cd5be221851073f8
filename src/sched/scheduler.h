// The scheduler: dependencies, then fusion into kernels (sched/fusion.h), then the memory plan
// (sched/memory_plan.h). COIL_LOGS=schedule prints the result: each kernel with its graph
// nodes and the bytes it must move, and the arena plan.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sched/memory_plan.h"

namespace coil {

struct Schedule;

struct ScheduleOptions {
  FusionOptions fusion;
  /// Called after each of the scheduler's passes ("fuse", then "plan_memory") with the schedule
  /// so far (`memory_planned` false: the memory plan is still empty): the pipeline verifies and
  /// dumps it there (driver/pass_checks.h).
  std::function<void(std::string_view pass, const Schedule& schedule, bool memory_planned)>
      after_pass;
};

struct Schedule {
  DependencyGraph deps;
  std::vector<KernelGroup> kernels;  // in execution order
  MemoryPlan memory;
};

/// The kernels with their nests, computations and bytes moved, then (when `memory_planned`) the
/// arena plan: what COIL_LOGS=schedule prints.
std::string to_string(const IrProgram& program, const Schedule& schedule,
                      bool memory_planned = true);

Schedule schedule_program(const IrProgram& program, const ScheduleOptions& options = {});

/// The minimum bytes kernel `k` must move: every buffer it reads from outside the kernel, once,
/// and every buffer it writes that outlives the kernel, once.
struct KernelTraffic {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  /// Arithmetic operations: per computation, its iterations (pointwise and reduction loops)
  /// times the math and reduction ops of its body, each counted as one (exp as one, like add);
  /// matmuls 2*M*N*K per batch, convolutions 2 per multiply-add. For rooflines.
  int64_t ops = 0;
};
KernelTraffic kernel_traffic(const IrProgram& program, const Schedule& schedule, size_t k);

}  // namespace coil

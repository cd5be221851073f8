#include "sched/scheduler.h"

#include "support/check.h"
#include "support/log.h"

namespace coil {

int64_t buffer_nbytes(const Buffer& b) {
  auto n = b.layout.numel().as_const();
  COIL_ASSERT(n.has_value(), "buffer {} has symbolic size", b.name);
  return *n * dtype_size(b.layout.dtype);
}

static MemoryPlan plan_memory(const IrProgram& program) {
  MemoryPlan plan;
  plan.offsets.assign(program.buffers.size(), -1);
  for (const Buffer& b : program.buffers) {
    if (b.kind != BufferKind::Intermediate) continue;
    plan.offsets[static_cast<size_t>(b.id)] = plan.arena_bytes;
    int64_t bytes = std::max<int64_t>(buffer_nbytes(b), 1);
    plan.arena_bytes +=
        (bytes + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
  }
  return plan;
}

Schedule schedule_program(const IrProgram& program) {
  Schedule s;
  for (size_t i = 0; i < program.computations.size(); ++i)
    s.kernels.push_back({{static_cast<int>(i)}});
  s.memory = plan_memory(program);
  if (log_enabled(LogChannel::schedule)) {
    std::string text;
    for (size_t k = 0; k < s.kernels.size(); ++k) {
      for (int ci : s.kernels[k].computations) {
        const ComputedBuffer& c = program.computations[static_cast<size_t>(ci)];
        text += fmt::format("  kernel {}: {} <- {}\n", k, program.buffer(c.buffer).name,
                            fmt::join(c.origin_names, ", "));
      }
    }
    text += fmt::format("  arena: {} bytes\n", s.memory.arena_bytes);
    for (const Buffer& b : program.buffers)
      if (s.memory.offsets[static_cast<size_t>(b.id)] >= 0)
        text += fmt::format("    {} at offset {} ({} bytes)\n", b.name,
                            s.memory.offsets[static_cast<size_t>(b.id)], buffer_nbytes(b));
    COIL_LOG(schedule, "schedule:\n{}", text);
  }
  return s;
}

}  // namespace coil

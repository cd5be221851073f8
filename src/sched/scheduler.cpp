#include "sched/scheduler.h"

#include <set>

#include "support/check.h"
#include "support/log.h"

namespace coil {

KernelTraffic kernel_traffic(const IrProgram& p, const Schedule& s, size_t k) {
  const KernelGroup& g = s.kernels[k];
  std::set<int> written, local(g.local_buffers.begin(), g.local_buffers.end()), read;
  for (int c : g.computations()) written.insert(p.computations[static_cast<size_t>(c)].buffer);
  for (int c : g.computations())
    for (const auto& r : s.deps.computations[static_cast<size_t>(c)].reads)
      if (!written.count(r.buffer)) read.insert(r.buffer);
  KernelTraffic t;
  for (int b : read) t.bytes_read += buffer_nbytes(p.buffer(b));
  for (int b : written)
    if (!local.count(b)) t.bytes_written += buffer_nbytes(p.buffer(b));
  return t;
}

std::string to_string(const IrProgram& p, const Schedule& s, bool memory_planned) {
  std::string text;
  for (size_t k = 0; k < s.kernels.size(); ++k) {
    const KernelGroup& g = s.kernels[k];
    KernelTraffic t = kernel_traffic(p, s, k);
    text += fmt::format("kernel {}: {} nest(s), {} shared outer loop(s); reads {} B, writes {} B\n",
                        k, g.nests.size(), g.outer_depth, t.bytes_read, t.bytes_written);
    for (size_t n = 0; n < g.nests.size(); ++n) {
      for (int c : g.nests[n].computations) {
        const ComputedBuffer& comp = p.computations[static_cast<size_t>(c)];
        bool is_local = std::find(g.local_buffers.begin(), g.local_buffers.end(), comp.buffer) !=
                        g.local_buffers.end();
        text +=
            fmt::format("  nest {}: {} {}{}{} <- {}\n", n, loop_kind_name(comp.kind),
                        p.buffer(comp.buffer).name, shape_str(p.buffer(comp.buffer).layout.sizes),
                        is_local ? " (local)" : "", fmt::join(comp.origin_names, ", "));
      }
    }
  }
  if (!memory_planned) return text;
  text += fmt::format("arena: {} bytes ({} without reuse)\n", s.memory.arena_bytes,
                      s.memory.unplanned_bytes);
  for (const Buffer& b : p.buffers) {
    int64_t off = s.memory.offsets[static_cast<size_t>(b.id)];
    if (off >= 0)
      text += fmt::format("  {} at offset {} ({} bytes)\n", b.name, off, buffer_nbytes(b));
  }
  for (const auto& [b, a] : s.memory.in_place)
    text += fmt::format("  {} updates {} in place\n", p.buffer(b).name, p.buffer(a).name);
  return text;
}

Schedule schedule_program(const IrProgram& program, const ScheduleOptions& options) {
  Schedule s;
  s.deps = build_dependencies(program);
  s.kernels = fuse_computations(program, s.deps, options.fusion);
  if (options.after_pass) options.after_pass("fuse", s, false);
  s.memory = plan_memory(program, s.deps, s.kernels);
  if (options.after_pass) options.after_pass("plan_memory", s, true);
  COIL_LOG(schedule, "schedule:\n{}", to_string(program, s));
  return s;
}

}  // namespace coil

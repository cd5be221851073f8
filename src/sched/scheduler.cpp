#include "sched/scheduler.h"

#include <set>

#include "support/check.h"
#include "support/log.h"

namespace coil {

namespace {

int64_t computation_ops(const ComputedBuffer& c) {
  if (c.matmul) {
    int64_t batch = 1;
    for (int64_t b : c.matmul->batch) batch *= b;
    return 2 * batch * c.matmul->m * c.matmul->n * c.matmul->k;
  }
  if (c.conv) {
    const Conv2dSpec& v = *c.conv;
    auto out = [](int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
      return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
    };
    int64_t oh = out(v.h, v.kh, v.stride[0], v.dilation[0], v.padding[0], v.padding[2]);
    int64_t ow = out(v.wd, v.kw, v.stride[1], v.dilation[1], v.padding[1], v.padding[3]);
    const int64_t expand = v.expand ? 2 * v.n * v.c * v.h * v.wd * v.expand->c : 0;
    return 2 * v.n * v.oc * oh * ow * (v.c / v.groups) * v.kh * v.kw + expand;
  }
  if (c.attention) {
    const AttentionSpec& a = *c.attention;
    const int64_t pairs = 2 * a.batch * a.heads * a.q_len * a.kv_len;
    switch (a.kernel) {
      case AttentionKernel::forward:
        return pairs * (a.head_dim + a.value_dim);
      case AttentionKernel::logsumexp:
        return pairs * a.head_dim;
      case AttentionKernel::grad_q:
      case AttentionKernel::grad_k:  // scores, dO V^T and the product into the gradient
        return pairs * (2 * a.head_dim + a.value_dim);
      case AttentionKernel::grad_v:  // scores and P^T dO
        return pairs * (a.head_dim + a.value_dim);
    }
  }
  if (c.is_opaque()) return 0;
  int64_t iterations = 1;
  for (const auto& r : c.ranges) iterations *= r.is_const() ? r.const_value() : 0;
  for (const auto& r : c.reduction_ranges) iterations *= r.is_const() ? r.const_value() : 0;
  int64_t per_iteration = 0;
  for (const BodyOp& op : c.body.ops()) {
    bool math = false;
    switch (op.op) {
#define COIL_COUNT_OP(name, arity, doc) \
  case LoopOp::name:                    \
    math = true;                        \
    break;
      COIL_LOOP_MATH_OPS(COIL_COUNT_OP)
#undef COIL_COUNT_OP
      default:
        break;
    }
    bool conversion = op.op == LoopOp::to_dtype || op.op == LoopOp::round_to_bf16 ||
                      op.op == LoopOp::round_to_f16;
    if ((math && !conversion) || op.op == LoopOp::reduction) ++per_iteration;
  }
  return iterations * per_iteration;
}

}  // namespace

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
  for (int c : g.computations()) t.ops += computation_ops(p.computations[static_cast<size_t>(c)]);
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

#include "sched/memory_plan.h"

#include <algorithm>

#include "support/check.h"
#include "support/log.h"
#include "sym/size_hints.h"

namespace coil {

int64_t buffer_nbytes(const Buffer& b) {
  auto n = sym::hint(b.layout.numel());
  COIL_ASSERT(n.has_value(), "buffer {} has a symbolic size without a hint", b.name);
  return *n * dtype_size(b.layout.dtype);
}

namespace {

int64_t aligned(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 1);
  return (bytes + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
}

struct Slot {
  int64_t offset, bytes;
  bool free;
  int owner;
};

/// Kernel k reads `a` only at the index where it writes `b`, in one pointwise nest, and only
/// in computations up to the one that writes `b`: the merged body stores `b` before the loads
/// of the computations after it, which would read the new value instead of `a`'s.
bool in_place_ok(const IrProgram& p, const DependencyGraph& d, const KernelGroup& k, int a, int b) {
  if (k.nests.size() != 1) return false;
  if (p.buffer(a).layout.dtype != p.buffer(b).layout.dtype) return false;
  if (buffer_nbytes(p.buffer(a)) != buffer_nbytes(p.buffer(b))) return false;
  sym::Expr write_index;
  std::vector<int> cs = k.computations();  // in body order
  size_t writer = cs.size();
  for (size_t i = 0; i < cs.size(); ++i) {
    if (p.computations[static_cast<size_t>(cs[i])].kind != LoopKind::Pointwise) return false;
    if (p.computations[static_cast<size_t>(cs[i])].buffer == b) {
      write_index = d.computations[static_cast<size_t>(cs[i])].write.index;
      writer = i;
    }
  }
  for (size_t i = 0; i < cs.size(); ++i)
    for (const auto& r : d.computations[static_cast<size_t>(cs[i])].reads)
      if (r.buffer == a && (r.index != write_index || i > writer)) return false;
  return write_index.defined();
}

}  // namespace

MemoryPlan plan_memory(const IrProgram& p, const DependencyGraph& d,
                       const std::vector<KernelGroup>& kernels) {
  MemoryPlan plan;
  plan.offsets.assign(p.buffers.size(), -1);
  std::vector<bool> local(p.buffers.size(), false);
  for (const auto& k : kernels)
    for (int b : k.local_buffers) local[static_cast<size_t>(b)] = true;
  auto in_arena = [&](int b) {
    return p.buffer(b).kind == BufferKind::Intermediate && !local[static_cast<size_t>(b)];
  };

  // Last kernel that reads each buffer.
  std::vector<int> kernel_of(p.computations.size(), -1);
  for (size_t k = 0; k < kernels.size(); ++k)
    for (int c : kernels[k].computations()) kernel_of[static_cast<size_t>(c)] = static_cast<int>(k);
  std::vector<int> last_use(p.buffers.size(), -1);
  for (size_t b = 0; b < p.buffers.size(); ++b)
    for (int r : d.readers[b])
      last_use[b] = std::max(last_use[b], kernel_of[static_cast<size_t>(r)]);

  std::vector<Slot> slots;
  std::vector<int> slot_of(p.buffers.size(), -1);
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<int> reads;
    for (int c : kernels[k].computations())
      for (const auto& r : d.computations[static_cast<size_t>(c)].reads) reads.push_back(r.buffer);
    for (int c : kernels[k].computations()) {
      int b = p.computations[static_cast<size_t>(c)].buffer;
      if (!in_arena(b)) continue;
      int64_t need = aligned(buffer_nbytes(p.buffer(b)));
      plan.unplanned_bytes += need;
      int chosen = -1;
      for (int a : reads) {
        if (!in_arena(a) || last_use[static_cast<size_t>(a)] != static_cast<int>(k) ||
            slot_of[static_cast<size_t>(a)] < 0)
          continue;
        Slot& s = slots[static_cast<size_t>(slot_of[static_cast<size_t>(a)])];
        if (s.owner == a && in_place_ok(p, d, kernels[k], a, b)) {
          chosen = slot_of[static_cast<size_t>(a)];
          plan.in_place.emplace_back(b, a);
          break;
        }
      }
      if (chosen < 0) {
        int64_t best = INT64_MAX;
        for (size_t s = 0; s < slots.size(); ++s) {
          if (slots[s].free && slots[s].bytes >= need && slots[s].bytes <= 2 * need &&
              slots[s].bytes < best) {
            best = slots[s].bytes;
            chosen = static_cast<int>(s);
          }
        }
      }
      if (chosen < 0) {
        slots.push_back({plan.arena_bytes, need, false, b});
        plan.arena_bytes += need;
        chosen = static_cast<int>(slots.size()) - 1;
      }
      slots[static_cast<size_t>(chosen)].free = false;
      slots[static_cast<size_t>(chosen)].owner = b;
      slot_of[static_cast<size_t>(b)] = chosen;
      plan.offsets[static_cast<size_t>(b)] = slots[static_cast<size_t>(chosen)].offset;
    }
    // Buffers whose last reader was this kernel free their slot (unless taken over in place).
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (slot_of[b] < 0 || last_use[b] != static_cast<int>(k)) continue;
      Slot& s = slots[static_cast<size_t>(slot_of[b])];
      if (s.owner == static_cast<int>(b)) s.free = true;
    }
  }
  return plan;
}

}  // namespace coil

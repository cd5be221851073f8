#include "sched/dependencies.h"

#include <algorithm>

#include "support/check.h"

namespace coil {

bool DependencyGraph::read_only_within(int buffer, const std::vector<int>& group) const {
  for (int r : readers[static_cast<size_t>(buffer)])
    if (std::find(group.begin(), group.end(), r) == group.end()) return false;
  return true;
}

DependencyGraph build_dependencies(const IrProgram& program) {
  DependencyGraph g;
  size_t nc = program.computations.size(), nb = program.buffers.size();
  g.computations.resize(nc);
  g.writer.assign(nb, -1);
  g.readers.assign(nb, {});
  g.predecessors.assign(nc, {});
  for (size_t c = 0; c < nc; ++c) {
    const ComputedBuffer& comp = program.computations[c];
    for (const BodyOp& op : comp.body.ops()) {
      if (op.op == LoopOp::load) g.computations[c].reads.push_back({op.buffer, op.index});
      if (op.op == LoopOp::store) g.computations[c].write = {op.buffer, op.index};
    }
    COIL_ASSERT(g.computations[c].write.buffer == comp.buffer,
                "computation {} stores to buf{} not buf{}", c, g.computations[c].write.buffer,
                comp.buffer);
    COIL_ASSERT(g.writer[static_cast<size_t>(comp.buffer)] < 0, "buffer {} is written twice",
                program.buffer(comp.buffer).name);
    g.writer[static_cast<size_t>(comp.buffer)] = static_cast<int>(c);
  }
  for (size_t c = 0; c < nc; ++c) {
    for (const MemoryDep& d : g.computations[c].reads) {
      auto& rs = g.readers[static_cast<size_t>(d.buffer)];
      if (std::find(rs.begin(), rs.end(), static_cast<int>(c)) == rs.end())
        rs.push_back(static_cast<int>(c));
      int w = g.writer[static_cast<size_t>(d.buffer)];
      if (w >= 0) {
        COIL_ASSERT(w < static_cast<int>(c),
                    "computation {} reads {} before computation {} writes it", c,
                    program.buffer(d.buffer).name, w);
        auto& ps = g.predecessors[c];
        if (std::find(ps.begin(), ps.end(), w) == ps.end()) ps.push_back(w);
      }
    }
  }
  for (auto& rs : g.readers) std::sort(rs.begin(), rs.end());
  return g;
}

}  // namespace coil

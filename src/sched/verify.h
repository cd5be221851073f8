// The schedule verifier: what fusion (fuse_computations) and memory planning (plan_memory) must
// guarantee the code generators, checked after each when IR verification is on
// (driver/pass_checks.h). Messages name the kernel, the nest and the buffer.
//
// After fusion:
//   S1  every computation is in exactly one nest of one kernel; no kernel or nest is empty; the
//       dependencies are those of this program (one entry per computation, its store);
//   S2  order: each computation runs after the computations it reads from, in an earlier kernel
//       or earlier in its own (every kernel's computations are in a topological order);
//   S3  loops: a kernel's nests share their first outer_depth ranges (0 <= outer_depth <= the
//       depth of each nest); the computations of one nest have the same loops, except the
//       pointwise prologues of a reduction renamed by `reindex` (their ranges are the
//       reduction's ranges then its one reduction range, the last loop variable renamed to r0);
//       `reindex` names only computations of its nest;
//   S4  kinds: a Template is alone in the first nest of its kernel, followed by at most one nest
//       of Pointwise epilogues over its ranges; an Extern is alone in its kernel;
//   S5  data passed inside a kernel: a buffer read in the nest that writes it is read at the
//       index it is written (after reindex) from a Pointwise writer, so the merged body forwards
//       it; a buffer written in one nest and read in a later one is row-partitioned at
//       outer_depth for both (fusion.h, row_partitioned); a template epilogue reads the values of
//       its kernel only at the element it computes;
//   S6  local buffers are Intermediates written by their kernel and read by no computation of
//       another kernel (no dangling reference after fusion), local to one kernel only.
// After memory planning:
//   M1  one offset per buffer: none for inputs, constants, outputs and local buffers; every other
//       intermediate has one, aligned to MemoryPlan::kAlignment, inside arena_bytes;
//   M2  two arena buffers whose lifetimes (from the kernel writing one to the last kernel reading
//       it) overlap occupy disjoint bytes, unless the later one updates the earlier in place:
//       the pair is in `in_place`, both of one dtype and size, and the earlier one's last reader
//       is the kernel writing the later, one pointwise nest reading it only at the written index.
#pragma once

#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace coil {

/// Every broken invariant, one message each; empty when the schedule is valid. The memory plan
/// (M1, M2) is checked only when `memory_planned`.
std::vector<std::string> verify_schedule(const IrProgram& program, const Schedule& schedule,
                                         bool memory_planned);

}  // namespace coil

// Batches: several fuzz cases run as one graph. A compile costs ~0.7 s of g++ whatever the graph
// (most of it fixed per module), the graph's own work milliseconds, so a run of 20,000 graphs
// compiles batches of K independent graphs at once. The members share no value, so the
// scheduler never fuses across them and each keeps the kernels it would get alone.
#pragma once

#include <vector>

#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

/// One case holding every member as an independent subgraph: each member's values, outputs and
/// size symbols are renamed with the prefix "b<k>_". The kernel thread count and the matmul
/// choice are the first member's. Throws coil::Error when a member cannot be copied.
FuzzCase merge_cases(const std::vector<const FuzzCase*>& members);

}  // namespace coil::fuzz

// Shrinking of a failing case: first, for a graph of 8 computed nodes or more, bisection to the
// shortest prefix of its nodes (in build order, which is topological) that still fails, and that
// prefix's last node alone with what it reads; then greedy steps: try smaller variants in a fixed
// order and keep the first that still fails the same way, until no variant does or the budget is
// spent. The greedy moves, in order: input seed 1, one thread, the matmul template; drop an
// output; make every operand of a node a fresh input (cutting off its upstream); replace a node
// by one of its inputs or by a fresh input of its type, or drop its last operand; drop dead
// nodes and unused inputs; smaller sizes (1, 2, half: of a size symbol, of every use of a size,
// of one input dim); f32 for other dtypes; drop an attribute. Variants are evaluated a batch at
// a time in forked children; taking the first failing one of each batch gives the same result
// as trying them one by one. The fuzzer (tests/fuzz) and `coil minify` (tools/minify.cpp) use it.
#pragma once

#include "fuzz/evaluate.h"
#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

struct ShrinkOptions {
  int jobs = 1;
  int timeout_s = 60;
  int max_evaluations = 100;
};

struct ShrinkResult {
  FuzzCase shrunk;
  Outcome outcome;  // of the shrunk case
  int evaluations = 0;
};

ShrinkResult shrink_case(const FuzzCase& c, const Outcome& failure, const ShrinkOptions& options);

}  // namespace coil::fuzz

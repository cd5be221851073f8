// Random valid graphs for the differential fuzzer, built through the Graph builder API: every
// op of the op registry, every dtype, shapes with 1s, primes and odd sizes, broadcasts, a
// symbolic size, several outputs, intermediates as outputs, dead nodes. Graph::add_node runs
// the op's type rule and throws coil::Error on an invalid attempt; the generator then tries
// something else, so every graph it returns is well-typed.
#pragma once

#include <cstdint>

#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

/// The case of one graph seed (mix_seed(run seed, index)); the same seed gives the same case.
FuzzCase generate_case(uint64_t graph_seed);

}  // namespace coil::fuzz

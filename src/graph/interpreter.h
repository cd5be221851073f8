// The reference interpreter: runs a graph on host tensors with the reference kernels of the op
// registry (graph/reference/reference_kernels.h). It is the oracle that every correctness test
// compares compiled code against, so it shares no code with lowering or codegen.
#pragma once

#include <vector>

#include "coil/graph.h"

namespace coil {

/// Evaluates `g` on `inputs` (one per graph input, in Graph::inputs() order; any strides) and
/// returns the graph outputs in order, as new contiguous tensors.
/// Inputs must match the graph's input dtypes and ranks, constant sizes exactly, and each size
/// symbol must take one value across all inputs; a mismatch is a coil::Error naming the input.
std::vector<Tensor> interpret(const Graph& g, const std::vector<Tensor>& inputs);

}  // namespace coil

// The lowering of each graph op to loop IR, keyed by op name (lower/op_lowering.cpp): what the
// op registry (graph/op_registry.h) says of an op up to its type and reference, this says of
// its loop IR. Composites have no row: they are decomposed before lowering.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "ir/loop_ops.h"

namespace coil {

struct LowerContext;
struct Node;
struct TensorBox;

/// Lowers the node to a loop-IR TensorBox.
using LowerFn = TensorBox (*)(LowerContext& ctx, const Node& node,
                              const std::vector<TensorBox>& inputs);

struct OpLowering {
  std::string_view op;  // the graph op's name
  LowerFn lower;
  LoopOp loop_op = LoopOp::constant;  // elementwise ops: the loop op computing one element
};

/// The lowering of the op named `op`, or null (composites, input, constant).
const OpLowering* find_lowering(std::string_view op);
/// Every lowering, in the op registry's order.
std::span<const OpLowering> all_lowerings();

}  // namespace coil

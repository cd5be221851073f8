// ONNX control flow: If, Loop and Scan (opsets 8/9 to 17), run on the host between compiled
// stages (onnx_staged.h): the loop itself and the choice of branch are host code; each body is
// a sub-model that the caller compiles (once per tuple of its input shapes and cached) and
// runs through `run_body`.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "coil/tensor.h"

namespace coil::onnxfe {

/// Whether `op_type` (default domain) is If, Loop or Scan.
bool is_control_flow(std::string_view op_type);

/// Runs `body` (the graph attribute `attr` of the node) on its formal inputs, in order; returns
/// its outputs in order. Values the body reads from the enclosing graph are the caller's.
using RunBody = std::function<std::vector<Tensor>(
    const onnx::GraphProto& body, std::string_view attr, const std::vector<Tensor>& inputs)>;

/// Runs one If, Loop or Scan node of a model at `opset` (Scan's opset 8 form differs):
/// `inputs` in the node's order, an undefined Tensor for an omitted optional input. Returns one
/// tensor per node output. Bad attributes, inputs or body outputs are a coil::Error naming the
/// node.
std::vector<Tensor> run_control_flow(const onnx::NodeProto& node, const std::vector<Tensor>& inputs,
                                     const RunBody& run_body, int opset);

}  // namespace coil::onnxfe

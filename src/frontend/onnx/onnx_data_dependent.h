// ONNX ops whose output size depends on their inputs' values: NonZero, Compress, Unique and
// NonMaxSuppression (issue 27; docs/onnx.md, "Ops whose output size depends on values").
//
// coil compiles shapes in, so these ops cannot be nodes of a compiled graph. Where their inputs
// are constants, the importer computes them (a folded constant). Otherwise the import refuses
// them with kDataDependent in the reason, and coil::OnnxModel runs such a model in stages
// (onnx_staged.h): compiled sub-models for the rest of the graph, and these ops between them
// on the host, through run_data_dependent, as torch.compile's graph breaks do.
#pragma once

#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "coil/tensor.h"

namespace coil::onnxfe {

class OnnxNode;

/// Part of the import's reason for refusing such an op with inputs known only at run time.
inline constexpr std::string_view kDataDependent = "its output size depends on its inputs' values";
/// Part of the reason for refusing any node that coil::OnnxModel runs on the host between
/// compiled stages (these ops, and If, Loop and Scan): what OnnxModel looks for.
inline constexpr std::string_view kStaged = "runs it on the host between compiled stages";

/// Whether `op_type` (default domain) is one of the ops above.
bool is_data_dependent(std::string_view op_type);

/// Runs one such node on host tensors: `inputs` in the node's order, an undefined Tensor for an
/// omitted optional input. Returns one tensor per node output (computed whether or not the
/// output is named). Bad attributes or inputs are a coil::Error naming the node and value.
std::vector<Tensor> run_data_dependent(const onnx::NodeProto& node,
                                       const std::vector<Tensor>& inputs);

/// The import mapping of these ops: constant inputs fold; others are Unsupported (kStaged).
void map_data_dependent(OnnxNode& n);
/// The import mapping of If, Loop and Scan: always Unsupported (kStaged; onnx_control_flow.h).
void map_control_flow(OnnxNode& n);

}  // namespace coil::onnxfe

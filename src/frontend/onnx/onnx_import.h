// The ONNX frontend: reads an ONNX model (.onnx, opsets 1 to 23 of the default domain; ops as
// defined up to opset 17, plus Attention of opset 23) into a coil Graph. docs/onnx.md lists the
// supported ops and how each maps onto coil's ops.
//
//   coil::Graph g = coil::import_onnx("model.onnx");
//   coil::CompiledModel m = coil::compile(g, {.sizes = {{"batch", 8}}});
//
// - Initializers become constants; graph inputs that also have an initializer are constants.
// - Graph inputs keep their order; a dim_param becomes a size symbol of that name (sanitized),
//   a dim with neither value nor param a fresh symbol "<input>_d<i>".
// - Every name from the model (values, nodes, dim params) is sanitized into a unique identifier
//   ("input.1" -> "input_1"); names never reach generated code (coil names its own buffers).
// - Subgraphs computing on constants (Shape -> Gather -> Concat -> Reshape, ...) are folded at
//   import time; what remains is graph ops only. With symbolic dims, Shape and the arithmetic on
//   it compute size expressions ([batch, 64] -> 4*batch) that Reshape and Expand take as targets.
// - Opsets 1 to 6 are read with each op's legacy semantics where coil implements them (binary
//   ops' broadcast/axis, is_test, ...; docs/onnx.md), else reported as unsupported.
// - Any problem is a coil::Error naming the model: a malformed or truncated file, a cyclic or
//   otherwise invalid graph; a valid model coil cannot import is a coil::UnsupportedError: an
//   unsupported dtype or opset, and unsupported ops, which are all listed in one message
//   ("model.onnx: unsupported ops: MatMul (node 'fc1', opset 13), ...").
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "coil/graph.h"
#include "coil/tensor.h"

namespace coil {

struct OnnxImportOptions {
  /// Graph inputs (by their ONNX names) whose values are fixed: they become constants and
  /// leave the coil graph's inputs, so shape arguments that ONNX passes as tensors (Reshape's
  /// shape, Gather's indices, Slice's starts) fold. The conformance runner uses this for the
  /// tests that feed such arguments as inputs.
  std::map<std::string, Tensor> input_values;
};

/// Reads and imports an .onnx file.
Graph import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options = {});

/// Imports a serialized ModelProto; `name` prefixes error messages (usually the file name).
Graph import_onnx_bytes(std::string_view bytes, std::string_view name,
                        const OnnxImportOptions& options = {});

/// Reads a serialized TensorProto file (the input_*.pb / output_*.pb of ONNX test data).
Tensor load_onnx_tensor(const std::filesystem::path& path);

/// The identifier an ONNX name becomes in coil (graph inputs and outputs keep this name,
/// made unique with a suffix "_2", "_3" when two names sanitize alike).
std::string sanitize_onnx_name(std::string_view name);

}  // namespace coil

// ONNX models with ops whose output size depends on values (NonZero, Compress, Unique,
// NonMaxSuppression: onnx_data_dependent.h) or control flow (If, Loop, Scan:
// onnx_control_flow.h, each body a sub-model compiled like a stage), run in stages (docs/onnx.md,
// "Ops whose output size depends on values").
//
// The graph is cut at those ops, once, from its structure: a compiled stage is every node that
// can run with the values known so far (in file order), and each such op is a host stage of its
// own, run by its host kernel once its inputs are known. A compiled stage is an ONNX sub-model
// (the stage's nodes and initializers; its inputs the values it reads from before it, declared
// with the shapes of the call; its outputs the values later stages or the graph read), loaded
// as a coil::OnnxModel, so shape arguments given as values bind as they do there; it is compiled
// per tuple of its input shapes and dtypes, and cached. A later call whose host ops produce the
// same sizes reuses every compiled stage.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "coil/coil.h"

namespace coil {

class OnnxModel;

class StagedOnnxModel {
 public:
  /// Plans the stages of the ModelProto `bytes` (`name` prefixes errors).
  StagedOnnxModel(const std::string& bytes, std::string name, CompileOptions options);
  ~StagedOnnxModel();

  /// Runs on the fed graph inputs, by ONNX name; returns the graph outputs in order.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& given) const;
  /// Compiled sub-models so far (one per stage and tuple of its input shapes).
  int compiled() const;
  /// The plan, for logs and tests: per stage "compiled: A, B" or "host: NonZero 'name'".
  std::vector<std::string> describe() const;

 private:
  struct Stage {
    bool host = false;
    std::vector<int> nodes;            // indices into the graph's nodes
    std::vector<std::string> inputs;   // values read from before the stage (compiled stages)
    std::vector<std::string> outputs;  // values read after it or graph outputs
  };
  onnx::ModelProto model_;
  std::string name_;
  CompileOptions options_;
  std::vector<Stage> stages_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::unique_ptr<OnnxModel>> compiled_;

  int opset_ = 0;  // of the default domain

  const OnnxModel& stage_model(size_t s, const std::vector<Tensor>& inputs) const;
  /// Runs the body `attr` of control-flow node `node` on its formal inputs; the values it reads
  /// from the enclosing graph come from `outer`. Compiled per tuple of input shapes, cached.
  std::vector<Tensor> run_body(int node, const onnx::GraphProto& body, std::string_view attr,
                               const std::vector<Tensor>& formal,
                               const std::function<Tensor(const std::string&)>& outer) const;
};

}  // namespace coil

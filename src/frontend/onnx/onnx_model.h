// ONNX models whose shape-carrying arguments are graph inputs (issue 27; docs/onnx.md,
// "Shape arguments given as inputs").
//
// ONNX passes Reshape's shape, Slice's starts, Pad's pads, Expand's shape, ... as tensors. The
// importer needs them constant (coil compiles shapes in); when a model feeds one from a graph
// input, coil specializes on that input's value, as Inductor specializes on integer inputs:
// the input is bound to the call's value, the model compiled for it, and a later call with the
// same values reuses that compile (the guard is equality of the values); new values compile
// one more variant, cached. Never an error for a value the model accepts.
//
// Which inputs are bound: the candidates are the graph inputs (those without an initializer)
// whose value can shape a graph: integer ones (not bool), one-element ones, and Resize's and
// Upsample's roi/scales/sizes. All of them given are bound for a first import; then each is
// released again if the model imports without it, so that data inputs (token ids, masks)
// stay inputs and a new batch of them never recompiles.
//
// A model with ops whose output size depends on values (NonZero, Compress, Unique,
// NonMaxSuppression) runs in stages: compiled sub-models, those ops on the host between them
// (onnx_staged.h).
//
//   coil::OnnxModel m = coil::OnnxModel::load("model.onnx");
//   auto y = m.run({x, shape});     // the model's graph inputs, in the model's order
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "frontend/onnx/onnx_import.h"

namespace coil {

/// A model imported with some graph inputs bound to values.
struct ValueBoundImport {
  Graph graph;
  /// The ONNX names of the inputs bound to their values (empty when the model imports as is).
  std::vector<std::string> bound;
};

/// Imports the ModelProto `bytes` (`name` prefixes errors); when the import needs an input's
/// value ("... is not a constant"), binds the value inputs among `given` (by ONNX name) as the
/// header says and imports again. An input the import needs and `given` lacks is an error
/// naming it. `bound_only`, when not null, fixes the inputs to bind instead (a later variant of
/// an OnnxModel binds the inputs its first import chose).
ValueBoundImport import_onnx_binding_values(const std::string& bytes, const std::string& name,
                                            const std::map<std::string, Tensor>& given,
                                            const std::vector<std::string>* bound_only = nullptr);

/// The same for the file at `path`.
ValueBoundImport import_onnx_binding_values(const std::filesystem::path& path,
                                            const std::map<std::string, Tensor>& given);

class StagedOnnxModel;

class OnnxModel {
 public:
  /// Reads and imports `path`; compiles it now when it needs no input's value (`options`
  /// may leave sizes unbound: the model is then size-generic), else at the first call.
  static OnnxModel load(const std::filesystem::path& path, const CompileOptions& options = {});
  /// The same for a serialized ModelProto (`name` prefixes errors).
  static OnnxModel from_bytes(std::string bytes, std::string name,
                              const CompileOptions& options = {});

  OnnxModel(OnnxModel&&) noexcept;
  OnnxModel& operator=(OnnxModel&&) noexcept;
  ~OnnxModel();

  /// The model's graph inputs (those without an initializer), by ONNX name, in order: what
  /// run() takes.
  const std::vector<std::string>& input_names() const { return input_names_; }
  /// The inputs whose values select a variant (known after the first call; empty when the
  /// model compiles once for every value).
  std::vector<std::string> value_inputs() const;
  /// Variants compiled so far (one per distinct tuple of the value inputs' values; for a
  /// staged model, one per stage and tuple of its input shapes).
  int variants() const;
  /// The staged model, where the model has ops whose output size depends on values
  /// (onnx_staged.h), else null.
  const StagedOnnxModel* staged() const { return staged_.get(); }

  /// Runs on the graph inputs in input_names() order; returns the outputs in the model's order.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

 private:
  OnnxModel() = default;
  std::string name_, bytes_;
  CompileOptions options_;
  std::vector<std::string> input_names_;
  mutable std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
  mutable bool decided_ = false;            // whether the inputs to bind are known
  mutable std::vector<std::string> bound_;  // ONNX names of the inputs bound by value
  mutable std::map<std::string, std::unique_ptr<CompiledModel>> variants_;  // key: bound values
  std::unique_ptr<StagedOnnxModel> staged_;
};

}  // namespace coil

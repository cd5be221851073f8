// coil's runtime API: load a model that `coil export` wrote and run it, with no compiler, no
// graph and no cache (libcoil_runtime.so, CMake target coil::runtime; docs/deploy.md).
//
//   coil::ExportedModel m = coil::ExportedModel::load("resnet18.coil");
//   std::vector<coil::Tensor> out = m.run({input_tensor});
//
// The compiler's API (coil/coil.h, libcoil.so) includes this header: CompiledModel::export_to
// writes what ExportedModel::load reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coil/dtype.h"
#include "coil/error.h"
#include "coil/tensor.h"

namespace coil {

/// Shape and dtype of one graph input or output, with sizes bound.
struct ValueSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  /// The name in the model it was imported from when `name` had to differ (ONNX's
  /// "onnx::Gemm_0" for input onnx_Gemm_0; Node::source_name); empty otherwise.
  std::string source_name;
};

/// The position in `specs` of the value called `name`, by its name or its source name; nullopt
/// when there is none (value_names() lists them for the message).
std::optional<size_t> find_value(const std::vector<ValueSpec>& specs, std::string_view name);
/// "x, onnx_Gemm_0 (onnx::Gemm_0), y": the values' names for messages.
std::string value_names(const std::vector<ValueSpec>& specs);

/// Sets the OpenMP thread count used by compiled kernels in this process (0 = leave as is).
/// Defaults come from COIL_NUM_THREADS, else OMP_NUM_THREADS, else all cores.
void set_num_threads(int n);

/// What an exported model's manifest says about it (docs/deploy.md, "The artifact").
struct ExportInfo {
  std::string format;        // "coil-export-v1"
  std::string coil_version;  // the coil that exported it ("0.1.0"); the runtime must match
  std::string isa;           // the vector ISA of its code: "avx512_amx", "avx512", "avx2", ...
  std::vector<std::string> cpu_features;  // what the CPU must have ("avx512f", "fma", ...)
  std::vector<std::string> kernels;       // the generated kernels, in call order
  int64_t module_bytes = 0;               // module.so
  int64_t weights_bytes = 0;              // weights.bin: the constants and their packed copies
  int64_t arena_bytes = 0;                // intermediates of one call
  double load_seconds = 0;                // what ExportedModel::load took
};

/// A model exported by `coil export` (CompiledModel::export_to): a directory holding
/// manifest.json, module.so (the generated code) and weights.bin (the weights, already packed
/// for the matmul template). load() checks the manifest's format and coil version, this CPU's
/// features, and the checksums of both files, maps the weights, and loads the module; any
/// mismatch is a coil::Error naming the file and what differs.
class ExportedModel {
 public:
  ExportedModel();
  ~ExportedModel();
  ExportedModel(ExportedModel&&) noexcept;
  ExportedModel& operator=(ExportedModel&&) noexcept;

  static ExportedModel load(const std::filesystem::path& dir);

  /// As CompiledModel's (coil/coil.h): checked inputs (count, dtype, shape; any strides), new
  /// outputs; thread-safe, each call with an arena of its own.
  std::vector<Tensor> run(const std::vector<TensorRef>& inputs) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  /// Runs into caller memory: outputs[i] points at a contiguous buffer of outputs()[i]'s dtype
  /// and shape. Outputs must not overlap the inputs or each other.
  void run_into(const std::vector<TensorRef>& inputs, const std::vector<void*>& outputs) const;

  const std::vector<ValueSpec>& inputs() const;
  const std::vector<ValueSpec>& outputs() const;
  const ExportInfo& info() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// How GpuExportedModel::load sets a GPU model up.
struct GpuLoadOptions {
  int device = 0;  ///< the GPU (CUDA device ordinal)
  /// Capture the whole call (every kernel launch, cuBLAS product and cuDNN convolution) once at
  /// load as a CUDA graph, after one warm-up call, on a stream the model creates, and replay it
  /// with one cuGraphLaunch per call: for launch-bound models (what torch's
  /// mode="reduce-overhead" does). The graph works on the model's own buffers: run() and
  /// run_device() copy the caller's inputs in and the outputs out on the same stream. Needs a
  /// driver with CUDA graphs (CUDA 11.4 or later); a coil::Error says which entry point lacks.
  bool cuda_graph = false;
};

/// A GPU model exported by `coil export MODEL --device cuda -o DIR` (run where the GPU is):
/// its Triton kernels as cubins and its call as a fixed sequence of kernel launches, run through
/// the CUDA driver API (libcuda.so.1, loaded at run time) with no Python, torch or Triton
/// (docs/deploy.md, "GPU ahead of time"). Every buffer is allocated and the weights uploaded at
/// load; a call only launches. Calls of one model run one at a time (a mutex).
class GpuExportedModel {
 public:
  GpuExportedModel();
  ~GpuExportedModel();
  GpuExportedModel(GpuExportedModel&&) noexcept;
  GpuExportedModel& operator=(GpuExportedModel&&) noexcept;

  /// Loads DIR on GPU `device`: a coil::Error when there is no NVIDIA driver, the GPU is of
  /// another compute capability than the one the kernels were compiled for, or a file is wrong.
  static GpuExportedModel load(const std::filesystem::path& dir, int device = 0);
  static GpuExportedModel load(const std::filesystem::path& dir, const GpuLoadOptions& options);

  const std::vector<ValueSpec>& inputs() const;
  const std::vector<ValueSpec>& outputs() const;
  /// The GPU the model was exported on ("NVIDIA H200").
  const std::string& device_name() const;

  /// Host tensors in, host tensors out: set_inputs, launch, get_outputs (synchronous).
  std::vector<Tensor> run(const std::vector<TensorRef>& inputs) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  /// Copies host inputs into the model's own device buffers (checked as ExportedModel's).
  void set_inputs(const std::vector<TensorRef>& inputs) const;
  /// Launches a call on the model's own buffers, on `stream` (a CUstream; null: the default
  /// stream, or with a CUDA graph the model's stream). Asynchronous.
  void launch(void* stream = nullptr) const;
  /// Waits for the GPU, then copies the model's own output buffers to host tensors.
  std::vector<Tensor> get_outputs() const;
  /// Launches a call on caller device memory (CUdeviceptr values): contiguous buffers of the
  /// inputs' and outputs' dtypes and shapes. Asynchronous. With a CUDA graph: device-to-device
  /// copies in, the graph, copies out, on `stream` (null: the model's stream).
  void run_device(const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                  void* stream = nullptr) const;
  void synchronize() const;
  /// Whether calls replay a CUDA graph (GpuLoadOptions::cuda_graph).
  bool uses_cuda_graph() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace coil

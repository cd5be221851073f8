// coil's C++ API: build a graph, compile it, run it.
//
//   coil::Graph g;
//   int x = g.add_input("x", coil::DType::F32, {4, 1024});
//   int y = g.add_node("gelu", {x});
//   g.add_output(y, "y");
//   coil::CompiledModel m = coil::compile(g);
//   std::vector<coil::Tensor> out = m.run({input_tensor});
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coil/dtype.h"
#include "coil/error.h"
#include "coil/graph.h"
#include "coil/runtime.h"
#include "coil/tensor.h"

namespace coil {

struct CompileOptions {
  /// Values of the size symbols of the graph's inputs ("s0" -> 128). A symbol left unbound
  /// makes the model size-generic: it runs inputs of any size, compiling at its first call and
  /// again only for sizes whose code differs (docs/dynamic-shapes.md).
  std::map<std::string, int64_t> sizes;
  /// When set, the generated source, the shared object and report.json are copied here.
  std::filesystem::path output_dir;
  /// With output_dir: also graph.coil, the graph as given in the text format (constants
  /// included: a model's weights make it large, 165 MB for resnet18, so it is written only when
  /// asked; `coil compile --write-graph`).
  bool write_graph = false;
  /// With write_graph: false writes each constant as an input declaration instead of its data
  /// (the structure alone, small, still parseable; `coil compile --graph-without-weights`).
  bool graph_weights = true;
  /// When set (else $COIL_DEBUG_DIR), every stage of the compile is written to a folder of its
  /// own below it, with a standalone repro of each kernel (docs/debugging.md, "The debug
  /// directory"). Nothing else changes.
  std::filesystem::path debug_dir;
  /// The vector instruction set of generated kernels: "avx512_amx", "avx512", "avx2", "neon",
  /// "scalar", or empty for the host's best (COIL_CPU_ISA overrides the default). Named here,
  /// "avx512" is the table's entry without the AVX512-BF16 extension that host detection adds.
  std::string isa;
  /// Fuse computations into kernels (sched/fusion.h). Off: one kernel per computation.
  bool fusion = true;
  /// Store every intermediate instead of computing it inside its consumers (for tests of
  /// memory planning and for debugging: each graph node then has its own buffer).
  bool store_all_intermediates = false;
  /// Time the matmul template against library GEMMs on each matmul's shape and keep the
  /// fastest (driver/autotune.h; cached on disk). Off: the template everywhere, and the
  /// generated code depends on nothing measured. COIL_MATMUL=template|dnnl|openblas forces one.
  bool autotune = true;
  /// How hard to search for the fastest kernels (Inductor's torch.compile modes):
  ///   "default"       decide by heuristics and cached measurements; time only where a choice
  ///                   is open, two candidates, a few short samples each (CPU matmuls), and on the
  ///                   GPU cuBLAS for plain products unless a measured template is known better.
  ///   "max-autotune"  time every candidate on the real shape (CPU matmul template, oneDNN and
  ///                   OpenBLAS; every Triton matmul config), as Inductor's max-autotune does.
  /// With autotune off nothing is timed whatever the mode.
  std::string mode = "default";
  /// Where the generated code runs: "cpu" (C++ kernels, compiled and loaded in-process) or
  /// "cuda" (a Python module of Triton kernels for python/coil_runtime; see
  /// generate_gpu_module: compile() and CompiledModel are CPU-only).
  std::string device = "cpu";
  /// The arithmetic of f32 matmuls and convolutions (torch.set_float32_matmul_precision's
  /// names): "highest", IEEE fp32 on every device and in every library call; or "high", TF32
  /// allowed on NVIDIA GPUs (the Triton template, cuBLAS, cuDNN). x86 CPUs have no TF32: there
  /// both give the same IEEE code. docs/numerics.md has the measured error of each.
  std::string precision = "highest";
  /// A compile cache shared with other machines: "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"
  /// (else $COIL_REMOTE_CACHE; empty: none). Compiled modules, whole-graph entries and
  /// autotuning results are looked up locally, then there, and written to both; entries are
  /// signed with COIL_REMOTE_CACHE_KEY (docs/remote-cache.md). An unreachable Redis costs one
  /// warning and the compile goes on with the local cache.
  std::string remote_cache;
};

/// One generated kernel, for reports and tests.
struct KernelInfo {
  std::string name;
  std::string device = "cpu";
  std::vector<std::string> origins;  // graph nodes, "t3 (add)"
  int64_t bytes_read = 0;            // minimum: each input buffer once
  int64_t bytes_written = 0;
  int64_t ops = 0;  // arithmetic operations (KernelTraffic::ops, sched/scheduler.h), CPU only
};

/// One kernel call of a profile: its start (seconds since the profile's first timed call) and
/// its duration.
struct KernelSpan {
  double start_s = 0;
  double seconds = 0;
};

/// CompiledModel::profile's result: the kernels in call order, and per timed run one span per
/// kernel.
struct KernelProfile {
  std::vector<KernelInfo> kernels;
  std::vector<std::vector<KernelSpan>> runs;
};

/// What compile() did.
struct CompileReport {
  std::vector<KernelInfo> kernels;
  int64_t arena_bytes = 0;
  std::vector<std::pair<std::string, double>> stage_seconds;  // in pipeline order
  double total_seconds = 0;
  bool cache_hit = false;  // the module came from the code cache (nothing compiled)
  /// The whole-graph cache served this compile (driver/model_cache.h): no lowering, no
  /// autotuning, no compiler; stage_seconds then holds model_cache and load only.
  bool model_cache_hit = false;
  /// The remote cache (CompileOptions::remote_cache): "off" when there is none (or it failed
  /// earlier in this process), "hit" when the module (and, with model_cache_hit, the
  /// whole-graph entry) came from it into the local cache, "miss" when it had neither.
  std::string remote_cache = "off";
  std::string cache_key;
  std::filesystem::path so_path;
  std::string source;  // the generated C++ (or, for device "cuda", the Python module)
  std::string device = "cpu";
  std::string precision = "highest";  // CompileOptions::precision

  /// The report as JSON (what `coil compile` writes as report.json).
  std::string to_json() const;
};

class CompiledModel {
 public:
  CompiledModel();
  ~CompiledModel();
  CompiledModel(CompiledModel&&) noexcept;
  CompiledModel& operator=(CompiledModel&&) noexcept;

  /// Runs on `inputs` (one per graph input, in order; any strides) and returns new outputs.
  /// Inputs are checked against the graph: count, dtype and shape (coil::Error naming the input).
  /// Thread-safe: threads may run one model at once, each call with an arena of its own (the
  /// model keeps as many as the most calls at once) and its own record of run-time check
  /// failures (a bad gather index fails only the call that passed it).
  std::vector<Tensor> run(const std::vector<TensorRef>& inputs) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  /// Runs into caller-provided contiguous outputs (benchmarks reuse them across calls).
  void run_into(const std::vector<TensorRef>& inputs, const std::vector<Tensor>& outputs) const;
  /// Runs into caller memory: outputs[i] points at a contiguous (row-major) buffer of
  /// outputs()[i]'s dtype and shape, which cannot be checked here (the C ABI, include/coil/
  /// coil_c.h, checks its tensors' types before); null only for an output without elements.
  /// Outputs must not overlap the inputs or each other. The Tensor overload delegates to it.
  void run_into(const std::vector<TensorRef>& inputs, const std::vector<void*>& outputs) const;

  /// The graph's inputs and outputs; in a size-generic model -1 marks a symbolic size.
  const std::vector<ValueSpec>& inputs() const;
  const std::vector<ValueSpec>& outputs() const;
  /// What compile() did; a size-generic model's: the last compile of one of its variants
  /// (a coil::Error before its first call).
  const CompileReport& report() const;
  /// Whether some input size was left unbound (CompileOptions::sizes): the model then compiles
  /// per call's sizes as needed (docs/dynamic-shapes.md).
  bool size_generic() const;
  /// A size-generic model's compiles so far: size tuples seen (one whose variant was dropped
  /// from the 4,096 most recent sizes and comes back counts again), distinct modules among their
  /// variants, modules this process compiled with the C++ compiler (code cache misses),
  /// variants compiled specialized to their sizes (what the size-generic pipeline cannot do
  /// yet), front halves of the pipeline run (code generated; a size that passes an earlier
  /// module's guards needs none), and modules with explicit guards (the others serve sizes
  /// that print their source). All 0 for a model with bound sizes.
  struct SizeStats {
    int sizes = 0, modules = 0, compiled = 0, specialized = 0, generated = 0, guarded = 0;
  };
  SizeStats size_stats() const;
  /// For a model compiled with a debug directory (CompileOptions::debug_dir): runs it once on
  /// `inputs`, kernel by kernel, and saves what each kernel reads and writes into its
  /// standalone repro (DIR/graph-*/kernels/<kernel>/data/), so that the repro's run.sh checks
  /// the kernel against this call. A user error without a debug directory.
  void save_kernel_values(const std::vector<TensorRef>& inputs) const;
  /// Times each kernel alone: `warmup` untimed calls of the whole model, then `runs` timed
  /// ones, each calling the kernels one by one in order (as the generated wrapper does) with
  /// a clock read around each kernel. `coil bench --profile` prints and traces it.
  KernelProfile profile(const std::vector<TensorRef>& inputs, int runs, int warmup = 1) const;
  /// Writes the model as a directory that ExportedModel::load (coil/runtime.h, libcoil_runtime)
  /// runs with no compiler, graph or cache: manifest.json, module.so and weights.bin
  /// (docs/deploy.md, "The artifact"). `coil export MODEL -o DIR`. An existing directory's
  /// files of those names are replaced.
  void export_to(const std::filesystem::path& dir) const;

 private:
  friend CompiledModel compile(const Graph& graph, const CompileOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Compiles `graph` for the CPU: decompose, lower, schedule, generate C++, compile (through
/// the disk cache), load.
CompiledModel compile(const Graph& graph, const CompileOptions& options = {});

/// Generates the GPU module of `graph` (options.device must be "cuda"): Triton kernels and the
/// Python wrapper that launches them through python/coil_runtime (docs/architecture.md, "GPU
/// code generation"). Nothing is compiled or run here. With options.output_dir set, writes
/// module.py and report.json there (graph.coil with write_graph). The report's source is the
/// module.
CompileReport generate_gpu_module(const Graph& graph, const CompileOptions& options);

}  // namespace coil

// CompiledModel: compile() runs the pipeline (driver/pipeline.cpp), builds the C++ module
// through the code cache, loads it, packs its constants, and runs it.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "codegen/cpp/cpp_module.h"
#include "coil/coil.h"
#include "driver/debug_dir.h"
#include "driver/dynamic_model.h"
#include "driver/kernel_repro.h"
#include "driver/model_cache.h"
#include "driver/module_build.h"
#include "driver/pipeline.h"
#include "graph/text_format.h"
#include "ir/loop_extents.h"
#include "runtime/artifact.h"
#include "runtime/code_cache.h"
#include "runtime/host_cpu.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "runtime/model_runner.h"
#include "runtime/remote_cache.h"
#include "runtime/toolchain.h"
#include "sched/scheduler.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"
#include "support/progress.h"
#include "sym/size_hints.h"

namespace coil {

struct CompiledModel::Impl {
  std::unique_ptr<ModelRunner> runner;  // the loaded module, its weights and arenas
  std::vector<std::shared_ptr<const Tensor>> constants;  // what runner's constant pointers hold
  std::string isa;                                       // IsaInfo::name of the module's code
  std::vector<std::string> cpu_features;                 // what a CPU running it needs (export_to)
  CompileReport report;
  KernelCallPlan kernel_calls;       // the kernels one by one (profile, save_kernel_values)
  std::filesystem::path debug_path;  // the graph's debug directory, if any
  /// A size-generic model (driver/dynamic_model.h): set instead of `runner`.
  std::unique_ptr<DynamicModel> dynamic;
};

CompiledModel::CompiledModel() = default;
CompiledModel::~CompiledModel() = default;
CompiledModel::CompiledModel(CompiledModel&&) noexcept = default;
CompiledModel& CompiledModel::operator=(CompiledModel&&) noexcept = default;

const std::vector<ValueSpec>& CompiledModel::inputs() const {
  return impl_->dynamic ? impl_->dynamic->inputs() : impl_->runner->inputs();
}
const std::vector<ValueSpec>& CompiledModel::outputs() const {
  return impl_->dynamic ? impl_->dynamic->outputs() : impl_->runner->outputs();
}
const CompileReport& CompiledModel::report() const {
  return impl_->dynamic ? impl_->dynamic->last_report() : impl_->report;
}
bool CompiledModel::size_generic() const {
  return impl_ && impl_->dynamic;
}
CompiledModel::SizeStats CompiledModel::size_stats() const {
  if (!size_generic()) return {};
  return impl_->dynamic->stats();
}

namespace {

std::vector<int64_t> bound_shape(const Shape& s) {
  auto v = static_sizes(s);
  COIL_ASSERT(v.has_value(), "shape {} is not bound", shape_str(s));
  return *v;
}

}  // namespace

std::string CompileReport::to_json() const {
  nlohmann::ordered_json j;
  j["kernels"] = nlohmann::json::array();
  for (const auto& k : kernels) {
    j["kernels"].push_back({{"name", k.name},
                            {"device", k.device},
                            {"origins", k.origins},
                            {"bytes_read", k.bytes_read},
                            {"bytes_written", k.bytes_written},
                            {"ops", k.ops}});
  }
  j["device"] = device;
  j["precision"] = precision;
  j["arena_bytes"] = arena_bytes;
  nlohmann::ordered_json stages;
  for (const auto& [name, s] : stage_seconds) stages[name] = s;
  j["compile_seconds"] = stages;
  j["compile_total_seconds"] = total_seconds;
  j["cache"] = cache_hit ? "hit" : "miss";
  j["model_cache"] = model_cache_hit ? "hit" : "miss";
  j["remote_cache"] = remote_cache;
  j["cache_key"] = cache_key;
  j["shared_object"] = so_path.string();
  return j.dump(2) + "\n";
}

namespace {

// What both paths of compile() do once the module is known: load it, pack its constants, and
// give the model its inputs, outputs, kernel call plan and arena. (A template so that it can
// take the private CompiledModel::Impl without naming it.)
template <typename Impl>
void load_module(Impl& impl, const CompileResult& built, std::vector<ValueSpec> inputs,
                 std::vector<ValueSpec> outputs, std::vector<RunCheck> run_checks,
                 std::vector<std::shared_ptr<const Tensor>> constants, KernelCallPlan kernel_calls,
                 int64_t arena_bytes) {
  impl.constants = std::move(constants);
  ModelRunner::Parts parts;
  parts.library = SharedLibrary::open(built.so_path);
  parts.inputs = std::move(inputs);
  parts.outputs = std::move(outputs);
  parts.run_checks = std::move(run_checks);
  parts.arena_bytes = arena_bytes;
  for (const auto& c : impl.constants) parts.constants.push_back(c->data());
  impl.runner = std::make_unique<ModelRunner>(std::move(parts));
  // The kernels one by one (profile, save_kernel_values) and in the report: one traffic count.
  impl.kernel_calls = std::move(kernel_calls);
  CompileReport& report = impl.report;
  for (const KernelCallPlan::Kernel& k : impl.kernel_calls.kernels)
    report.kernels.push_back({k.name, "cpu", k.origins, k.bytes_read, k.bytes_written, k.ops});
  report.arena_bytes = arena_bytes;
  report.cache_hit = built.cache_hit;
  if (report.remote_cache != "off") report.remote_cache = built.remote_hit ? "hit" : "miss";
  report.cache_key = built.key;
  report.so_path = built.so_path;
}

}  // namespace

void write_output_dir(const Graph& graph, const CompileOptions& options,
                      const CompileReport& report) {
  if (options.output_dir.empty()) return;
  namespace fs = std::filesystem;
  fs::create_directories(options.output_dir);
  std::ofstream(options.output_dir / "module.cpp") << report.source;
  fs::copy_file(report.so_path, options.output_dir / "module.so",
                fs::copy_options::overwrite_existing);
  std::ofstream(options.output_dir / "report.json") << report.to_json();
  if (options.write_graph)
    std::ofstream(options.output_dir / "graph.coil")
        << (options.graph_weights ? to_text(graph) : to_text_without_weights(graph));
}

std::pair<CompileFlags, CompileResult> build_module(const CppModule& module,
                                                    const CompileOptions& options) {
  const IsaInfo& isa = target_isa(options);
  COIL_USER_CHECK(cpu_supports(isa), "isa {}: this CPU cannot run it", isa.name);
  CompileFlags flags = module_compile_flags(isa);
  if (module.uses_extern_libraries)
    for (const std::string& f : extern_link_flags()) flags.extra.push_back(f);
  std::vector<std::string> units =
      split_translation_units(module, translation_unit_count(module, compile_threads()));
  progress_note(fmt::format("compiling {} kernels ({}, {} translation unit{})",
                            module.kernels.size(), Toolchain::get().cxx, units.size(),
                            units.size() == 1 ? "" : "s"));
  CompileResult built = compile_cached(units, flags);
  return {std::move(flags), std::move(built)};
}

CompileFlags finish_size_variant(const Graph& graph, const CompileOptions& options,
                                 const GeneratedProgram& gen, bool static_shapes, StageTimer& timer,
                                 SizeVariantBuild& out, DebugDir* debug,
                                 const std::map<std::string, std::string>& extra) {
  auto [flags, built] = build_module(gen.module, options);
  out.built = std::move(built);
  timer.mark("compile");
  const Graph& g = gen.graph;
  ModelRunner::Parts& parts = out.parts;
  auto shape_of = [&](const Node& n) {
    return static_shapes ? static_extents(n.type.shape) : std::vector<int64_t>{};
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    parts.inputs.push_back(
        {n.name, n.type.dtype, shape_of(n), graph.node(graph.inputs()[i]).source_name});
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Node& n = g.node(g.outputs()[i].node);
    parts.outputs.push_back(
        {g.outputs()[i].name, n.type.dtype, shape_of(n), graph.outputs()[i].source_name});
  }
  parts.run_checks = gen.program.run_checks;
  out.constants = gen.program.constants;
  for (const auto& c : out.constants) parts.constants.push_back(c->data());
  CompileReport& report = out.report;
  KernelCallPlan kernel_calls = kernel_call_plan(gen.program, gen.schedule, gen.module);
  for (const KernelCallPlan::Kernel& k : kernel_calls.kernels)
    report.kernels.push_back({k.name, "cpu", k.origins, k.bytes_read, k.bytes_written, k.ops});
  report.arena_bytes = parts.arena_bytes;
  report.cache_hit = out.built.cache_hit;
  report.cache_key = out.built.key;
  report.so_path = out.built.so_path;
  report.source = gen.module.source;
  timer.finish();
  write_output_dir(graph, options, report);
  if (debug) {
    debug->write("module.cpp", gen.module.source);
    debug->write("compile_command.txt", out.built.command + "\n");
    for (const auto& [name, text] : extra) debug->write(name, text);
    debug->write("report.json", report.to_json());
    debug->write_logs();
  }
  return flags;
}

SizeVariantBuild compile_size_variant(const Graph& graph, const CompileOptions& options,
                                      const std::vector<std::string>& symbols,
                                      const std::vector<int64_t>& sizes) {
  RemoteCacheScope remote_scope(options.remote_cache);
  ProgressScope progress;
  SizeVariantBuild out;
  CompileReport& report = out.report;
  report.precision = options.precision;
  StageTimer timer(report);
  target_isa(options);
  std::map<sym::Expr, int64_t> hints;
  for (size_t i = 0; i < symbols.size(); ++i)
    hints[sym::make_symbol(size_symbol_name(static_cast<int>(i)))] = sizes[i];
  sym::SizeHintScope hint_scope(hints);
  SizeGeneric size_generic{symbols};
  // Inductor's 0/1 specialization: a size of 0 or 1 is bound (a dim of 1 broadcasts, a dim of
  // 0 empties the tensor, and index arithmetic simplifies differently), the others stay
  // symbolic.
  CompileOptions generic_options = options;
  for (size_t i = 0; i < symbols.size(); ++i)
    if (sizes[i] <= 1) generic_options.sizes[symbols[i]] = sizes[i];
  // The debug directory of this variant: one folder per variant, named by its sizes.
  std::string variant;
  for (size_t i = 0; i < symbols.size(); ++i)
    variant += fmt::format("{}{}={}", i ? ", " : "", symbols[i], sizes[i]);
  std::unique_ptr<DebugDir> debug =
      DebugDir::open(graph, generic_options, variant + " (a size-generic model's variant)");
  GeneratedProgram gen;
  try {
    gen = generate_program(graph, generic_options, &timer, &size_generic);
    out.size_generic = true;
  } catch (const std::exception& e) {
    // What the size-generic pipeline cannot do yet: these sizes compile specialized.
    CompileOptions bound = options;
    for (size_t i = 0; i < symbols.size(); ++i) bound.sizes[symbols[i]] = sizes[i];
    COIL_LOG(guards, "the size-generic pipeline failed ({}); compiling for these sizes only",
             e.what());
    gen = generate_program(graph, bound, &timer);
  }
  ModelRunner::Parts& parts = out.parts;
  parts.arena_bytes = gen.schedule.memory.arena_bytes;
  parts.sized = out.size_generic;
  if (out.size_generic) {
    parts.sizes = sizes;
    parts.arena_offsets = arena_offsets(gen.program, gen.schedule);
  }
  // A size-generic model's output directory holds its latest variant (`coil compile` without
  // --size compiles one, at representative_sizes()).
  CompileFlags flags =
      finish_size_variant(graph, options, gen, /*static_shapes=*/true, timer, out, debug.get());
  // Standalone kernel repros need every size bound (their main() allocates the buffers).
  if (debug && !out.size_generic)
    write_cpu_kernel_repros(*debug, gen.program, gen.schedule, gen.module, flags);
  return out;
}

CompiledModel compile(const Graph& graph, const CompileOptions& options) {
  COIL_USER_CHECK(options.device == "cpu",
                  "device '{}' needs a GPU: generate the module with `coil compile MODEL --device "
                  "cuda -o DIR` (coil::generate_gpu_module), then run DIR/module.py through "
                  "python/coil_runtime on a CUDA machine",
                  options.device);
  check_mode(options.mode);
  init_threads_from_env();
  // Sizes left unbound: a size-generic model, compiled per call's sizes as needed.
  if (std::vector<std::string> symbols = unbound_size_symbols(graph, options.sizes);
      !symbols.empty()) {
    auto impl = std::make_unique<CompiledModel::Impl>();
    impl->dynamic = std::make_unique<DynamicModel>(graph, options, std::move(symbols));
    CompiledModel m;
    m.impl_ = std::move(impl);
    return m;
  }
  // This compile's remote cache (runtime/remote_cache.h), for every cache lookup below.
  RemoteCacheScope remote_scope(options.remote_cache);
  ProgressScope progress;
  auto impl = std::make_unique<CompiledModel::Impl>();
  CompileReport& report = impl->report;
  report.precision = options.precision;
  if (RemoteCache::current()) report.remote_cache = "miss";
  StageTimer timer(report);

  // The warm path (driver/model_cache.h): the same graph, options and machine as an earlier
  // compile load its module and decisions, with no lowering, autotuning or compiler.
  std::optional<std::string> model_key = model_cache_key(graph, options);
  if (model_key) {
    std::optional<ModelCacheEntry> entry = load_model_cache_entry(*model_key);
    std::optional<CompileResult> built;
    std::vector<std::shared_ptr<const Tensor>> given = graph_constants(graph);
    bool constants_ok = true;
    if (entry) {
      for (int c : entry->constant_nodes)
        constants_ok = constants_ok && c >= 0 && static_cast<size_t>(c) < given.size();
      built = find_cached_module(entry->code_key);
    }
    bool cpu_ok = entry && std::all_of(entry->cpu_features.begin(), entry->cpu_features.end(),
                                       [](const std::string& f) { return cpu_has_feature(f); });
    if (entry && built && constants_ok && cpu_ok) {
      timer.mark("model_cache");
      COIL_LOG(cache, "model hit {} (module {})", *model_key, entry->code_key);
      std::vector<std::shared_ptr<const Tensor>> constants;
      for (int c : entry->constant_nodes) constants.push_back(given[static_cast<size_t>(c)]);
      load_module(*impl, *built, std::move(entry->inputs), std::move(entry->outputs),
                  std::move(entry->run_checks), std::move(constants),
                  std::move(entry->kernel_calls), entry->arena_bytes);
      impl->isa = entry->isa;
      impl->cpu_features = std::move(entry->cpu_features);
      report.source = std::move(entry->source);
      report.model_cache_hit = true;
      timer.mark("load");
      timer.finish();
      write_output_dir(graph, options, report);
      CompiledModel m;
      m.impl_ = std::move(impl);
      return m;
    }
    timer.mark("model_cache");
  }

  std::unique_ptr<DebugDir> debug = DebugDir::open(graph, options);
  // The target ISA first: its first detection on a machine runs a probe (seconds, once), which
  // would otherwise be billed to code generation.
  target_isa(options);
  timer.mark("isa");
  GeneratedProgram gen = generate_program(graph, options, &timer);
  const Graph& g = gen.graph;
  const IrProgram& program = gen.program;
  const Schedule& schedule = gen.schedule;
  const CppModule& module = gen.module;

  const IsaInfo& isa = target_isa(options);
  auto [flags, built] = build_module(module, options);
  timer.mark("compile");

  KernelCallPlan kernel_calls = kernel_call_plan(program, schedule, module);
  // The source names come from the graph as given: the pipeline's copies keep the order of
  // inputs and outputs, not the frontend's names.
  COIL_ASSERT(
      g.inputs().size() == graph.inputs().size() && g.outputs().size() == graph.outputs().size(),
      "compile: the pipeline changed the graph's inputs or outputs");
  std::vector<ValueSpec> inputs, outputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    inputs.push_back({n.name, n.type.dtype, bound_shape(n.type.shape),
                      graph.node(graph.inputs()[i]).source_name});
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const GraphOutput& o = g.outputs()[i];
    const Node& n = g.node(o.node);
    outputs.push_back(
        {o.name, n.type.dtype, bound_shape(n.type.shape), graph.outputs()[i].source_name});
  }
  if (model_key) {
    // The decisions of this compile, for the next process's warm path (only when every
    // constant of the module is one of the graph's: otherwise its data would have to be kept).
    if (auto positions = constant_positions(graph, program.constants)) {
      ModelCacheEntry e{built.key,
                        isa.name,
                        isa.cpu_features,
                        compiler_fingerprint(),
                        inputs,
                        outputs,
                        program.run_checks,
                        kernel_calls,
                        schedule.memory.arena_bytes,
                        *positions,
                        module.source};
      store_model_cache_entry(*model_key, e);
    }
  }
  load_module(*impl, built, std::move(inputs), std::move(outputs), program.run_checks,
              program.constants, std::move(kernel_calls), schedule.memory.arena_bytes);
  impl->isa = isa.name;
  impl->cpu_features = isa.cpu_features;
  report.source = module.source;
  timer.mark("load");
  timer.finish();

  write_output_dir(graph, options, report);
  if (debug) {
    debug->write("module.cpp", module.source);
    debug->write("compile_command.txt", built.command + "\n");
    debug->write("report.json", report.to_json());
    debug->write_logs();
    write_cpu_kernel_repros(*debug, program, schedule, module, flags);
    impl->debug_path = debug->path();
  }

  CompiledModel m;
  m.impl_ = std::move(impl);
  return m;
}

void CompiledModel::run_into(const std::vector<TensorRef>& inputs,
                             const std::vector<Tensor>& outputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  std::shared_ptr<const SizeVariant> variant;  // held while `specs` is read
  if (impl_->dynamic) variant = impl_->dynamic->variant(impl_->dynamic->bind_sizes(inputs));
  const std::vector<ValueSpec>& specs =
      variant ? variant->runner->outputs() : impl_->runner->outputs();
  COIL_USER_CHECK(outputs.size() == specs.size(), "the model has {} outputs, got {}", specs.size(),
                  outputs.size());
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ValueSpec& s = specs[i];
    COIL_USER_CHECK(outputs[i].dtype() == s.dtype && outputs[i].shape() == s.shape &&
                        outputs[i].is_contiguous(),
                    "output {}: expected a contiguous {}{} tensor", s.name, dtype_name(s.dtype),
                    shape_str(s.shape));
    out_ptrs.push_back(outputs[i].data());
  }
  run_into(inputs, out_ptrs);
}

void CompiledModel::run_into(const std::vector<TensorRef>& inputs,
                             const std::vector<void*>& outputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  if (impl_->dynamic) return impl_->dynamic->run_into(inputs, outputs);
  impl_->runner->run(inputs, outputs);
}

/// Runs `use` with the model's kernels bound to `inputs`, fresh outputs and an arena of its own.
/// (A template so that it can take the private CompiledModel::Impl without naming it.)
template <typename Impl, typename Use>
static void with_kernels(const Impl& impl, const std::vector<TensorRef>& inputs, Use use) {
  COIL_USER_CHECK(impl.runner != nullptr,
                  "a size-generic model runs its kernels one by one only at bound sizes: "
                  "compile with CompileOptions::sizes (--size) for profiles and kernel values");
  const ModelRunner& runner = *impl.runner;
  ModuleBindings b;
  std::vector<const void*> in_ptrs;
  std::vector<Tensor> keep = contiguous_inputs(runner.inputs(), inputs, in_ptrs);
  for (const void* p : in_ptrs) b.inputs.push_back(const_cast<void*>(p));
  std::vector<Tensor> outs;
  for (const ValueSpec& s : runner.outputs()) {
    outs.push_back(Tensor::empty(s.dtype, s.shape));
    b.outputs.push_back(outs.back().data());
  }
  b.constants.assign(runner.constants(), runner.constants() + runner.num_constants());
  ModelRunner::ArenaLease arena(runner);
  b.arena = arena.data();
  b.packed = runner.packed();
  use(KernelCaller(impl.kernel_calls, runner.library(), b));
}

void CompiledModel::save_kernel_values(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "save_kernel_values: the model is empty");
  COIL_USER_CHECK(!impl_->debug_path.empty(),
                  "save_kernel_values: the model was compiled without a debug directory "
                  "(CompileOptions::debug_dir, COIL_DEBUG_DIR or --debug-dir)");
  with_kernels(*impl_, inputs,
               [&](const KernelCaller& k) { coil::save_kernel_values(k, impl_->debug_path); });
}

KernelProfile CompiledModel::profile(const std::vector<TensorRef>& inputs, int runs,
                                     int warmup) const {
  COIL_USER_CHECK(impl_ != nullptr, "profile: the model is empty");
  COIL_USER_CHECK(runs > 0 && warmup >= 0,
                  "profile: runs {} must be positive, warmup {} not negative", runs, warmup);
  KernelProfile p;
  for (const auto& k : impl_->kernel_calls.kernels) {
    p.kernels.push_back({k.name, "cpu", k.origins, k.bytes_read, k.bytes_written, k.ops});
  }
  with_kernels(*impl_, inputs, [&](const KernelCaller& kernels) {
    using clock = std::chrono::steady_clock;
    for (int i = 0; i < warmup; ++i)
      for (size_t k = 0; k < kernels.size(); ++k) kernels.call(k);
    const auto start = clock::now();
    auto since = [&](clock::time_point t) {
      return std::chrono::duration<double>(t - start).count();
    };
    for (int i = 0; i < runs; ++i) {
      std::vector<KernelSpan> spans;
      for (size_t k = 0; k < kernels.size(); ++k) {
        auto t0 = clock::now();
        kernels.call(k);
        auto t1 = clock::now();
        spans.push_back({since(t0), std::chrono::duration<double>(t1 - t0).count()});
      }
      p.runs.push_back(std::move(spans));
    }
  });
  return p;
}

void CompiledModel::export_to(const std::filesystem::path& dir) const {
  COIL_USER_CHECK(impl_ != nullptr, "export: the model is empty");
  COIL_USER_CHECK(!impl_->dynamic,
                  "export: the model is size-generic ({}); exported models have bound sizes for "
                  "now: compile with CompileOptions::sizes (--size)",
                  fmt::join(impl_->dynamic->symbols(), ", "));
  const ModelRunner& runner = *impl_->runner;
  ExportManifest m;
  m.info.isa = impl_->isa;
  m.info.cpu_features = impl_->cpu_features;
  for (const KernelCallPlan::Kernel& k : impl_->kernel_calls.kernels)
    m.info.kernels.push_back(k.name);
  m.info.arena_bytes = runner.arena_bytes();
  m.inputs = runner.inputs();
  m.outputs = runner.outputs();
  m.run_checks = runner.run_checks();
  std::vector<WeightsSource> constants;
  for (const auto& c : impl_->constants) {
    COIL_ASSERT(c->is_contiguous(), "export: a module constant is not contiguous");
    constants.push_back({c->data(), c->numel() * dtype_size(c->dtype())});
  }
  write_export(dir, std::move(m), impl_->report.so_path, constants,
               {runner.packed(), runner.packed_bytes()});
}

std::vector<Tensor> CompiledModel::run(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  if (impl_->dynamic) return impl_->dynamic->run(inputs);
  std::vector<Tensor> outs;
  for (const ValueSpec& s : outputs()) outs.push_back(Tensor::empty(s.dtype, s.shape));
  run_into(inputs, outs);
  return outs;
}

std::vector<Tensor> CompiledModel::run(const std::vector<Tensor>& inputs) const {
  std::vector<TensorRef> refs;
  for (const Tensor& t : inputs) refs.push_back(t.ref());
  return run(refs);
}

}  // namespace coil

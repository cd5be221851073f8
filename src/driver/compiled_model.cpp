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
#include "driver/kernel_repro.h"
#include "driver/model_cache.h"
#include "driver/pipeline.h"
#include "graph/text_format.h"
#include "runtime/code_cache.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "runtime/remote_cache.h"
#include "runtime/toolchain.h"
#include "sched/scheduler.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"
#include "support/progress.h"

namespace coil {

struct CompiledModel::Impl {
  std::shared_ptr<SharedLibrary> library;
  GraphRunFn run = nullptr;
  GraphRunErrorFn run_error = nullptr;  // modules with run-time checks
  std::vector<RunCheck> run_checks;     // IrProgram::run_checks
  std::vector<ValueSpec> inputs, outputs;
  std::vector<std::shared_ptr<const Tensor>> constants;
  std::vector<void*> constant_ptrs;
  CompileReport report;
  // Arenas (intermediate buffers) of calls: each call takes one for itself, so that threads
  // calling one model run at once. A finished call gives its arena back; a call finding none
  // free allocates one more, so there are as many as the most concurrent calls so far.
  int64_t arena_bytes = 1;
  mutable std::mutex arena_pool_mutex;  // held only to take or give back an arena
  mutable std::vector<Tensor> free_arenas;
  Tensor packed;                     // constants packed once at load (coil_graph_pack)
  KernelCallPlan kernel_calls;       // the kernels one by one (profile, save_kernel_values)
  std::filesystem::path debug_path;  // the graph's debug directory, if any
};

CompiledModel::CompiledModel() = default;
CompiledModel::~CompiledModel() = default;
CompiledModel::CompiledModel(CompiledModel&&) noexcept = default;
CompiledModel& CompiledModel::operator=(CompiledModel&&) noexcept = default;

const std::vector<ValueSpec>& CompiledModel::inputs() const {
  return impl_->inputs;
}
const std::vector<ValueSpec>& CompiledModel::outputs() const {
  return impl_->outputs;
}
const CompileReport& CompiledModel::report() const {
  return impl_->report;
}

namespace {

std::vector<int64_t> bound_shape(const Shape& s) {
  auto v = static_sizes(s);
  COIL_ASSERT(v.has_value(), "shape {} is not bound", shape_str(s));
  return *v;
}

void init_threads_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::string v = env(EnvVar::num_threads);
    if (!v.empty()) {
      int n = std::atoi(v.c_str());
      if (n > 0)
        omp_set_num_threads(n);
      else
        warn(fmt::format("COIL_NUM_THREADS='{}' is not a positive integer; ignored", v));
    }
    // Otherwise OpenMP reads OMP_NUM_THREADS itself.
  });
}

}  // namespace

void set_num_threads(int n) {
  init_threads_from_env();
  if (n > 0) omp_set_num_threads(n);
}

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
void load_module(Impl& impl, const CompileResult& built, std::vector<RunCheck> run_checks,
                 std::vector<std::shared_ptr<const Tensor>> constants, KernelCallPlan kernel_calls,
                 int64_t arena_bytes) {
  impl.library = SharedLibrary::open(built.so_path);
  impl.run = impl.library->template symbol_as<GraphRunFn>(kGraphRunSymbol);
  impl.run_checks = std::move(run_checks);
  // Run-time checks: each run records its first failure itself (cpp_module.cpp), read back here
  // on the calling thread right after the run.
  if (!impl.run_checks.empty())
    impl.run_error = impl.library->template symbol_as<GraphRunErrorFn>(kGraphRunErrorSymbol);
  impl.constants = std::move(constants);
  for (const auto& c : impl.constants) impl.constant_ptrs.push_back(c->data());
  // Weights that templates read packed are packed here, once.
  int64_t packed_bytes =
      impl.library->template symbol_as<GraphPackedBytesFn>(kGraphPackedBytesSymbol)();
  impl.packed = Tensor::empty(DType::U8, {std::max<int64_t>(packed_bytes, 64)});
  impl.library->template symbol_as<GraphPackFn>(kGraphPackSymbol)(
      impl.constant_ptrs.data(), static_cast<char*>(impl.packed.data()));
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
  impl.arena_bytes = std::max<int64_t>(arena_bytes, 1);
  impl.free_arenas.push_back(Tensor::empty(DType::U8, {impl.arena_bytes}));
}

namespace {

/// One call's arena, taken from the model's pool and given back when the call ends.
template <typename Impl>
class ArenaLease {
 public:
  explicit ArenaLease(const Impl& impl) : impl_(impl) {
    {
      std::lock_guard<std::mutex> lock(impl_.arena_pool_mutex);
      if (!impl_.free_arenas.empty()) {
        arena_ = std::move(impl_.free_arenas.back());
        impl_.free_arenas.pop_back();
      }
    }
    if (!arena_.defined()) arena_ = Tensor::empty(DType::U8, {impl_.arena_bytes});
  }
  ~ArenaLease() {
    std::lock_guard<std::mutex> lock(impl_.arena_pool_mutex);
    impl_.free_arenas.push_back(std::move(arena_));
  }
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;
  char* data() { return static_cast<char*>(arena_.data()); }

 private:
  const Impl& impl_;
  Tensor arena_;
};

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

}  // namespace

std::optional<size_t> find_value(const std::vector<ValueSpec>& specs, std::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return i;
  for (size_t i = 0; i < specs.size(); ++i)
    if (!specs[i].source_name.empty() && specs[i].source_name == name) return i;
  return std::nullopt;
}

std::string value_names(const std::vector<ValueSpec>& specs) {
  std::string out;
  for (const ValueSpec& s : specs) {
    if (!out.empty()) out += ", ";
    out += s.name;
    if (!s.source_name.empty()) out += " (" + s.source_name + ")";
  }
  return out.empty() ? "none" : out;
}

CompiledModel compile(const Graph& graph, const CompileOptions& options) {
  COIL_USER_CHECK(options.device == "cpu",
                  "device '{}' needs a GPU: generate the module with `coil compile MODEL --device "
                  "cuda -o DIR` (coil::generate_gpu_module), then run DIR/module.py through "
                  "python/coil_runtime on a CUDA machine",
                  options.device);
  check_mode(options.mode);
  init_threads_from_env();
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
    if (entry && built && constants_ok && cpu_supports(isa_by_name(entry->isa))) {
      timer.mark("model_cache");
      COIL_LOG(cache, "model hit {} (module {})", *model_key, entry->code_key);
      std::vector<std::shared_ptr<const Tensor>> constants;
      for (int c : entry->constant_nodes) constants.push_back(given[static_cast<size_t>(c)]);
      load_module(*impl, *built, std::move(entry->run_checks), std::move(constants),
                  std::move(entry->kernel_calls), entry->arena_bytes);
      impl->inputs = std::move(entry->inputs);
      report.source = std::move(entry->source);
      impl->outputs = std::move(entry->outputs);
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
  COIL_USER_CHECK(cpu_supports(isa), "isa {}: this CPU cannot run it", isa.name);
  CompileFlags flags = module_compile_flags(isa);
  if (module.uses_extern_libraries)
    for (const std::string& f : extern_link_flags()) flags.extra.push_back(f);
  // A large module compiles as several translation units at once (one g++ per core).
  std::vector<std::string> units =
      split_translation_units(module, translation_unit_count(module, compile_threads()));
  progress_note(fmt::format("compiling {} kernels ({}, {} translation unit{})",
                            module.kernels.size(), Toolchain::get().cxx, units.size(),
                            units.size() == 1 ? "" : "s"));
  CompileResult built = compile_cached(units, flags);
  timer.mark("compile");

  KernelCallPlan kernel_calls = kernel_call_plan(program, schedule, module);
  // The source names come from the graph as given: the pipeline's copies keep the order of
  // inputs and outputs, not the frontend's names.
  COIL_ASSERT(
      g.inputs().size() == graph.inputs().size() && g.outputs().size() == graph.outputs().size(),
      "compile: the pipeline changed the graph's inputs or outputs");
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    impl->inputs.push_back({n.name, n.type.dtype, bound_shape(n.type.shape),
                            graph.node(graph.inputs()[i]).source_name});
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const GraphOutput& o = g.outputs()[i];
    const Node& n = g.node(o.node);
    impl->outputs.push_back(
        {o.name, n.type.dtype, bound_shape(n.type.shape), graph.outputs()[i].source_name});
  }
  if (model_key) {
    // The decisions of this compile, for the next process's warm path (only when every
    // constant of the module is one of the graph's: otherwise its data would have to be kept).
    if (auto positions = constant_positions(graph, program.constants)) {
      ModelCacheEntry e{
          built.key,     isa.name,           compiler_fingerprint(), impl->inputs,
          impl->outputs, program.run_checks, kernel_calls,           schedule.memory.arena_bytes,
          *positions,    module.source};
      store_model_cache_entry(*model_key, e);
    }
  }
  load_module(*impl, built, program.run_checks, program.constants, std::move(kernel_calls),
              schedule.memory.arena_bytes);
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

static std::vector<Tensor> keep_contiguous(const std::vector<ValueSpec>& specs,
                                           const std::vector<TensorRef>& inputs,
                                           std::vector<const void*>& ptrs) {
  COIL_USER_CHECK(inputs.size() == specs.size(), "the model takes {} inputs, got {}", specs.size(),
                  inputs.size());
  std::vector<Tensor> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const ValueSpec& s = specs[i];
    COIL_USER_CHECK(t.dtype == s.dtype, "input {}: expected dtype {}, got {}", s.name,
                    dtype_name(s.dtype), dtype_name(t.dtype));
    COIL_USER_CHECK(t.shape == s.shape, "input {}: expected shape {}, got {}", s.name,
                    shape_str(s.shape), shape_str(t.shape));
    COIL_USER_CHECK(t.strides.size() == t.shape.size(), "input {}: {} strides for {} dims", s.name,
                    t.strides.size(), t.shape.size());
    COIL_USER_CHECK(t.data != nullptr || t.numel() == 0, "input {}: null data pointer", s.name);
    if (t.is_contiguous()) {
      ptrs.push_back(t.data);
    } else {
      // Kernels are compiled for contiguous inputs: copy a strided input once per call.
      copies.push_back(Tensor::copy_of(t));
      ptrs.push_back(copies.back().data());
    }
  }
  return copies;
}

void CompiledModel::run_into(const std::vector<TensorRef>& inputs,
                             const std::vector<Tensor>& outputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  COIL_USER_CHECK(outputs.size() == impl_->outputs.size(), "the model has {} outputs, got {}",
                  impl_->outputs.size(), outputs.size());
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ValueSpec& s = impl_->outputs[i];
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
  std::vector<const void*> in_ptrs;
  std::vector<Tensor> keep = keep_contiguous(impl_->inputs, inputs, in_ptrs);
  COIL_USER_CHECK(outputs.size() == impl_->outputs.size(), "the model has {} outputs, got {}",
                  impl_->outputs.size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    COIL_USER_CHECK(outputs[i] != nullptr || shape_numel(impl_->outputs[i].shape) == 0,
                    "output {}: null data pointer", impl_->outputs[i].name);
  std::vector<void*> out_ptrs = outputs;
  ArenaLease<Impl> arena(*impl_);
  impl_->run(const_cast<void* const*>(in_ptrs.data()), out_ptrs.data(), impl_->constant_ptrs.data(),
             arena.data(), static_cast<const char*>(impl_->packed.data()));
  if (impl_->run_error) {
    int64_t value = 0, limit = 0;
    int site = impl_->run_error(&value, &limit);
    if (site >= 0)
      user_error("{}",
                 run_check_message(impl_->run_checks.at(static_cast<size_t>(site)), value, limit));
  }
}

/// Runs `use` with the model's kernels bound to `inputs`, fresh outputs and an arena of its own.
/// (A template so that it can take the private CompiledModel::Impl without naming it.)
template <typename Impl, typename Use>
static void with_kernels(const Impl& impl, const std::vector<TensorRef>& inputs, Use use) {
  ModuleBindings b;
  std::vector<const void*> in_ptrs;
  std::vector<Tensor> keep = keep_contiguous(impl.inputs, inputs, in_ptrs);
  for (const void* p : in_ptrs) b.inputs.push_back(const_cast<void*>(p));
  std::vector<Tensor> outs;
  for (const ValueSpec& s : impl.outputs) {
    outs.push_back(Tensor::empty(s.dtype, s.shape));
    b.outputs.push_back(outs.back().data());
  }
  b.constants = impl.constant_ptrs;
  ArenaLease<Impl> arena(impl);
  b.arena = arena.data();
  b.packed = static_cast<const char*>(impl.packed.data());
  use(KernelCaller(impl.kernel_calls, *impl.library, b));
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

std::vector<Tensor> CompiledModel::run(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  std::vector<Tensor> outs;
  for (const ValueSpec& s : impl_->outputs) outs.push_back(Tensor::empty(s.dtype, s.shape));
  run_into(inputs, outs);
  return outs;
}

std::vector<Tensor> CompiledModel::run(const std::vector<Tensor>& inputs) const {
  std::vector<TensorRef> refs;
  for (const Tensor& t : inputs) refs.push_back(t.ref());
  return run(refs);
}

}  // namespace coil

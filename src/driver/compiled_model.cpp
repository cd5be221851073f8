// The compile pipeline (one stage per line, each timed and loggable) and CompiledModel.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "codegen/cpp/cpp_module.h"
#include "codegen/precision.h"
#include "coil/coil.h"
#include "driver/autotune.h"
#include "driver/pass_checks.h"
#include "driver/pipeline.h"
#include "graph/decompositions.h"
#include "lower/lowering.h"
#include "runtime/code_cache.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "sched/scheduler.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"

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
  mutable std::mutex arena_mutex;  // one call at a time uses the arena
  mutable Tensor arena;
  Tensor packed;  // constants packed once at load (coil_graph_pack)
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

/// Records the wall time of each compile stage into the report (COIL_LOGS=perf prints them).
class StageTimer {
 public:
  explicit StageTimer(CompileReport& r) : report_(r), start_(clock::now()), last_(start_) {}
  void mark(const char* stage) {
    auto now = clock::now();
    double s = std::chrono::duration<double>(now - last_).count();
    report_.stage_seconds.emplace_back(stage, s);
    COIL_LOG(perf, "{}: {:.1f} ms", stage, s * 1e3);
    last_ = now;
  }
  void finish() {
    report_.total_seconds = std::chrono::duration<double>(clock::now() - start_).count();
  }

 private:
  using clock = std::chrono::steady_clock;
  CompileReport& report_;
  clock::time_point start_, last_;
};

const IsaInfo& target_isa(const CompileOptions& options) {
  return options.isa.empty() ? host_isa() : isa_by_name(options.isa);
}

std::string describe_graph(const Graph& graph) {
  auto values = [&](const std::vector<int>& ids, const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Node& n = graph.node(ids[i]);
      out.push_back(
          fmt::format("{}: {}", is_identifier(names[i]) ? names[i] : "value", type_str(n.type)));
    }
    return fmt::format("{}", fmt::join(out, ", "));
  };
  std::vector<int> outs;
  std::vector<std::string> in_names, out_names;
  for (int id : graph.inputs()) in_names.push_back(graph.node(id).name);
  for (const auto& o : graph.outputs()) {
    outs.push_back(o.node);
    out_names.push_back(o.name);
  }
  return fmt::format("({}) -> ({})", values(graph.inputs(), in_names), values(outs, out_names));
}

GeneratedProgram generate_program(const Graph& graph, const CompileOptions& options,
                                  StageTimer* timer) {
  auto mark = [&](const char* stage) {
    if (timer) timer->mark(stage);
  };
  warn_unknown_env_vars();
  COIL_USER_CHECK(options.device == "cpu" || options.device == "cuda",
                  "device '{}': expected cpu or cuda", options.device);
  const bool gpu = options.device == "cuda";
  const Fp32Precision precision = parse_precision(options.precision);
  // After each pass: the verifier (COIL_VERIFY_IR) and the dump (COIL_LOGS=ir_passes).
  COIL_LOG(graph, "input graph:\n{}", to_text(graph));
  after_graph_pass("input", graph, GraphStage::input);
  Graph g = decompose_and_bind(graph, options.sizes);
  COIL_LOG(graph, "after decomposition and size binding:\n{}", to_text(g));
  after_graph_pass("decompose_and_bind", g, GraphStage::decomposed);
  mark("decompose");
  LowerOptions lower_options;
  lower_options.realize_all = options.store_all_intermediates;
  lower_options.after_pass = after_ir_pass;
  IrProgram program = lower_graph(g, lower_options);
  mark("lower");
  if (!gpu) {
    AutotuneOptions autotune_options;
    autotune_options.enabled = options.autotune;
    autotune_matmuls(program, target_isa(options), autotune_options);
    after_ir_pass("autotune_matmuls", program);
    mark("autotune");
  }
  ScheduleOptions schedule_options;
  schedule_options.fusion.enabled = options.fusion;
  schedule_options.after_pass = [&](std::string_view pass, const Schedule& s, bool planned) {
    after_schedule_pass(pass, program, s, planned);
  };
  Schedule schedule = schedule_program(program, schedule_options);
  mark("schedule");
  if (gpu) {
    TritonModuleOptions module_options;
    module_options.description = describe_graph(g);
    module_options.precision = precision;
    for (int id : g.inputs()) module_options.input_names.push_back(g.node(id).name);
    TritonModule module = generate_triton_module(program, schedule, module_options);
    COIL_LOG(output_code, "generated Triton module:\n{}", module.source);
    mark("codegen");
    GeneratedProgram out{std::move(g), std::move(program), std::move(schedule), {}, {}};
    out.triton = std::move(module);
    return out;
  }
  CppTarget target;
  target.vec_lanes = target_isa(options).lanes(DType::F32);
  CppModule module = generate_cpp_module(program, schedule, target);
  COIL_LOG(output_code, "generated C++:\n{}", module.source);
  mark("codegen");
  return GeneratedProgram{
      std::move(g), std::move(program), std::move(schedule), std::move(module), {}};
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
                            {"bytes_written", k.bytes_written}});
  }
  j["device"] = device;
  j["precision"] = precision;
  j["arena_bytes"] = arena_bytes;
  nlohmann::ordered_json stages;
  for (const auto& [name, s] : stage_seconds) stages[name] = s;
  j["compile_seconds"] = stages;
  j["compile_total_seconds"] = total_seconds;
  j["cache"] = cache_hit ? "hit" : "miss";
  j["cache_key"] = cache_key;
  j["shared_object"] = so_path.string();
  return j.dump(2) + "\n";
}

CompileReport generate_gpu_module(const Graph& graph, const CompileOptions& options) {
  COIL_USER_CHECK(options.device == "cuda", "generate_gpu_module: device '{}' is not cuda",
                  options.device);
  CompileReport report;
  report.device = "cuda";
  report.precision = options.precision;
  StageTimer timer(report);
  GeneratedProgram gen = generate_program(graph, options, &timer);
  timer.finish();
  const TritonModule& module = gen.triton;
  for (const auto& k : module.kernels)
    report.kernels.push_back({k.name, "cuda", k.origins, k.bytes_read, k.bytes_written});
  for (const auto& e : module.externs)
    report.kernels.push_back({e.name, "cuda", e.origins, e.bytes_read, e.bytes_written});
  report.source = module.source;
  if (!options.output_dir.empty()) {
    namespace fs = std::filesystem;
    fs::create_directories(options.output_dir);
    std::ofstream(options.output_dir / "module.py") << module.source;
    std::ofstream(options.output_dir / "report.json") << report.to_json();
    std::ofstream(options.output_dir / "graph.coil") << to_text(graph);
  }
  return report;
}

CompiledModel compile(const Graph& graph, const CompileOptions& options) {
  COIL_USER_CHECK(options.device == "cpu",
                  "device '{}' needs a GPU: generate the module with `coil compile MODEL --device "
                  "cuda -o DIR` (coil::generate_gpu_module), then run DIR/module.py through "
                  "python/coil_runtime on a CUDA machine",
                  options.device);
  init_threads_from_env();
  auto impl = std::make_unique<CompiledModel::Impl>();
  CompileReport& report = impl->report;
  report.precision = options.precision;
  StageTimer timer(report);

  // The target ISA first: its first detection in a cache dir runs a probe (seconds, once),
  // which would otherwise be billed to code generation.
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
  CompileResult built = compile_cached(module.source, flags);
  timer.mark("compile");

  impl->library = SharedLibrary::open(built.so_path);
  impl->run = impl->library->symbol_as<GraphRunFn>(kGraphRunSymbol);
  impl->run_checks = program.run_checks;
  if (!program.run_checks.empty())
    impl->run_error = impl->library->symbol_as<GraphRunErrorFn>(kGraphRunErrorSymbol);
  impl->constants = program.constants;
  for (const auto& c : impl->constants) impl->constant_ptrs.push_back(c->data());
  // Weights that templates read packed are packed here, once.
  int64_t packed_bytes = impl->library->symbol_as<GraphPackedBytesFn>(kGraphPackedBytesSymbol)();
  impl->packed = Tensor::empty(DType::U8, {std::max<int64_t>(packed_bytes, 64)});
  impl->library->symbol_as<GraphPackFn>(kGraphPackSymbol)(impl->constant_ptrs.data(),
                                                          static_cast<char*>(impl->packed.data()));
  timer.mark("load");
  timer.finish();

  for (int id : g.inputs()) {
    const Node& n = g.node(id);
    impl->inputs.push_back({n.name, n.type.dtype, bound_shape(n.type.shape)});
  }
  for (const auto& o : g.outputs()) {
    const Node& n = g.node(o.node);
    impl->outputs.push_back({o.name, n.type.dtype, bound_shape(n.type.shape)});
  }
  for (size_t k = 0; k < module.kernels.size(); ++k) {
    KernelTraffic t = kernel_traffic(program, schedule, k);
    report.kernels.push_back(
        {module.kernels[k].name, "cpu", module.kernels[k].origins, t.bytes_read, t.bytes_written});
  }
  report.arena_bytes = schedule.memory.arena_bytes;
  report.cache_hit = built.cache_hit;
  report.cache_key = built.key;
  report.so_path = built.so_path;
  report.source = module.source;
  impl->arena = Tensor::empty(DType::U8, {std::max<int64_t>(report.arena_bytes, 1)});

  if (!options.output_dir.empty()) {
    namespace fs = std::filesystem;
    fs::create_directories(options.output_dir);
    std::ofstream(options.output_dir / "module.cpp") << module.source;
    fs::copy_file(built.so_path, options.output_dir / "module.so",
                  fs::copy_options::overwrite_existing);
    std::ofstream(options.output_dir / "report.json") << report.to_json();
    std::ofstream(options.output_dir / "graph.coil") << to_text(graph);
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
  std::lock_guard<std::mutex> lock(impl_->arena_mutex);
  impl_->run(const_cast<void* const*>(in_ptrs.data()), out_ptrs.data(), impl_->constant_ptrs.data(),
             static_cast<char*>(impl_->arena.data()),
             static_cast<const char*>(impl_->packed.data()));
  if (impl_->run_error) {
    int64_t value = 0, limit = 0;
    int site = impl_->run_error(&value, &limit);
    if (site >= 0)
      user_error("{}",
                 run_check_message(impl_->run_checks.at(static_cast<size_t>(site)), value, limit));
  }
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

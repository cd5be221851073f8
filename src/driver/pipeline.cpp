// The compile pipeline, one stage per line, each timed (StageTimer) and checked after every
// pass (driver/pass_checks): graph -> decomposed graph -> loop IR -> matmul autotuning (CPU)
// -> schedule -> C++ or Triton source. compile() (compiled_model.cpp) builds and loads the
// C++ result; generate_gpu_module() writes the Triton one.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/precision.h"
#include "driver/autotune.h"
#include "driver/debug_dir.h"
#include "driver/dynamic_model.h"
#include "driver/kernel_repro.h"
#include "driver/pass_checks.h"
#include "driver/pipeline.h"
#include "graph/decompositions.h"
#include "graph/recognize_attention.h"
#include "graph/text_format.h"
#include "lower/lowering.h"
#include "runtime/isa.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"
#include "support/progress.h"
#include "sym/size_hints.h"

namespace coil {

void StageTimer::mark(const char* stage) {
  auto now = clock::now();
  double s = std::chrono::duration<double>(now - last_).count();
  report_.stage_seconds.emplace_back(stage, s);
  COIL_LOG(perf, "{}: {:.1f} ms", stage, s * 1e3);
  last_ = now;
}

void StageTimer::finish() {
  report_.total_seconds = std::chrono::duration<double>(clock::now() - start_).count();
}

void check_mode(const std::string& mode) {
  COIL_USER_CHECK(mode == "default" || mode == "max-autotune",
                  "mode '{}': expected default or max-autotune", mode);
}

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
                                  StageTimer* timer, const SizeGeneric* size_generic) {
  auto mark = [&](const char* stage) {
    if (timer) timer->mark(stage);
  };
  warn_unknown_env_vars();
  COIL_USER_CHECK(options.device == "cpu" || options.device == "cuda",
                  "device '{}': expected cpu or cuda", options.device);
  check_mode(options.mode);
  const bool gpu = options.device == "cuda";
  const Fp32Precision precision = parse_precision(options.precision);
  // After each pass: the verifier (COIL_VERIFY_IR) and the dump (COIL_LOGS=ir_passes).
  COIL_LOG(graph, "input graph:\n{}", to_text(graph));
  after_graph_pass("input", graph, GraphStage::input);
  progress_note("lowering");
  // The written-out attention pattern as one node: the CPU's flash kernel, cuda's Triton flash
  // template.
  Graph recognized = recognize_attention(graph);
  after_graph_pass("recognize_attention", recognized, GraphStage::input);
  DecomposeOptions decompose_options;
  // cuda: the Triton flash templates (forward, attention_lse, attention_grad) pad head dims to
  // powers of two up to 256 (their Q and accumulator tiles live in registers); larger ones are
  // written out (matmul, softmax, matmul; the backward's matmuls and reductions).
  if (gpu) decompose_options.attention_max_head_dim = 256;
  if (size_generic) {
    for (size_t i = 0; i < size_generic->symbols.size(); ++i)
      decompose_options.rename_symbols[size_generic->symbols[i]] =
          size_symbol_name(static_cast<int>(i));
  }
  Graph g = decompose_and_bind(recognized, options.sizes, decompose_options);
  COIL_LOG(graph, "after decomposition and size binding:\n{}", to_text(g));
  after_graph_pass("decompose_and_bind", g, GraphStage::decomposed);
  mark("decompose");
  LowerOptions lower_options;
  lower_options.realize_all = options.store_all_intermediates;
  lower_options.after_pass = after_ir_pass;
  IrProgram program = lower_graph(g, lower_options);
  mark("lower");
  if (!gpu) {
    if (!lower_options.realize_all) {
      fuse_expand_depthwise(program);
      after_ir_pass("fuse_expand_depthwise", program);
    }
    convs_as_matmuls(program);
    after_ir_pass("convs_as_matmuls", program);
    fold_conv_activations(program);
    after_ir_pass("fold_conv_activations", program);
    if (!lower_options.realize_all) {
      keep_conv_layouts(program);
      after_ir_pass("keep_conv_layouts", program);
    }
    AutotuneOptions autotune_options;
    autotune_options.enabled = options.autotune;
    autotune_options.mode = options.mode;
    autotune_matmuls(program, target_isa(options), autotune_options);
    after_ir_pass("autotune_matmuls", program);
    mark("autotune");
  }
  ScheduleOptions schedule_options;
  schedule_options.fusion.enabled = options.fusion;
  schedule_options.after_pass = [&](std::string_view pass, const Schedule& s, bool planned) {
    after_schedule_pass(pass, program, s, planned);
  };
  progress_note("fusing and scheduling");
  Schedule schedule = schedule_program(program, schedule_options);
  mark("schedule");
  if (gpu) {
    TritonModuleOptions module_options;
    module_options.description = describe_graph(g);
    module_options.precision = precision;
    module_options.autotune_mode = options.mode;
    for (int id : g.inputs()) module_options.input_names.push_back(g.node(id).name);
    if (size_generic) module_options.size_symbols = size_generic->symbols;
    TritonModule module = generate_triton_module(program, schedule, module_options);
    COIL_LOG(output_code, "generated Triton module:\n{}", module.source);
    mark("codegen");
    GeneratedProgram out{std::move(g), std::move(program), std::move(schedule), {}, {}};
    out.triton = std::move(module);
    return out;
  }
  progress_note(fmt::format("generating C++ for {} kernels", schedule.kernels.size()));
  CppTarget target;
  target.vec_lanes = target_isa(options).lanes(DType::F32);
  if (size_generic) target.size_symbols = static_cast<int>(size_generic->symbols.size());
  CppModule module = generate_cpp_module(program, schedule, target);
  COIL_LOG(output_code, "generated C++:\n{}", module.source);
  mark("codegen");
  return GeneratedProgram{
      std::move(g), std::move(program), std::move(schedule), std::move(module), {}};
}

namespace {

/// The module's text without its SIZE_HINTS line (the sizes it was generated at).
std::string without_size_hints(const std::string& source) {
  std::string out;
  size_t pos = 0;
  while (pos < source.size()) {
    size_t end = source.find('\n', pos);
    end = end == std::string::npos ? source.size() : end + 1;
    if (source.compare(pos, 13, "SIZE_HINTS = ") != 0) out.append(source, pos, end - pos);
    pos = end;
  }
  return out;
}

}  // namespace

GeneratedProgram generate_gpu_program(const Graph& graph, const CompileOptions& options,
                                      StageTimer* timer) {
  std::vector<std::string> symbols = unbound_size_symbols(graph, options.sizes);
  if (symbols.empty()) return generate_program(graph, options, timer);
  // Size-generic: generated at the representative sizes (dynamic_model.h), then again at
  // others. The module is meant to serve every size that passes its guards, so its text may
  // not depend on the sizes it was generated at: a heuristic that read them (a number a library
  // call prints as the size expression that has its value, a block choice) would show as a
  // difference, and is refused here rather than trusted.
  SizeGeneric size_generic{symbols};
  auto at = [&](const std::vector<int64_t>& sizes, StageTimer* t) {
    std::map<sym::Expr, int64_t> hints;
    for (size_t i = 0; i < sizes.size(); ++i)
      hints[sym::make_symbol(size_symbol_name(static_cast<int>(i)))] = sizes[i];
    sym::SizeHintScope scope(hints);
    return generate_program(graph, options, t, &size_generic);
  };
  GeneratedProgram gen = at(representative_sizes(graph, symbols), timer);
  GeneratedProgram other = at(
      prime_sizes(std::vector<int64_t>(symbols.size(), 157), constant_dims(graph), 157), nullptr);
  const std::string a = without_size_hints(gen.triton.source);
  const std::string b = without_size_hints(other.triton.source);
  if (a != b) {
    auto [la, lb] = first_differing_lines(a, b);
    COIL_SUPPORTED_CHECK(false,
                         "size-generic Triton module: the generated code depends on the sizes "
                         "({}): `{}` at some sizes, `{}` at others; bind them "
                         "(CompileOptions::sizes, --size)",
                         fmt::join(symbols, ", "), la, lb);
  }
  COIL_LOG(guards, "size-generic Triton module for {}", fmt::join(symbols, ", "));
  return gen;
}

CompileReport generate_gpu_module(const Graph& graph, const CompileOptions& options) {
  COIL_USER_CHECK(options.device == "cuda", "generate_gpu_module: device '{}' is not cuda",
                  options.device);
  COIL_USER_CHECK(options.remote_cache.empty(),
                  "remote_cache '{}': the remote cache serves CPU compiles only (the Triton "
                  "module is compiled by python/coil_runtime, whose caches are local)",
                  options.remote_cache);
  ProgressScope progress;
  CompileReport report;
  report.device = "cuda";
  report.precision = options.precision;
  StageTimer timer(report);
  std::unique_ptr<DebugDir> debug = DebugDir::open(graph, options);
  GeneratedProgram gen = generate_gpu_program(graph, options, &timer);
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
    if (options.write_graph)
      std::ofstream(options.output_dir / "graph.coil")
          << (options.graph_weights ? to_text(graph) : to_text_without_weights(graph));
  }
  if (debug) {
    debug->write("module.py", module.source);
    write_triton_kernel_repros(*debug, module);
    debug->write("report.json", report.to_json());
    debug->write_logs();
  }
  return report;
}

}  // namespace coil

#include "commands.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>
#include <nlohmann/json.hpp>

#include "bench_profile.h"
#include "coil/coil.h"
#include "demo_model.h"
#include "driver/debug_dir.h"
#include "driver/dynamic_model.h"
#include "frontend/onnx/onnx_data_dependent.h"
#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"
#include "gpu_run.h"
#include "graph/interpreter.h"
#include "graph/op_reference.h"
#include "graph/text_format.h"
#include "prepare.h"
#include "runtime/compare.h"
#include "support/check.h"
#include "support/npy.h"
#include "support/progress.h"

namespace coil::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void print_kernels(const CompileReport& r) {
  fmt::print("kernels ({}):\n", r.kernels.size());
  for (const auto& k : r.kernels)
    fmt::print("  {:<40} reads {:>10} B  writes {:>10} B  from {}\n", k.name, k.bytes_read,
               k.bytes_written, fmt::join(k.origins, ", "));
  if (r.device == "cpu") fmt::print("arena: {} bytes\n", r.arena_bytes);
}

/// Compares outputs with expected tensors; prints the worst error per output.
bool report_comparison(const std::vector<ValueSpec>& outputs, const std::vector<Tensor>& got,
                       const std::vector<Tensor>& want, double rtol, double atol) {
  bool all_ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    Tolerance tol = default_tolerance(outputs[i].dtype);
    if (rtol >= 0) tol.rtol = rtol;
    if (atol >= 0) tol.atol = atol;
    CompareResult c = compare_tensors(got[i], want[i], tol);
    fmt::print("  {:<12} {}  max abs error {:.3g}, max rel error {:.3g}{}\n", outputs[i].name,
               c.ok ? "ok      " : "MISMATCH", c.max_abs_error, c.max_rel_error,
               c.ok ? "" : "\n    " + c.message);
    all_ok = all_ok && c.ok;
  }
  return all_ok;
}

}  // namespace

namespace {

/// `coil compile` with sizes left unbound (CPU): one module generated at representative sizes
/// and checked at others, as a size-generic model's first module is (driver/dynamic_model.h),
/// its kernels taking the sizes as arguments (ks0, ks1, ... in the symbols' name order),
/// written to out_dir with sizes.json saying which symbol each argument is and the module's
/// guards. Where the check fails, the module printed at the representative sizes (the source
/// is then its only guard); where the pipeline cannot keep the sizes symbolic, a specialized one.
int compile_size_generic(const Prepared& p, const std::vector<std::string>& symbols,
                         const std::string& out_dir) {
  const std::vector<int64_t> at = representative_sizes(p.graph, symbols);
  std::unique_ptr<GuardedModule> guarded;
  std::string why;
  try {
    guarded = compile_guarded_module(p.graph, p.options, symbols, at, &why);
  } catch (const std::exception& e) {  // compile_size_variant says it again, or specializes
    why = e.what();
  }
  SizeVariantBuild v =
      guarded ? guarded->build : compile_size_variant(p.graph, p.options, symbols, at);
  print_kernels(v.report);
  nlohmann::ordered_json j;
  j["size_generic"] = v.size_generic;
  nlohmann::ordered_json args = nlohmann::json::object(), hints = nlohmann::json::object();
  std::vector<std::string> shown;
  for (size_t i = 0; i < symbols.size(); ++i) {
    args[fmt::format("ks{}", i)] = symbols[i];
    hints[symbols[i]] = guarded ? guarded->generated_at[i] : at[i];
    shown.push_back(fmt::format("ks{} = {}", i, symbols[i]));
  }
  j["size_arguments"] = args;
  j["compiled_at"] = hints;
  if (guarded) {
    nlohmann::ordered_json checked = nlohmann::json::object();
    for (size_t i = 0; i < symbols.size(); ++i) checked[symbols[i]] = guarded->checked_at[i];
    j["checked_at"] = checked;
    j["guards"] = guarded->guards_text();
  } else {
    j["guards"] = nullptr;
    j["no_guards_because"] = why;
  }
  std::ofstream(std::filesystem::path(out_dir) / "sizes.json") << j.dump(2) << "\n";
  if (guarded)
    fmt::print(
        "size-generic: the kernels take the sizes as arguments ({}); this module serves every "
        "size that passes its guards: {}\n",
        fmt::join(shown, ", "), guarded->guards_text());
  else if (v.size_generic)
    fmt::print(
        "size-generic: the kernels take the sizes as arguments ({}), but the code depends on "
        "the sizes ({}): this module serves the sizes at which coil prints the same code\n",
        fmt::join(shown, ", "), why);
  else
    fmt::print(
        "specialized: the size-generic pipeline cannot compile this model yet (COIL_LOGS=guards "
        "says why); this module is for {} only\n",
        fmt::join(shown, ", "));
  fmt::print(
      "compiled in {:.1f} ms (cache {}); wrote {}/module.cpp, module.so, report.json, "
      "sizes.json\n",
      v.report.total_seconds * 1e3, v.report.cache_hit ? "hit" : "miss", out_dir);
  return kExitOk;
}

}  // namespace

int cmd_compile(const ModelArgs& a, const std::string& out_dir) {
  Prepared p = prepare(a, /*make_inputs=*/false);
  p.options.output_dir = out_dir;
  const std::vector<std::string> unbound = unbound_size_symbols(p.graph, p.options.sizes);
  if (a.device == "cuda") {
    // Unbound sizes: one size-generic Triton module (generate_gpu_program), or an error saying
    // what keeps it from being one.
    CompileReport r = generate_gpu_module(p.graph, p.options);
    print_kernels(r);
    if (!unbound.empty())
      fmt::print(
          "size-generic: the kernels take the sizes {} as arguments (ks0, ...); the "
          "module's call() binds them from the inputs and checks its guards (sizes 0 "
          "and 1 need a module bound to them)\n",
          names_list(unbound));
    fmt::print(
        "generated in {:.1f} ms; wrote {}/module.py, report.json, graph.coil (run module.py "
        "through python/coil_runtime on a CUDA machine)\n",
        r.total_seconds * 1e3, out_dir);
    return kExitOk;
  }
  if (!unbound.empty()) return compile_size_generic(p, unbound, out_dir);
  CompiledModel m = compile(p.graph, p.options);
  print_kernels(m.report());
  const CompileReport& r = m.report();
  fmt::print("compiled in {:.1f} ms (cache {}{}); wrote {}/module.cpp, module.so, report.json\n",
             r.total_seconds * 1e3, r.cache_hit ? "hit" : "miss",
             r.remote_cache == "off" ? "" : ", remote cache " + r.remote_cache, out_dir);
  return kExitOk;
}

namespace {

/// The model's outputs on p.inputs and their descriptions: compiled and run here, or, for
/// --device cuda, the generated module run through the Python runtime (gpu_run.h).
struct Outputs {
  std::vector<Tensor> values;
  std::vector<ValueSpec> specs;
};

Outputs run_prepared(const ModelArgs& a, const Prepared& p) {
  if (a.device == "cuda") {
    COIL_USER_CHECK(!a.save_kernel_values,
                    "--save-kernel-values: kernel repros with saved values are CPU only");
    GpuModule gm = write_gpu_module(p);
    print_gpu_module(gm);
    return {run_gpu_module(p, gm).outputs, graph_outputs(p)};
  }
  CompiledModel m = compile(p.graph, p.options);
  if (a.save_kernel_values) {
    std::vector<TensorRef> refs;
    for (const Tensor& t : p.inputs) refs.push_back(t.ref());
    m.save_kernel_values(refs);
    fmt::print("saved each kernel's arguments of this call under {}/graph-*/kernels/\n",
               debug_dir_root(p.options).string());
  }
  return {m.run(p.inputs), m.outputs()};
}

}  // namespace

int cmd_export(const ModelArgs& a, const std::string& out_dir) {
  Prepared p = prepare(a);
  if (a.device == "cuda") {
    export_gpu_module(p, out_dir);
    return kExitOk;
  }
  CompiledModel m = compile(p.graph, p.options);
  m.export_to(out_dir);
  ExportedModel loaded = ExportedModel::load(out_dir);  // the export reads back, checksums too
  const ExportInfo& info = loaded.info();
  fmt::print(
      "exported {} kernels ({} ISA) to {}: module.so {:.2f} MB, weights.bin {:.2f} MB, "
      "manifest.json; it loads in {:.1f} ms (`coil run {}`, or coil::ExportedModel::load)\n",
      info.kernels.size(), info.isa, out_dir, info.module_bytes / 1e6, info.weights_bytes / 1e6,
      info.load_seconds * 1e3, out_dir);
  return kExitOk;
}

namespace {

// A directory is taken for an export (a model is a file): without manifest.json, loading it
// says so.
bool is_export_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

/// `coil run DIR` of an exported model: its inputs from --input files or random (seeded as
/// prepare() seeds them), run by the runtime alone: no graph, no compiler, no cache.
Outputs run_exported(const ModelArgs& a) {
  const ModelArgs defaults;
  auto refuse = [&](bool given, const char* option) {
    COIL_USER_CHECK(!given,
                    "{}: an exported model ({}) is compiled already; {} applies to compiling",
                    option, a.model, option);
  };
  refuse(!a.sizes.empty(), "--size");
  refuse(a.device != defaults.device, "--device");
  refuse(a.precision != defaults.precision, "--precision");
  refuse(a.mode != defaults.mode, "--mode");
  refuse(!a.remote_cache.empty(), "--remote-cache");
  refuse(!a.debug_dir.empty(), "--debug-dir");
  refuse(a.save_kernel_values, "--save-kernel-values");
  ExportedModel m = ExportedModel::load(a.model);
  std::map<std::string, Tensor> given;
  for (const auto& s : a.inputs) {
    auto [name, path] = split_pair(s, "--input", "NAME=FILE.npy");
    std::optional<size_t> at = find_value(m.inputs(), name);
    COIL_USER_CHECK(at.has_value(), "--input {}: the model has no input '{}' (its inputs: {})", s,
                    name, value_names(m.inputs()));
    given[m.inputs()[*at].name] = read_npy(path);
  }
  std::vector<Tensor> inputs;
  uint64_t k = 0;
  for (const ValueSpec& s : m.inputs()) {
    auto it = given.find(s.name);
    inputs.push_back(it != given.end() ? it->second
                                       : random_tensor(s.dtype, s.shape, a.seed * 1000003u + k++));
  }
  return {m.run(inputs), m.outputs()};
}

/// Whether `path` is an ONNX model with nodes that run on the host between compiled stages
/// (NonZero, Unique, If, Loop, ...: frontend/onnx/onnx_staged.h), which one graph cannot hold.
bool is_staged_onnx(const ModelArgs& a) {
  if (std::filesystem::path(a.model).extension() != ".onnx") return false;
  try {
    import_onnx(a.model);
  } catch (const Error& e) {
    return std::string_view(e.what()).find(onnxfe::kStaged) != std::string_view::npos;
  }
  return false;
}

/// `coil run` of such a model through coil::OnnxModel: inputs by the model's names (or their
/// sanitized form), random ones where the declared shape is static.
Outputs run_staged(const ModelArgs& a) {
  const ModelArgs defaults;
  COIL_USER_CHECK(a.sizes.empty() && a.device == defaults.device,
                  "{}: runs in stages on the CPU (its ops run on the host between compiled "
                  "stages); --size and --device do not apply",
                  a.model);
  CompileOptions options;
  options.precision = a.precision;
  options.mode = a.mode;
  OnnxModel m = OnnxModel::load(a.model, options);
  onnx::ModelProto proto;
  {
    std::ifstream f(a.model, std::ios::binary);
    COIL_USER_CHECK(proto.ParseFromIstream(&f), "{}: not a valid ONNX model", a.model);
  }
  std::vector<ValueSpec> specs;
  for (const std::string& name : m.input_names()) {
    ValueSpec s{sanitize_onnx_name(name), DType::F32, {}, name};
    for (const auto& in : proto.graph().input()) {
      if (in.name() != name) continue;
      const auto& tt = in.type().tensor_type();
      if (auto dt = onnxfe::dtype_from_onnx(tt.elem_type())) s.dtype = *dt;
      for (const auto& d : tt.shape().dim())
        s.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    specs.push_back(s);
  }
  std::map<std::string, Tensor> given;
  for (const auto& arg : a.inputs) {
    auto [name, path] = split_pair(arg, "--input", "NAME=FILE.npy");
    std::optional<size_t> at = find_value(specs, name);
    COIL_USER_CHECK(at.has_value(), "--input {}: the model has no input '{}' (its inputs: {})", arg,
                    name, value_names(specs));
    given[specs[*at].name] = read_npy(path);
  }
  std::vector<Tensor> inputs;
  uint64_t k = 0;
  for (const ValueSpec& s : specs) {
    auto it = given.find(s.name);
    if (it != given.end()) {
      inputs.push_back(it->second);
      continue;
    }
    COIL_USER_CHECK(std::none_of(s.shape.begin(), s.shape.end(), [](int64_t d) { return d < 0; }),
                    "input '{}' has a symbolic size: give it with --input {}=FILE.npy",
                    s.source_name, s.name);
    inputs.push_back(random_tensor(s.dtype, s.shape, a.seed * 1000003u + k++));
  }
  std::vector<Tensor> outs = m.run(inputs);
  std::vector<ValueSpec> out_specs;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = proto.graph().output(static_cast<int>(i)).name();
    out_specs.push_back({sanitize_onnx_name(name), outs[i].dtype(), outs[i].shape(), name});
  }
  fmt::print("ran in stages ({} compiled)\n", m.variants());
  return {outs, out_specs};
}

}  // namespace

int cmd_run(const ModelArgs& a, const std::string& out_dir) {
  Outputs result;
  if (is_export_dir(a.model)) {
    result = run_exported(a);
  } else if (is_staged_onnx(a)) {
    result = run_staged(a);
  } else {
    Prepared p = prepare(a);
    result = run_prepared(a, p);
  }
  const auto& [outs, specs] = result;
  std::filesystem::create_directories(out_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    auto path = std::filesystem::path(out_dir) / (specs[i].name + ".npy");
    write_npy(path, outs[i]);
    fmt::print("wrote {} ({}{}{})\n", path.string(),
               specs[i].source_name.empty() ? "" : "output '" + specs[i].source_name + "', ",
               dtype_name(outs[i].dtype()), shape_str(outs[i].shape()));
  }
  return kExitOk;
}

int cmd_check(const ModelArgs& a, const std::vector<std::string>& expects, double rtol,
              double atol) {
  Prepared p = prepare(a);
  // The --expect files before compiling, so that a mistake in them costs no compile.
  // Outputs by coil's name or the model's own (ONNX's output "4" is v4).
  std::vector<ValueSpec> output_specs;
  for (const auto& o : p.graph.outputs()) output_specs.push_back({o.name, {}, {}, o.source_name});
  std::map<std::string, Tensor> files;
  for (const auto& e : expects) {
    auto [name, path] = split_pair(e, "--expect", "NAME=FILE.npy");
    std::optional<size_t> at = find_value(output_specs, name);
    COIL_USER_CHECK(at.has_value(), "--expect {}: the model has no output '{}' (its outputs: {})",
                    e, name, value_names(output_specs));
    files[output_specs[*at].name] = read_npy(path);
  }
  for (const auto& o : output_specs)
    COIL_USER_CHECK(expects.empty() || files.count(o.name),
                    "--expect: no file given for output '{}' (give one for every output, or none "
                    "to compare with the reference interpreter)",
                    o.source_name.empty() ? o.name : o.source_name);
  auto [got, specs] = run_prepared(a, p);
  std::vector<Tensor> want;
  if (expects.empty()) {
    fmt::print("checking against the reference interpreter\n");
    want = interpret(p.graph, p.inputs);
  } else {
    for (const auto& o : specs) want.push_back(files.at(o.name));
  }
  bool ok = report_comparison(specs, got, want, rtol, atol);
  fmt::print("{}\n", ok ? "check passed" : "check FAILED");
  return ok ? kExitOk : kExitCheckFailed;
}

int cmd_bench(const ModelArgs& a, const BenchArgs& b) {
  const int threads = b.threads, runs = b.runs, warmup = b.warmup;
  const bool json = b.json;
  COIL_USER_CHECK(runs > 0, "--runs must be positive");
  COIL_USER_CHECK(warmup >= 0, "--warmup must not be negative");
  Prepared p = prepare(a);
  if (a.device == "cuda") {
    COIL_USER_CHECK(threads == 0, "--threads sets CPU threads; it does not apply to --device cuda");
    GpuModule gm = write_gpu_module(p);
    if (!json) print_gpu_module(gm);
    nlohmann::json r = run_gpu_module(p, gm, runs, warmup, b.profile ? b.trace : "").report;
    nlohmann::ordered_json kernels;
    if (b.profile) kernels = gpu_profile_json(r, gm.report);
    double med = r["median_ms"], mn = r["min_ms"], mx = r["max_ms"];
    if (json) {
      // The CPU fields (threads: none on a GPU), then the GPU's.
      nlohmann::ordered_json j{{"compile_s", gm.report.total_seconds},
                               {"cache_hit", gm.cache_hit},
                               {"median_ms", med},
                               {"min_ms", mn},
                               {"max_ms", mx},
                               {"runs", runs},
                               {"threads", nullptr},
                               {"device", "cuda"},
                               {"gpu", r.value("device", "")},
                               {"first_call_ms", r.value("first_call_ms", 0.0)},
                               {"warmup", warmup},
                               {"timer", r.value("timer", "")},
                               {"module", (gm.dir / "module.py").string()}};
      if (b.profile) {
        j["kernels"] = kernels;
        j["profile_call_median_us"] = r.value("profile_call_median_us", 0.0);
        j["trace"] = b.trace;
      }
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print(
          "generate {:.1f} ms (module {}); first call {:.1f} ms (autotune, JIT); {} runs on {}: "
          "median {:.3f} ms, min {:.3f}, max {:.3f}\n",
          gm.report.total_seconds * 1e3, gm.cache_hit ? "unchanged" : "new",
          r.value("first_call_ms", 0.0), runs, r.value("device", "the GPU"), med, mn, mx);
      if (b.profile) {
        print_gpu_profile(kernels, r.value("profile_call_median_us", 0.0));
        fmt::print("wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)\n", b.trace);
      }
    }
    return kExitOk;
  }
  // Before compiling: matmul autotuning times its candidates at the current thread count.
  if (threads > 0) set_num_threads(threads);
  CompiledModel m = compile(p.graph, p.options);
  std::vector<TensorRef> refs;
  for (const auto& t : p.inputs) refs.push_back(t.ref());
  std::vector<Tensor> outs;
  for (const auto& o : m.outputs()) outs.push_back(Tensor::empty(o.dtype, o.shape));
  for (int i = 0; i < warmup; ++i) m.run_into(refs, outs);
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto t = Clock::now();
    m.run_into(refs, outs);
    times.push_back(ms_since(t));
  }
  double med = median(times);
  double mn = *std::min_element(times.begin(), times.end()),
         mx = *std::max_element(times.begin(), times.end());
  double p90 = percentile(times, 0.9), p99 = percentile(times, 0.99);
  // Noisy: the slowest tenth of the runs is more than 10% above the median.
  bool noisy = p90 > 1.1 * med;
  int used_threads = omp_get_max_threads();
  nlohmann::ordered_json kernels;
  double ceiling = 0;
  if (b.profile) {
    KernelProfile prof = m.profile(refs, runs, warmup);
    ceiling = measure_copy_bandwidth();
    kernels = profile_json(prof, ceiling);
    write_chrome_trace(prof, b.trace);
  }
  if (json) {
    nlohmann::ordered_json j{{"compile_s", m.report().total_seconds},
                             {"cache_hit", m.report().cache_hit},
                             {"median_ms", med},
                             {"min_ms", mn},
                             {"max_ms", mx},
                             {"runs", runs},
                             {"threads", used_threads},
                             {"p90_ms", p90},
                             {"p99_ms", p99},
                             {"noisy", noisy},
                             {"load_average", load_average()}};
    if (b.profile) {
      j["kernels"] = kernels;
      j["ceiling_gb_per_s"] = ceiling / 1e9;
      j["trace"] = b.trace;
    }
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "compile {:.1f} ms (cache {}); {} runs on {} threads: median {:.3f} ms, min {:.3f}, max "
        "{:.3f}, p90 {:.3f}{}\n",
        m.report().total_seconds * 1e3, m.report().cache_hit ? "hit" : "miss", runs, used_threads,
        med, mn, mx, p90, noisy ? " (noisy: p90 is over 10% above the median)" : "");
    if (b.profile) {
      print_profile(kernels, ceiling, med);
      fmt::print("wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)\n", b.trace);
    }
  }
  return kExitOk;
}

int cmd_debug_internal_error(bool std_exception) {
  if (std_exception) throw std::out_of_range("debug-internal-error: a std::exception");
  COIL_UNREACHABLE("debug-internal-error: an internal error on purpose");
}

int cmd_ops(bool markdown) {
  fmt::print("{}", markdown ? op_reference_markdown() : op_reference_text());
  return kExitOk;
}

int cmd_demo(int runs) {
  Graph g = parse_graph(kDemoModel, "<demo>");
  fmt::print("coil demo: {}\n", kDemoDescription);
  fmt::print("{}\n", to_text(g));
  set_progress_enabled(true);
  auto t0 = Clock::now();
  CompiledModel m = compile(g);
  double compile_ms = ms_since(t0);
  print_kernels(m.report());
  fmt::print("compile: {:.1f} ms (code cache {}, model cache {})", compile_ms,
             m.report().cache_hit ? "hit" : "miss", m.report().model_cache_hit ? "hit" : "miss");
  for (const auto& [stage, s] : m.report().stage_seconds) fmt::print(", {} {:.1f}", stage, s * 1e3);
  fmt::print("\n");

  std::vector<Tensor> inputs;
  uint64_t seed = 1;
  for (const auto& in : m.inputs()) {
    // Weights (w_*: [fan_in, fan_out]) as torch's nn.Linear initializes them, so that
    // activations keep their scale through the block.
    double bound =
        in.name.rfind("w_", 0) == 0 ? 1.0 / std::sqrt(static_cast<double>(in.shape[0])) : 2.0;
    inputs.push_back(random_tensor(in.dtype, in.shape, seed++, -bound, bound));
  }
  std::vector<Tensor> got = m.run(inputs);
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto t = Clock::now();
    m.run(inputs);
    times.push_back(ms_since(t));
  }
  fmt::print("run: median {:.3f} ms over {} runs on {} threads\n", median(times), runs,
             omp_get_max_threads());
  fmt::print("checking against the reference interpreter:\n");
  bool ok = report_comparison(m.outputs(), got, interpret(g, inputs), -1, -1);
  fmt::print("{}\n", ok ? "demo passed" : "demo FAILED");
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace coil::cli

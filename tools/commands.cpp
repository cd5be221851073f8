#include "commands.h"
#include <cmath>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/coil.h"
#include "demo_model.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/interpreter.h"
#include "graph/op_registry.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "support/check.h"
#include "support/npy.h"

namespace coil::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::pair<std::string, std::string> split_pair(const std::string& s, const char* what) {
  auto eq = s.find('=');
  COIL_USER_CHECK(eq != std::string::npos && eq > 0, "{} '{}' must look like NAME=VALUE", what, s);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

/// The model's graph, its inputs (files or random), and the size bindings they imply.
struct Prepared {
  Graph graph;
  std::vector<Tensor> inputs;
  CompileOptions options;
};

Prepared prepare(const ModelArgs& a) {
  bool onnx = std::filesystem::path(a.model).extension() == ".onnx";
  Prepared p{onnx ? import_onnx(a.model) : load_graph_file(a.model), {}, {}};
  p.options.device = a.device;
  for (const auto& s : a.sizes) {
    auto [name, value] = split_pair(s, "--size");
    try {
      p.options.sizes[name] = std::stoll(value);
    } catch (const std::exception&) {
      user_error("--size {}: '{}' is not an integer", name, value);
    }
  }
  std::map<std::string, Tensor> given;
  for (const auto& s : a.inputs) {
    auto [name, path] = split_pair(s, "--input");
    COIL_USER_CHECK(p.graph.find(name) >= 0, "--input {}: the model has no input named '{}'", name,
                    name);
    given[name] = read_npy(path);
  }
  // Bind symbols from given inputs' shapes, then make the remaining inputs.
  for (int id : p.graph.inputs()) {
    const Node& n = p.graph.node(id);
    auto it = given.find(n.name);
    if (it == given.end()) continue;
    COIL_USER_CHECK(it->second.dim() == n.type.rank(), "input {}: expected {} dims, got {}", n.name,
                    n.type.rank(), shape_str(it->second.shape()));
    for (size_t d = 0; d < n.type.shape.size(); ++d)
      if (n.type.shape[d].is_symbol())
        p.options.sizes.emplace(n.type.shape[d].symbol_name(), it->second.shape()[d]);
  }
  uint64_t k = 0;
  for (int id : p.graph.inputs()) {
    const Node& n = p.graph.node(id);
    auto it = given.find(n.name);
    if (it != given.end()) {
      p.inputs.push_back(it->second);
      continue;
    }
    std::vector<int64_t> shape;
    for (const auto& d : n.type.shape) {
      if (auto c = d.as_const()) {
        shape.push_back(*c);
        continue;
      }
      auto b = p.options.sizes.find(d.symbol_name());
      COIL_USER_CHECK(b != p.options.sizes.end(),
                      "input {}: size '{}' is not bound; pass --size {}=N or --input {}=FILE.npy",
                      n.name, d.symbol_name(), d.symbol_name(), n.name);
      shape.push_back(b->second);
    }
    p.inputs.push_back(random_tensor(n.type.dtype, shape, a.seed * 1000003u + k++));
  }
  return p;
}

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
bool report_comparison(const CompiledModel& m, const std::vector<Tensor>& got,
                       const std::vector<Tensor>& want, double rtol, double atol) {
  bool all_ok = true;
  for (size_t i = 0; i < got.size(); ++i) {
    Tolerance tol = default_tolerance(m.outputs()[i].dtype);
    if (rtol >= 0) tol.rtol = rtol;
    if (atol >= 0) tol.atol = atol;
    CompareResult c = compare_tensors(got[i], want[i], tol);
    fmt::print("  {:<12} {}  max abs error {:.3g}, max rel error {:.3g}{}\n", m.outputs()[i].name,
               c.ok ? "ok      " : "MISMATCH", c.max_abs_error, c.max_rel_error,
               c.ok ? "" : "\n    " + c.message);
    all_ok = all_ok && c.ok;
  }
  return all_ok;
}

}  // namespace

/// run/check/bench execute the model here, which needs the CPU target.
static void require_cpu(const ModelArgs& a, const char* command) {
  COIL_USER_CHECK(a.device == "cpu",
                  "coil {} --device {} needs a GPU: write the module with `coil compile {} "
                  "--device {} -o DIR`, then run DIR/module.py through python/coil_runtime on a "
                  "CUDA machine",
                  command, a.device, a.model, a.device);
}

int cmd_compile(const ModelArgs& a, const std::string& out_dir) {
  Prepared p = prepare(a);
  p.options.output_dir = out_dir;
  if (a.device == "cuda") {
    CompileReport r = generate_gpu_module(p.graph, p.options);
    print_kernels(r);
    fmt::print(
        "generated in {:.1f} ms; wrote {}/module.py, report.json, graph.coil (run module.py "
        "through python/coil_runtime on a CUDA machine)\n",
        r.total_seconds * 1e3, out_dir);
    return 0;
  }
  CompiledModel m = compile(p.graph, p.options);
  print_kernels(m.report());
  fmt::print("compiled in {:.1f} ms (cache {}); wrote {}/module.cpp, module.so, report.json\n",
             m.report().total_seconds * 1e3, m.report().cache_hit ? "hit" : "miss", out_dir);
  return 0;
}

int cmd_run(const ModelArgs& a, const std::string& out_dir) {
  require_cpu(a, "run");
  Prepared p = prepare(a);
  CompiledModel m = compile(p.graph, p.options);
  std::vector<Tensor> outs = m.run(p.inputs);
  std::filesystem::create_directories(out_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    auto path = std::filesystem::path(out_dir) / (m.outputs()[i].name + ".npy");
    write_npy(path, outs[i]);
    fmt::print("wrote {} ({}{})\n", path.string(), dtype_name(outs[i].dtype()),
               shape_str(outs[i].shape()));
  }
  return 0;
}

int cmd_check(const ModelArgs& a, const std::vector<std::string>& expects, double rtol,
              double atol) {
  require_cpu(a, "check");
  Prepared p = prepare(a);
  CompiledModel m = compile(p.graph, p.options);
  std::vector<Tensor> got = m.run(p.inputs);
  std::vector<Tensor> want;
  if (expects.empty()) {
    fmt::print("checking against the reference interpreter\n");
    want = interpret(p.graph, p.inputs);
  } else {
    std::map<std::string, Tensor> files;
    for (const auto& e : expects) {
      auto [name, path] = split_pair(e, "--expect");
      files[name] = read_npy(path);
    }
    for (const auto& o : m.outputs()) {
      auto it = files.find(o.name);
      COIL_USER_CHECK(it != files.end(), "--expect: no file given for output '{}'", o.name);
      want.push_back(it->second);
    }
    COIL_USER_CHECK(files.size() == m.outputs().size(), "--expect: {} files for {} outputs",
                    files.size(), m.outputs().size());
  }
  bool ok = report_comparison(m, got, want, rtol, atol);
  fmt::print("{}\n", ok ? "check passed" : "check FAILED");
  return ok ? 0 : 1;
}

int cmd_bench(const ModelArgs& a, int threads, int runs, int warmup, bool json) {
  require_cpu(a, "bench");
  COIL_USER_CHECK(runs > 0, "--runs must be positive");
  Prepared p = prepare(a);
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
  int used_threads = omp_get_max_threads();
  if (json) {
    nlohmann::ordered_json j{{"compile_s", m.report().total_seconds},
                             {"cache_hit", m.report().cache_hit},
                             {"median_ms", med},
                             {"min_ms", mn},
                             {"max_ms", mx},
                             {"runs", runs},
                             {"threads", used_threads}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "compile {:.1f} ms (cache {}); {} runs on {} threads: median {:.3f} ms, min {:.3f}, max "
        "{:.3f}\n",
        m.report().total_seconds * 1e3, m.report().cache_hit ? "hit" : "miss", runs, used_threads,
        med, mn, mx);
  }
  return 0;
}

int cmd_ops() {
  static const char* kinds[] = {"source", "elementwise", "view", "reduction", "composite", "other"};
  for (const OpDef& op : all_ops()) {
    std::string arity = op.max_inputs < 0 ? fmt::format("{}+", op.min_inputs)
                        : op.min_inputs == op.max_inputs
                            ? std::to_string(op.min_inputs)
                            : fmt::format("{}-{}", op.min_inputs, op.max_inputs);
    fmt::print("{:<18} {:<12} inputs {:<4} {}\n", op.name, kinds[static_cast<int>(op.kind)], arity,
               op.doc);
  }
  return 0;
}

int cmd_demo(int runs) {
  Graph g = parse_graph(kDemoModel, "<demo>");
  fmt::print("coil demo: {}\n", kDemoDescription);
  fmt::print("{}\n", to_text(g));
  auto t0 = Clock::now();
  CompiledModel m = compile(g);
  double compile_ms = ms_since(t0);
  print_kernels(m.report());
  fmt::print("compile: {:.1f} ms (cache {})", compile_ms, m.report().cache_hit ? "hit" : "miss");
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
  bool ok = report_comparison(m, got, interpret(g, inputs), -1, -1);
  fmt::print("{}\n", ok ? "demo passed" : "demo FAILED");
  return ok ? 0 : 1;
}

}  // namespace coil::cli

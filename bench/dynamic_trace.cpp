// coil_dynamic_trace: a serving trace through one size-generic model (issue 20; docs/
// dynamic-shapes.md). Never run by CTest.
//
//   coil_dynamic_trace [--requests 100] [--seed 1] [--max-batch 64] [--max-seq 512]
//       [--hidden 64] [--compare 4] [--runs 5] [--json FILE] [--model MODEL.onnx]
//   coil_dynamic_trace --decode STEP.onnx [--steps 64] [--json FILE]
//
// With --model, the model is an ONNX file whose one input has the symbols `batch` and `seq`
// (tests/models/export_models.py's encoder_dynamic: a 2-layer nn.TransformerEncoder, input
// [seq, batch, d_model]) instead of the built-in block.
//
// The model is a transformer block's token-wise part with a dynamic batch b and sequence t:
// x [b, t, hidden] -> layer_norm -> matmul [hidden, 4*hidden] + bias -> gelu -> matmul
// [4*hidden, hidden] + bias -> + x -> layer_norm (the matmuls over the b*t rows). Each request
// draws b in [1, max_batch] and t in [1, max_seq] and runs once through the size-generic model;
// the trace reports the compiles (distinct modules, C++ compiles, variants compiled
// specialized) and the first-call time per request. Then, for --compare of the trace's sizes,
// the size-generic model's run time against a model compiled for exactly those sizes (medians
// of --runs, alternated), the "within 5%" figure of the issue.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_host.h"
#include "coil/coil.h"
#include "frontend/onnx/onnx_import.h"
#include "runtime/compare.h"

namespace {

using coil::CompiledModel;
using coil::DType;
using coil::Graph;
using coil::Tensor;

Graph block(int64_t hidden) {
  namespace sym = coil::sym;
  Graph g;
  int x = g.add_input("x", DType::F32, {sym::make_symbol("b"), sym::make_symbol("t"), hidden});
  auto param = [&](std::vector<int64_t> shape, uint64_t seed, const char* name) {
    return g.add_constant(coil::random_tensor(DType::F32, shape, seed, -0.1, 0.1), name);
  };
  auto norm = [&](int v, uint64_t seed) {
    return g.add_node("layer_norm", {v, param({hidden}, seed, ""), param({hidden}, seed + 1, "")},
                      coil::Attrs{{"dims", int64_t{1}}});
  };
  int h = norm(x, 1);
  h = g.add_node("matmul", {h, param({hidden, 4 * hidden}, 3, "w1")});
  h = g.add_node("gelu", {g.add_node("add", {h, param({4 * hidden}, 4, "b1")})});
  h = g.add_node("matmul", {h, param({4 * hidden, hidden}, 5, "w2")});
  h = g.add_node("add", {g.add_node("add", {h, param({hidden}, 6, "b2")}), x});
  g.add_output(norm(h, 7), "y");
  return g;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Writes `out` to `path` (nothing when the path is empty).
void write_json(const std::string& path, const nlohmann::ordered_json& out) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f) {
    std::fputs((out.dump(2) + "\n").c_str(), f);
    std::fclose(f);
  }
}

/// --decode: token-by-token decoding through a decode step exported with a dynamic KV-cache
/// length (tests/models/export_models.py llama_decode_dynamic: inputs tokens [batch, 1], pos
/// [1], then the caches [batch, kv, past, d]; outputs the logits, then the grown caches, fed
/// back as the next step's caches). Each step is a new length: the step's first-call time is
/// what a serving process pays per token (coil's front half at each new length, a C++ compile
/// where the source is new); a second call at the same length is the run alone.
int decode_trace(const std::string& model, int steps, const std::string& json_path) {
  Graph g = coil::import_onnx(model);
  CompiledModel m = coil::compile(g);
  std::vector<Tensor> caches;
  for (size_t i = 2; i < g.inputs().size(); ++i) {
    std::vector<int64_t> shape;
    for (const coil::sym::Expr& d : g.node(g.inputs()[i]).type.shape)
      shape.push_back(coil::sym::evaluate(d, {{"batch", 1}, {"past", 0}}));
    caches.push_back(Tensor::zeros(DType::F32, shape));
  }
  std::vector<double> first_ms, again_ms;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    Tensor tokens = Tensor::zeros(DType::I64, {1, 1}), pos = Tensor::zeros(DType::I64, {1});
    tokens.data_as<int64_t>()[0] = (step * 7919) % 256;
    pos.data_as<int64_t>()[0] = step;
    std::vector<Tensor> in{tokens, pos};
    in.insert(in.end(), caches.begin(), caches.end());
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> out = m.run(in);
    first_ms.push_back(seconds_since(t0) * 1e3);
    t0 = std::chrono::steady_clock::now();
    m.run(in);
    again_ms.push_back(seconds_since(t0) * 1e3);
    caches.assign(out.begin() + 1, out.end());
  }
  const double total = seconds_since(start);
  const CompiledModel::SizeStats st = m.size_stats();
  // Steps after the first 8 (the 0/1 bindings and the first compiles are behind them).
  std::vector<double> late_first(first_ms.begin() + std::min<size_t>(8, first_ms.size()),
                                 first_ms.end()),
      late_again(again_ms.begin() + std::min<size_t>(8, again_ms.size()), again_ms.end());
  const double step_ms = late_first.empty() ? 0 : median(late_first);
  const double run_ms = late_again.empty() ? 0 : median(late_again);
  fmt::print(
      "{} decode steps (cache length 0..{}): {} modules ({} compiled by the C++ compiler, {} "
      "specialized), {:.1f} s in all; after step 8: a new length {:.2f} ms (median), the same "
      "length again {:.2f} ms\n",
      steps, steps - 1, st.modules, st.compiled, st.specialized, total, step_ms, run_ms);
  nlohmann::ordered_json out;
  out["host"] = coil::bench::host_json();
  out["load_average"] = coil::bench::load_average();
  out["model"] = model;
  out["steps"] = steps;
  out["modules"] = st.modules;
  out["cxx_compiles"] = st.compiled;
  out["specialized"] = st.specialized;
  out["trace_seconds"] = total;
  out["new_length_ms_median"] = step_ms;
  out["same_length_ms_median"] = run_ms;
  out["first_call_ms"] = first_ms;
  write_json(json_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a serving trace through one size-generic model"};
  int requests = 100, compare = 4, runs = 5;
  uint64_t seed = 1;
  int64_t max_batch = 64, max_seq = 512, hidden = 64;
  std::string json_path;
  app.add_option("--requests", requests);
  app.add_option("--seed", seed);
  app.add_option("--max-batch", max_batch);
  app.add_option("--max-seq", max_seq);
  app.add_option("--hidden", hidden);
  app.add_option("--compare", compare, "sizes of the trace timed against specialized models");
  app.add_option("--runs", runs);
  app.add_option("--json", json_path);
  std::string model;
  app.add_option("--model", model, "an ONNX model with symbols batch and seq");
  std::string decode;
  int steps = 64;
  app.add_option("--decode", decode,
                 "a decode step with a dynamic KV cache (export_models.py llama_decode_dynamic): "
                 "decode --steps tokens through it");
  app.add_option("--steps", steps);
  coil::bench::parse_or_exit(app, argc, argv);
  if (!decode.empty()) return decode_trace(decode, steps, json_path);

  Graph g = model.empty() ? block(hidden) : coil::import_onnx(model);
  // The input's shape at (b, t): its symbols b/batch and t/seq bound.
  auto input_shape = [&](int64_t b, int64_t t) {
    std::map<std::string, int64_t> at{{"b", b}, {"batch", b}, {"t", t}, {"seq", t}};
    std::vector<int64_t> shape;
    for (const coil::sym::Expr& d : g.node(g.inputs()[0]).type.shape)
      shape.push_back(coil::sym::evaluate(d, at));
    return shape;
  };
  auto bound_sizes = [&](int64_t b, int64_t t) {
    std::map<std::string, int64_t> sizes;
    for (const coil::sym::Expr& e : g.size_symbols()) {
      const std::string name = coil::sym::to_string(e);
      sizes[name] = name == "b" || name == "batch" ? b : t;
    }
    return sizes;
  };
  CompiledModel m = coil::compile(g);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> batch(1, max_batch), seq(1, max_seq);
  std::vector<std::pair<int64_t, int64_t>> trace;
  double first_calls = 0, slowest = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < requests; ++r) {
    const int64_t b = batch(rng), t = seq(rng);
    trace.emplace_back(b, t);
    Tensor x = coil::random_tensor(DType::F32, input_shape(b, t), seed + r, -1, 1);
    const auto t0 = std::chrono::steady_clock::now();
    m.run({x});
    const double s = seconds_since(t0);
    first_calls += s;
    slowest = std::max(slowest, s);
  }
  const double total = seconds_since(start);
  const CompiledModel::SizeStats st = m.size_stats();
  nlohmann::ordered_json out;
  out["host"] = coil::bench::host_json();
  out["load_average"] = coil::bench::load_average();
  out["requests"] = requests;
  out["distinct_sizes"] = st.sizes;
  out["modules"] = st.modules;
  out["cxx_compiles"] = st.compiled;
  out["specialized"] = st.specialized;
  out["trace_seconds"] = total;
  out["slowest_request_s"] = slowest;
  // The (batch, sequence) pairs themselves, so that another compiler can replay the same trace
  // (bench/gpu/dynamic_trace_torch.py reads them from this JSON).
  nlohmann::ordered_json pairs = nlohmann::json::array();
  for (auto [b, t] : trace) pairs.push_back({b, t});
  out["trace"] = pairs;
  fmt::print(
      "{} requests, {} distinct sizes: {} modules ({} compiled by the C++ compiler in this "
      "process, {} specialized), {:.1f} s in all, slowest request {:.2f} s\n",
      requests, st.sizes, st.modules, st.compiled, st.specialized, total, slowest);

  // Size-generic against specialized, at a few of the trace's sizes.
  nlohmann::ordered_json rows = nlohmann::json::array();
  for (int i = 0; i < compare && i < static_cast<int>(trace.size()); ++i) {
    auto [b, t] = trace[static_cast<size_t>(i)];
    coil::CompileOptions bound;
    bound.sizes = bound_sizes(b, t);
    CompiledModel s = coil::compile(g, bound);
    Tensor x = coil::random_tensor(DType::F32, input_shape(b, t), 99, -1, 1);
    std::vector<double> generic_ms, special_ms;
    m.run({x});
    s.run({x});
    for (int k = 0; k < runs; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      m.run({x});
      generic_ms.push_back(seconds_since(t0) * 1e3);
      t0 = std::chrono::steady_clock::now();
      s.run({x});
      special_ms.push_back(seconds_since(t0) * 1e3);
    }
    const double gm = median(generic_ms), sm = median(special_ms);
    fmt::print("b={} t={}: size-generic {:.3f} ms, specialized {:.3f} ms ({:+.1f}%)\n", b, t, gm,
               sm, (gm / sm - 1) * 100);
    rows.push_back({{"b", b}, {"t", t}, {"generic_ms", gm}, {"specialized_ms", sm}});
  }
  out["generic_vs_specialized"] = rows;
  write_json(json_path, out);
  return 0;
}

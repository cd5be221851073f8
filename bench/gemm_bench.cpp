// coil_gemm_bench: the library anchors of the matmul benchmark (docs/benchmarks.md, "Matmul").
//
// In one run, at each thread count (default: OpenMP's, i.e. OMP_NUM_THREADS):
//   - the arithmetic peaks (gemm_peak.h): a register-resident AVX-512 FMA loop (fp32) and a
//     vdpbf16ps loop (bf16), the best of 50 short measurements (--peak-seconds in all);
//   - oneDNN's dnnl_sgemm and OpenBLAS's cblas_sgemm (OpenMP build), called through coil's own
//     extern runtime (kernels/coil_extern.h), on square 256/512/1024/2048;
//     x@W with x [512,1024], W [1024,1024]; relu(x@W+b) as the library GEMM followed by a
//     separate OpenMP bias+relu pass (and, as a reference, a oneDNN matmul primitive with the
//     bias and relu fused and W pre-reordered); the pass alone; a 3-layer Linear+ReLU MLP on
//     [64,256] (torch's Linear: x @ W^T + b); bf16 GEMMs (--bf16-sizes, default 2048) through a
//     oneDNN bf16 matmul (AMX where the CPU has it);
//   - coil's compiled models of the same workloads (coil_rows(), through coil::compile), each
//     skipped with its message while coil cannot compile it.
// Every time is the median of --runs timed calls (each timed on its own, back to back) after
// --warmup untimed ones; inputs are created and outputs allocated and touched once. GFLOP/s
// counts 2*M*N*K per GEMM (the bias+relu pass adds none); %peak divides by the fp32 FMA peak
// at the same thread count (bf16 rows: the vdpbf16ps peak).
// --torch FILE adds bench/eager_gemm.py's rows (PyTorch eager) to the table and the JSON.
// --bf16-only measures only the bf16 rows (bench/amx/run_device.sh runs it again with
// COIL_CPU_ISA=avx512 to time coil's AVX512-BF16 kernel next to its AMX one); the JSON's
// "coil_isa" names the ISA coil compiled for.
//
//   coil_gemm_bench [--threads LIST] [--runs 10] [--warmup 2] [--sizes 256,512,1024,2048]
//                   [--bf16-sizes 2048] [--bf16-only] [--peak-seconds 0.2] [--skip-coil]
//                   [--torch FILE] [--json FILE]

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_host.h"
#include "kernels/extern/dnnl_util.h"
#ifdef COIL_HAVE_OPENBLAS
#include <cblas-openblas.h>  // openblas_get_config: which build libcoil_extern loaded
#endif
#include "coil/coil.h"
#include "gemm_peak.h"
#include "runtime/compare.h"
#include "runtime/isa.h"
#include "runtime/toolchain.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

namespace coil::bench {
namespace {

// ---------------------------------------------------------------- options

struct Options {
  std::vector<int> threads;  // empty: omp_get_max_threads()
  int runs = 10;
  int warmup = 2;
  std::vector<int64_t> sizes{256, 512, 1024, 2048};
  std::vector<int64_t> bf16_sizes{2048};
  bool bf16_only = false;
  double peak_seconds = 0.2;
  bool coil = true;
  std::string torch_json;
  std::string json_path;
};

/// The options through CLI11 (as the coil tool): bad values stop with the usage and exit 2.
Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"coil_gemm_bench: coil's matmul template against oneDNN, OpenBLAS and eager"};
  app.add_option("--threads", o.threads, "thread counts, e.g. 1,2 (default: all cores)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--runs", o.runs, "timed runs per measurement")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_option("--sizes", o.sizes, "square sizes, e.g. 256,512")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--bf16-sizes", o.bf16_sizes, "square bf16 sizes, e.g. 1024,2048")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--bf16-only", o.bf16_only, "only the bf16 rows");
  app.add_option("--peak-seconds", o.peak_seconds, "time spent measuring the FMA peak")
      ->check(CLI::PositiveNumber);
  bool skip_coil = false;
  app.add_flag("--skip-coil", skip_coil, "measure the libraries only");
  app.add_option("--torch", o.torch_json, "eager_gemm.py's JSON to merge");
  app.add_option("--json", o.json_path, "write the results here");
  parse_or_exit(app, argc, argv);
  o.coil = !skip_coil;
  if (o.threads.empty()) o.threads.push_back(omp_get_max_threads());
  return o;
}

// ---------------------------------------------------------------- helpers

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

/// `warmup` untimed calls, then `runs` calls each timed on its own; median, min, max.
Timing measure(const std::function<void()>& f, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    f();
    t.push_back(ms_since(start));
  }
  std::sort(t.begin(), t.end());
  size_t n = t.size();
  double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  return {med, t.front(), t.back(), static_cast<int>(n)};
}

/// 64-byte aligned floats, filled once with values in [-1, 1) (also the first touch).
struct Floats {
  std::unique_ptr<float[], decltype(&std::free)> p{nullptr, &std::free};
  int64_t n = 0;
  Floats() = default;
  Floats(int64_t count, uint32_t seed) : n(count) {
    size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
    p.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!p) throw std::bad_alloc();
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < count; ++i) {
      s = s * 1664525u + 1013904223u;
      p[i] = static_cast<float>(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
  }
  float* get() const { return p.get(); }
};

/// y[i, :] = max(y[i, :] + b, 0): the separate epilogue pass after a library GEMM (an OpenMP
/// loop over rows, vectorized for this CPU: the file is built with -march=native).
void bias_relu(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    float* r = y + i * cols;
    for (int64_t j = 0; j < cols; ++j) r[j] = std::max(r[j] + b[j], 0.0f);
  }
}

uint16_t to_bf16(float f) {  // round to nearest even (no NaN in the bench's data)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// A oneDNN matmul primitive, C API: y[M,N] = x[M,K] @ W[K,N] (+ b) (relu), x and W in `dt`
/// (f32 or bf16), y f32. W is treated as a constant: reordered once into the primitive's
/// layout by prepare(), outside the timing (what a compiled model does with weights).
class DnnlMatmul {
 public:
  DnnlMatmul(int64_t M, int64_t N, int64_t K, dnnl_data_type_t dt, bool bias_relu)
      : bias_(bias_relu) {
    using ext::check_dnnl;
    const std::string ctx = fmt::format("dnnl matmul {}x{}x{}", M, N, K);
    dnnl_engine_t engine = ext::cpu_engine();
    dnnl_dims_t xd = {M, K}, wd = {K, N}, yd = {M, N}, bd = {1, N};
    dnnl_memory_desc_t x_md, w_md, w_any, y_md, b_md;
    check_dnnl(dnnl_memory_desc_init_by_tag(&x_md, 2, xd, dt, dnnl_ab), "md", ctx);
    check_dnnl(dnnl_memory_desc_init_by_tag(&w_md, 2, wd, dt, dnnl_ab), "md", ctx);
    check_dnnl(dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dt, dnnl_format_tag_any), "md", ctx);
    check_dnnl(dnnl_memory_desc_init_by_tag(&y_md, 2, yd, dnnl_f32, dnnl_ab), "md", ctx);
    check_dnnl(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_f32, dnnl_ab), "md", ctx);
    dnnl_matmul_desc_t desc;
    check_dnnl(dnnl_matmul_desc_init(&desc, &x_md, &w_any, bias_ ? &b_md : nullptr, &y_md),
               "dnnl_matmul_desc_init", ctx);
    ext::Attr attr;
    check_dnnl(dnnl_primitive_attr_create(attr.out()), "attr", ctx);
    if (bias_) {
      ext::PostOps ops;
      check_dnnl(dnnl_post_ops_create(ops.out()), "post_ops", ctx);
      check_dnnl(dnnl_post_ops_append_eltwise(ops.get(), 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f),
                 "eltwise", ctx);
      check_dnnl(dnnl_primitive_attr_set_post_ops(attr.get(), ops.get()), "post_ops", ctx);
    }
    ext::PrimitiveDesc pd;
    check_dnnl(dnnl_primitive_desc_create(pd.out(), &desc, attr.get(), engine, nullptr),
               "dnnl_primitive_desc_create", ctx);
    const char* impl = nullptr;
    if (dnnl_primitive_desc_query(pd.get(), dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl)
      impl_ = impl;
    check_dnnl(dnnl_primitive_create(prim_.out(), pd.get()), "dnnl_primitive_create", ctx);
    const dnnl_memory_desc_t* chosen =
        dnnl_primitive_desc_query_md(pd.get(), dnnl_query_weights_md, 0);
    check_dnnl(dnnl_memory_create(x_.out(), &x_md, engine, DNNL_MEMORY_NONE), "memory", ctx);
    check_dnnl(dnnl_memory_create(user_w_.out(), &w_md, engine, DNNL_MEMORY_NONE), "memory", ctx);
    check_dnnl(dnnl_memory_create(w_.out(), chosen, engine, DNNL_MEMORY_ALLOCATE), "memory", ctx);
    check_dnnl(dnnl_memory_create(y_.out(), &y_md, engine, DNNL_MEMORY_NONE), "memory", ctx);
    check_dnnl(dnnl_memory_create(b_.out(), &b_md, engine, DNNL_MEMORY_NONE), "memory", ctx);
    ext::PrimitiveDesc rpd;
    check_dnnl(
        dnnl_reorder_primitive_desc_create(rpd.out(), &w_md, engine, chosen, engine, nullptr),
        "reorder", ctx);
    check_dnnl(dnnl_primitive_create(reorder_.out(), rpd.get()), "reorder", ctx);
  }
  void prepare(const void* w) {
    dnnl_memory_set_data_handle(user_w_.get(), const_cast<void*>(w));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user_w_.get()}, {DNNL_ARG_TO, w_.get()}};
    dnnl_stream_t s = ext::thread_stream();
    ext::check_dnnl(dnnl_primitive_execute(reorder_.get(), s, 2, args), "reorder", "weights");
    dnnl_stream_wait(s);
  }
  void run(const void* x, const float* b, float* y) {
    dnnl_memory_set_data_handle(x_.get(), const_cast<void*>(x));
    dnnl_memory_set_data_handle(y_.get(), y);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, x_.get()}, {DNNL_ARG_WEIGHTS, w_.get()}, {DNNL_ARG_DST, y_.get()}};
    int n = 3;
    if (bias_) {
      dnnl_memory_set_data_handle(b_.get(), const_cast<float*>(b));
      args[n++] = {DNNL_ARG_BIAS, b_.get()};
    }
    dnnl_stream_t s = ext::thread_stream();
    ext::check_dnnl(dnnl_primitive_execute(prim_.get(), s, n, args), "execute", "dnnl matmul");
    dnnl_stream_wait(s);
  }
  const std::string& implementation() const { return impl_; }

 private:
  bool bias_;
  std::string impl_;
  ext::Primitive prim_, reorder_;
  ext::Memory x_, user_w_, w_, y_, b_;
};

// ---------------------------------------------------------------- results

struct Peaks {
  double fp32 = 0, bf16 = 0;  // FLOP/s; 0 when not measured
};

struct Results {
  json rows = json::array();
  std::map<int, Peaks> peaks;

  void add(const std::string& id, const std::string& desc, const std::string& backend, int threads,
           double flops, const Timing& t, bool bf16 = false, json extra = {}) {
    json r{{"id", id},
           {"desc", desc},
           {"backend", backend},
           {"threads", threads},
           {"flops", flops},
           {"median_ms", t.median_ms},
           {"min_ms", t.min_ms},
           {"max_ms", t.max_ms},
           {"runs", t.runs},
           {"gflops", flops > 0 ? flops / (t.median_ms * 1e-3) / 1e9 : 0.0},
           {"dtype", bf16 ? "bf16" : "f32"}};
    for (auto& [k, v] : extra.items()) r[k] = v;
    rows.push_back(r);
    print_row(r);
  }

  void print_row(const json& r) const {
    const int t = r["threads"].get<int>();
    const bool bf16 = r.value("dtype", "f32") == std::string("bf16");
    double peak = 0;
    if (auto it = peaks.find(t); it != peaks.end()) peak = bf16 ? it->second.bf16 : it->second.fp32;
    const double gflops = r.value("gflops", 0.0);
    std::string pct = peak > 0 && gflops > 0 ? fmt::format("{:5.1f}%", 100 * gflops * 1e9 / peak)
                                             : std::string("     -");
    fmt::print("{:<14} {:>3} {:<22} {:>11.1f} {:>11.1f} {:>9.1f} {:>7}  {}\n",
               r["id"].get<std::string>(), t, r["backend"].get<std::string>(),
               r["median_ms"].get<double>() * 1e3, r["min_ms"].get<double>() * 1e3, gflops, pct,
               r.value("note", std::string()));
    std::fflush(stdout);
  }
};

void print_header() {
  fmt::print("\n{:<14} {:>3} {:<22} {:>11} {:>11} {:>9} {:>7}  {}\n", "workload", "thr", "backend",
             "median us", "min us", "GFLOP/s", "%peak", "note");
  fmt::print("{}\n", std::string(96, '-'));
}

// ---------------------------------------------------------------- coil's rows

/// coil's compiled models of the workloads (coil::compile through the public API), timed like
/// the libraries and checked against dnnl_sgemm. A workload coil cannot compile yet is recorded
/// as skipped with the error. This is the place where coil's rows live; extend it as coil's
/// matmul lowering grows (e.g. constant weights packed at load, fused epilogues).
void coil_rows(const Options& opt, int threads, Results& res, json& skipped) {
  // The expected result of a graph on its inputs, through the libraries.
  using Reference = std::function<void(const std::vector<Tensor>&, float*)>;
  struct Case {
    std::string id, desc;
    double flops;
    bool bf16;
    std::function<Graph()> build;
    Reference reference;
  };
  std::vector<Case> cases;
  auto mm = [](const Tensor& a, const Tensor& b, float* c, int64_t m, int64_t n, int64_t k,
               bool transB = false) {
    ext::sgemm_dnnl(m, n, k, a.data_as<float>(), k, false, b.data_as<float>(), transB ? k : n,
                    transB, c, n);
  };
  // A@B of two [n, n] inputs.
  auto square = [](int64_t n, DType t) {
    return [n, t] {
      Graph g;
      int a = g.add_input("a", t, make_shape({n, n}));
      int b = g.add_input("b", t, make_shape({n, n}));
      g.add_output(g.add_node("matmul", {a, b}), "y");
      return g;
    };
  };
  for (int64_t n : opt.sizes) {
    Reference ref = [=](const std::vector<Tensor>& in, float* y) { mm(in[0], in[1], y, n, n, n); };
    cases.push_back({fmt::format("sq{}", n), fmt::format("A@B, f32[{0},{0}]", n), 2.0 * n * n * n,
                     false, square(n, DType::F32), ref});
  }
  // x@W and relu(x@W+b), x [512, 1024], W [1024, 1024], all inputs.
  auto xw = [](bool bias_relu) {
    return [bias_relu] {
      Graph g;
      int x = g.add_input("x", DType::F32, make_shape({512, 1024}));
      int w = g.add_input("w", DType::F32, make_shape({1024, 1024}));
      int y = g.add_node("matmul", {x, w});
      if (bias_relu) {
        int b = g.add_input("b", DType::F32, make_shape({1024}));
        y = g.add_node("relu", {g.add_node("add", {y, b})});
      }
      g.add_output(y, "y");
      return g;
    };
  };
  const double xw_flops = 2.0 * 512 * 1024 * 1024;
  cases.push_back(
      {"xw", "x@W, x[512,1024] W[1024,1024]", xw_flops, false, xw(false),
       [=](const std::vector<Tensor>& in, float* y) { mm(in[0], in[1], y, 512, 1024, 1024); }});
  cases.push_back({"xw_bias_relu", "relu(x@W+b), as xw", xw_flops, false, xw(true),
                   [=](const std::vector<Tensor>& in, float* y) {
                     mm(in[0], in[1], y, 512, 1024, 1024);
                     bias_relu(y, in[2].data_as<float>(), 512, 1024);
                   }});
  // Three torch-style Linear layers (y = x @ W^T + b) with ReLU, weights as inputs.
  cases.push_back(
      {"mlp3", "3x relu(linear), x[64,256], W[256,256]", 3 * 2.0 * 64 * 256 * 256, false,
       [] {
         Graph g;
         int x = g.add_input("x", DType::F32, make_shape({64, 256}));
         for (int l = 0; l < 3; ++l) {
           int w = g.add_input(fmt::format("w{}", l), DType::F32, make_shape({256, 256}));
           int b = g.add_input(fmt::format("b{}", l), DType::F32, make_shape({256}));
           x = g.add_node("relu", {g.add_node("linear", {x, w, b})});
         }
         g.add_output(x, "y");
         return g;
       },
       [=](const std::vector<Tensor>& in, float* y) {
         Tensor h = in[0].clone();
         for (int l = 0; l < 3; ++l) {
           mm(h, in[1 + 2 * l], y, 64, 256, 256, true);
           bias_relu(y, in[2 + 2 * l].data_as<float>(), 64, 256);
           std::copy(y, y + 64 * 256, h.data_as<float>());
         }
       }});
  // The same with the weights as constants, as in a model (Graph::add_constant, ONNX
  // initializers): coil packs them once when the model is loaded, not in each call.
  const Tensor wc = random_tensor(DType::F32, {1024, 1024}, 101, -1.0, 1.0);
  const Tensor bc = random_tensor(DType::F32, {1024}, 102, -1.0, 1.0);
  auto xw_const = [wc, bc](bool bias_relu) {
    return [wc, bc, bias_relu] {
      Graph g;
      int x = g.add_input("x", DType::F32, make_shape({512, 1024}));
      int y = g.add_node("matmul", {x, g.add_constant(wc, "w")});
      if (bias_relu) y = g.add_node("relu", {g.add_node("add", {y, g.add_constant(bc, "b")})});
      g.add_output(y, "y");
      return g;
    };
  };
  cases.push_back(
      {"xw_const", "x@W, W constant (packed at load)", xw_flops, false, xw_const(false),
       [=](const std::vector<Tensor>& in, float* y) { mm(in[0], wc, y, 512, 1024, 1024); }});
  cases.push_back({"xw_bias_relu_const", "relu(x@W+b), W, b constant", xw_flops, false,
                   xw_const(true), [=](const std::vector<Tensor>& in, float* y) {
                     mm(in[0], wc, y, 512, 1024, 1024);
                     bias_relu(y, bc.data_as<float>(), 512, 1024);
                   }});
  std::vector<Tensor> mlp_w, mlp_b;
  for (int l = 0; l < 3; ++l) {
    mlp_w.push_back(random_tensor(DType::F32, {256, 256}, 110 + l, -0.0625, 0.0625));
    mlp_b.push_back(random_tensor(DType::F32, {256}, 120 + l, -0.0625, 0.0625));
  }
  cases.push_back({"mlp3_const", "3x relu(linear), weights constant", 3 * 2.0 * 64 * 256 * 256,
                   false,
                   [=] {
                     Graph g;
                     int x = g.add_input("x", DType::F32, make_shape({64, 256}));
                     for (int l = 0; l < 3; ++l) {
                       int w = g.add_constant(mlp_w[static_cast<size_t>(l)], fmt::format("w{}", l));
                       int b = g.add_constant(mlp_b[static_cast<size_t>(l)], fmt::format("b{}", l));
                       x = g.add_node("relu", {g.add_node("linear", {x, w, b})});
                     }
                     g.add_output(x, "y");
                     return g;
                   },
                   [=](const std::vector<Tensor>& in, float* y) {
                     Tensor h = in[0].clone();
                     for (int l = 0; l < 3; ++l) {
                       mm(h, mlp_w[static_cast<size_t>(l)], y, 64, 256, 256, true);
                       bias_relu(y, mlp_b[static_cast<size_t>(l)].data_as<float>(), 64, 256);
                       std::copy(y, y + 64 * 256, h.data_as<float>());
                     }
                   }});
  if (opt.bf16_only) cases.clear();
  for (int64_t n : opt.bf16_sizes) {
    cases.push_back({fmt::format("bf16_sq{}", n), fmt::format("A@B, bf16[{0},{0}]", n),
                     2.0 * n * n * n, true, square(n, DType::BF16),
                     [n](const std::vector<Tensor>& in, float* y) {
                       DnnlMatmul ref(n, n, n, dnnl_bf16, false);
                       ref.prepare(in[1].data());
                       ref.run(in[0].data(), nullptr, y);
                     }});
  }

  for (const Case& c : cases) {
    const std::string key = fmt::format("{}/{}", c.id, threads);
    try {
      Graph g = c.build();
      auto t0 = Clock::now();
      CompiledModel m = compile(g);
      const double compile_ms = ms_since(t0);
      std::vector<Tensor> inputs;
      uint64_t seed = 1;
      for (const auto& v : m.inputs())
        inputs.push_back(random_tensor(v.dtype, v.shape, seed++, -1.0, 1.0));
      std::vector<TensorRef> refs;
      for (const auto& t : inputs) refs.push_back(t.ref());
      std::vector<Tensor> outputs;
      for (const auto& v : m.outputs()) outputs.push_back(Tensor::zeros(v.dtype, v.shape));
      m.run_into(refs, outputs);
      json check = nullptr;
      std::string note = fmt::format("compile {:.0f} ms", compile_ms);
      const DType out_t = outputs.size() == 1 ? outputs[0].dtype() : DType::F64;
      if (c.reference && (out_t == DType::F32 || out_t == DType::BF16)) {
        // Against the libraries (f32 accumulation; a bf16 result is rounded once more).
        std::vector<float> want(static_cast<size_t>(outputs[0].numel()));
        c.reference(inputs, want.data());
        double worst = 0, scale = 1;
        for (size_t i = 0; i < want.size(); ++i) {
          float got;
          if (out_t == DType::F32) {
            got = outputs[0].data_as<float>()[i];
          } else {
            uint32_t bits = uint32_t{outputs[0].data_as<uint16_t>()[i]} << 16;
            std::memcpy(&got, &bits, 4);
          }
          worst = std::max(worst, static_cast<double>(std::fabs(got - want[i])));
          scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
        }
        const bool ok = worst <= (out_t == DType::F32 ? 1e-4 : 1e-2) * scale;
        check = json{{"ok", ok}, {"max_abs_diff_vs_dnnl", worst}};
        note += ok ? ", check ok" : fmt::format(", CHECK FAILED (max diff {:.3g})", worst);
      }
      Timing t = measure([&] { m.run_into(refs, outputs); }, opt.warmup, opt.runs);
      res.add(c.id, c.desc, "coil", threads, c.flops, t, c.bf16,
              json{{"compile_ms", compile_ms},
                   {"cache_hit", m.report().cache_hit},
                   {"kernels", m.report().kernels.size()},
                   {"check", check},
                   {"note", note}});
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::string first_line = msg.substr(0, msg.find('\n'));
      skipped[key] = msg.substr(0, 2000);
      fmt::print("{:<14} {:>3} {:<22} skipped: {}\n", c.id, threads, "coil",
                 first_line.substr(0, 120));
    }
  }
}

// ---------------------------------------------------------------- host

json gemm_host_json() {
  // The shared description (bench_host.h), plus the libraries this benchmark compares.
  json h = bench::host_json();
  const dnnl_version_t* v = dnnl_version();
  h["onednn"] = fmt::format("{}.{}.{} (cpu runtime {})", v->major, v->minor, v->patch,
                            v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
#ifdef COIL_HAVE_OPENBLAS
  h["openblas"] = openblas_get_config();
  h["openblas_parallel"] = openblas_get_parallel() == 2 ? "OpenMP" : "not OpenMP (wrong build)";
#endif
  h["omp_num_threads_env"] = getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "";
  return h;
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

// ---------------------------------------------------------------- the run

int main_impl(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  if (opt.runs < 10)
    fmt::print(stderr, "warning: --runs {} is below the suite's minimum of 10 timed runs\n",
               opt.runs);
  json out;
  out["tool"] = "coil_gemm_bench";
  out["date"] = now_iso();
  out["host"] = gemm_host_json();
  out["load_average_start"] = load_average();
  out["config"] = json{{"threads", opt.threads},
                       {"runs", opt.runs},
                       {"warmup", opt.warmup},
                       {"sizes", opt.sizes},
                       {"bf16_sizes", opt.bf16_sizes},
                       {"bf16_only", opt.bf16_only},
                       {"peak_seconds", opt.peak_seconds}};
  const char* isa_env = std::getenv("COIL_CPU_ISA");
  out["coil_cpu_isa_env"] = isa_env ? isa_env : "";
  fmt::print("coil GEMM benchmark on {} ({} logical CPUs), oneDNN {}\n",
             out["host"].value("cpu", std::string("?")), out["host"]["logical_cpus"].get<int>(),
             out["host"]["onednn"].get<std::string>());
  fmt::print("threads {}, {} warm-up + {} timed runs (median), load average {}\n",
             fmt::join(opt.threads, ","), opt.warmup, opt.runs, load_average());

  // coil compiles into a private, fresh cache directory (removed at the end).
  char tmpl[] = "/tmp/coil-gemm-bench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    fmt::print(stderr, "coil_gemm_bench: cannot create a temporary directory\n");
    return 2;
  }
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{tmpl};
  setenv("COIL_CACHE_DIR", tmpl, 1);

  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx512bf16 = __builtin_cpu_supports("avx512bf16");
  Results res;
  json peaks = json::array();
  json coil_skipped = json::object();
  const int64_t XM = 512, XK = 1024, XN = 1024;  // x@W
  const int64_t MB = 64, MH = 256;               // the MLP

  for (int t : opt.threads) {
    omp_set_num_threads(t);
    set_num_threads(t);
    Peaks p;
    if (avx512) p.fp32 = fp32_fma_peak_flops(t, opt.peak_seconds, 50);
    if (avx512bf16) p.bf16 = bf16_dot_peak_flops(t, opt.peak_seconds, 50);
    res.peaks[t] = p;
    peaks.push_back(json{{"threads", t},
                         {"fp32_fma_gflops", p.fp32 / 1e9},
                         {"bf16_dot_gflops", p.bf16 / 1e9},
                         {"per_thread_fp32_gflops", p.fp32 / 1e9 / t}});
    fmt::print("\n{} thread(s): fp32 FMA peak {:.1f} GFLOP/s, bf16 vdpbf16ps peak {}\n", t,
               p.fp32 / 1e9,
               avx512bf16 ? fmt::format("{:.1f} GFLOP/s", p.bf16 / 1e9) : std::string("-"));
    print_header();

    using GemmFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*,
                            int64_t, bool, float*, int64_t);
    std::vector<std::pair<std::string, GemmFn>> libs = {{"dnnl_sgemm", &ext::sgemm_dnnl}};
#ifdef COIL_HAVE_OPENBLAS
    libs.push_back({"openblas_sgemm", &ext::sgemm_openblas});
#endif

    for (int64_t n : opt.bf16_only ? std::vector<int64_t>{} : opt.sizes) {
      Floats a(n * n, 1), b(n * n, 2), c(n * n, 3);
      for (auto& [name, gemm] : libs) {
        Timing tm =
            measure([&] { gemm(n, n, n, a.get(), n, false, b.get(), n, false, c.get(), n); },
                    opt.warmup, opt.runs);
        res.add(fmt::format("sq{}", n), fmt::format("A@B, f32[{0},{0}]", n), name, t,
                2.0 * n * n * n, tm);
      }
    }

    if (!opt.bf16_only) {
      Floats x(XM * XK, 4), w(XK * XN, 5), bias(XN, 6), y(XM * XN, 7);
      const double flops = 2.0 * XM * XN * XK;
      for (auto& [name, gemm] : libs) {
        Timing tm =
            measure([&] { gemm(XM, XN, XK, x.get(), XK, false, w.get(), XN, false, y.get(), XN); },
                    opt.warmup, opt.runs);
        res.add("xw", "x@W, x[512,1024] W[1024,1024]", name, t, flops, tm);
      }
      for (auto& [name, gemm] : libs) {
        Timing tm = measure(
            [&] {
              gemm(XM, XN, XK, x.get(), XK, false, w.get(), XN, false, y.get(), XN);
              bias_relu(y.get(), bias.get(), XM, XN);
            },
            opt.warmup, opt.runs);
        res.add("xw_bias_relu", "relu(x@W+b), as xw", name + "+pass", t, flops, tm);
      }
      {
        DnnlMatmul mm(XM, XN, XK, dnnl_f32, true);
        mm.prepare(w.get());
        Timing tm = measure([&] { mm.run(x.get(), bias.get(), y.get()); }, opt.warmup, opt.runs);
        res.add("xw_bias_relu", "relu(x@W+b), as xw", "dnnl_matmul_fused", t, flops, tm, false,
                json{{"implementation", mm.implementation()},
                     {"note", "W pre-reordered, bias+relu fused: " + mm.implementation()}});
      }
      Timing tm = measure([&] { bias_relu(y.get(), bias.get(), XM, XN); }, opt.warmup, opt.runs);
      res.add("bias_relu_pass", "y=max(y+b,0), y[512,1024]", "omp_loop", t, 0, tm, false,
              json{{"gbps", 2.0 * XM * XN * 4 / (tm.median_ms * 1e-3) / 1e9},
                   {"note", fmt::format("{:.1f} GB/s (read+write y)",
                                        2.0 * XM * XN * 4 / (tm.median_ms * 1e-3) / 1e9)}});
    }

    if (!opt.bf16_only) {
      Floats x(MB * MH, 8), h0(MB * MH, 0), h1(MB * MH, 0);
      std::vector<Floats> ws, bs;
      for (int l = 0; l < 3; ++l) ws.emplace_back(MH * MH, 10 + l), bs.emplace_back(MH, 20 + l);
      for (auto& [name, gemm] : libs) {
        // torch's Linear: y = x @ W^T + b, W [out, in]: B transposed.
        auto run = [&] {
          const float* in = x.get();
          float* bufs[2] = {h0.get(), h1.get()};
          for (int l = 0; l < 3; ++l) {
            float* o = bufs[l % 2];
            gemm(MB, MH, MH, in, MH, false, ws[l].get(), MH, true, o, MH);
            bias_relu(o, bs[l].get(), MB, MH);
            in = o;
          }
        };
        Timing tm = measure(run, std::max(opt.warmup, 10), std::max(opt.runs, 100));
        res.add("mlp3", "3x relu(linear), x[64,256], W[256,256]", name + "+pass", t,
                3 * 2.0 * MB * MH * MH, tm);
      }
    }

    for (int64_t BF : avx512bf16 ? opt.bf16_sizes : std::vector<int64_t>{}) {
      Floats a(BF * BF, 30), b(BF * BF, 31), c(BF * BF, 32);
      std::vector<uint16_t> a16(BF * BF), b16(BF * BF);
      for (int64_t i = 0; i < BF * BF; ++i)
        a16[i] = to_bf16(a.get()[i]), b16[i] = to_bf16(b.get()[i]);
      DnnlMatmul mm(BF, BF, BF, dnnl_bf16, false);
      mm.prepare(b16.data());
      Timing tm = measure([&] { mm.run(a16.data(), nullptr, c.get()); }, opt.warmup, opt.runs);
      res.add(fmt::format("bf16_sq{}", BF), fmt::format("A@B, bf16[{0},{0}] -> f32", BF),
              "dnnl_matmul_bf16", t, 2.0 * BF * BF * BF, tm, true,
              json{{"implementation", mm.implementation()},
                   {"note", "B pre-reordered: " + mm.implementation()}});
    }

    if (opt.coil) {
      if (!out.contains("coil_first_compile_ms")) {
        // The one-off costs of the process and the fresh cache directory (toolchain discovery,
        // the ISA probe, the precompiled header), paid by a tiny graph and reported apart.
        Graph g;
        g.add_output(g.add_node("relu", {g.add_input("x", DType::F32, make_shape({64}))}), "y");
        auto t0 = Clock::now();
        try {
          compile(g);
          out["coil_first_compile_ms"] = ms_since(t0);
          out["coil_isa"] = host_isa().name;
          fmt::print(
              "coil: first compile in the process (a tiny graph, one-off costs): {:.0f} ms\n",
              out["coil_first_compile_ms"].get<double>());
        } catch (const std::exception& e) {
          out["coil_first_compile_ms"] = nullptr;
          fmt::print("coil: the first compile failed: {}\n", e.what());
        }
      }
      coil_rows(opt, t, res, coil_skipped);
    }
  }

  if (!opt.torch_json.empty()) {
    std::ifstream f(opt.torch_json);
    if (!f) {
      fmt::print(stderr, "coil_gemm_bench: cannot read {}\n", opt.torch_json);
      return 2;
    }
    json torch = json::parse(f);
    out["torch"] = json{{"version", torch.value("torch_version", std::string("?"))},
                        {"load_average_start", torch.value("load_average_start", std::string())},
                        {"load_average_end", torch.value("load_average_end", std::string())}};
    fmt::print("\nPyTorch {} eager ({}):\n", torch.value("torch_version", std::string("?")),
               opt.torch_json);
    print_header();
    for (const auto& r : torch["rows"]) {
      res.rows.push_back(r);
      res.print_row(r);
    }
  }

  out["peaks"] = peaks;
  out["rows"] = res.rows;
  out["coil_skipped"] = coil_skipped;
  out["load_average_end"] = load_average();
  fmt::print(
      "\n%peak: GFLOP/s / the FMA peak at the same thread count (bf16 rows: vdpbf16ps "
      "peak).\nload average at the end: {}\n",
      load_average());
  if (!coil_skipped.empty())
    fmt::print("coil: {} workload/thread rows skipped (compile failed; messages in the JSON)\n",
               coil_skipped.size());

  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "coil_gemm_bench: cannot write {}\n", opt.json_path);
      return 2;
    }
    fmt::print("wrote {}\n", opt.json_path);
  }
  return 0;
}

}  // namespace
}  // namespace coil::bench

int main(int argc, char** argv) {
  try {
    return coil::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "coil_gemm_bench: " << e.what() << "\n";
    return 3;
  }
}

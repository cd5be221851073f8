// coil_cpu_bench: the coil half of the CPU benchmark suite (docs/benchmarks.md).
//
// In a fresh, empty COIL_CACHE_DIR, a tiny graph is compiled first (the one-off costs of the
// process and of the cache directory, reported apart). Then for each workload: compile its
// graph cold (its module is not cached yet; --compile-samples times, its cache entry removed
// between them, the median reported) and warm (a hit), check the result once against
// the reference interpreter, then at each thread count measure, each as warm-up calls followed
// by timed calls (median reported):
//   - the bandwidth ceiling at the workload's own footprint: a STREAM-like copy over two arrays
//     of (bytes read + bytes written) / 2 each for workloads that write as much as they read, a
//     read-only sum over the bytes read for reductions (bandwidth.h); for copies also the same
//     copy with non-temporal stores, as a second, informative number; the ceiling is
//     measured before and after the workload and its median taken over both;
//   - coil: CompiledModel::run_into with inputs created once and outputs allocated once, so no
//     timed run page-faults fresh memory.
// Prints a table and writes JSON (--json); bench/report.py merges it with
// bench/eager_bench.py's torch numbers.
//
//   coil_cpu_bench [--threads 1,2] [--runs 20] [--warmup 3] [--workloads a,b,...]
//                  [--compile-samples 3] [--scale 1.0] [--no-check] [--json FILE] [--list]
//                  [--size-generic [--rounds 5]]
//
// --size-generic times each workload's size-generic model (its leading dim a size symbol)
// against the model compiled for its size instead (issue 20; docs/dynamic-shapes.md).

#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bandwidth.h"
#include "bench_host.h"
#include "coil/coil.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "runtime/toolchain.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

namespace coil::bench {
namespace {

// ---------------------------------------------------------------- workloads

enum class Ceiling { Copy, Read };

struct Workload {
  std::string id;
  std::string desc;
  std::string text;  // the graph, in coil's text format, sizes bound
  Ceiling ceiling = Ceiling::Copy;
  /// The check's absolute tolerance when the dtype's default is too tight: f32 sums of n
  /// values in [-2, 2) round their partial sums (|partial| ~ 2*sqrt(n)) at each step, and a
  /// row that cancels to near 0 then fails a 1e-5 atol. 1e-6*n covers that with margin.
  double check_atol = -1;
  /// The same graph with its leading dimension the size symbol n (--size-generic), and n's
  /// value in `text`.
  std::string generic;
  int64_t n = 0;
};

int64_t scaled(int64_t n, double scale) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(n) * scale)));
}

std::string gelu_affine(const char* dt, const std::string& rows) {
  return fmt::format(
      "input x: {0}[{1}, 1024]\n"
      "input w: {0}[1024]\n"
      "input b: {0}[1024]\n"
      "t0 = mul(x, w)\n"
      "t1 = add(t0, b)\n"
      "y = gelu(t1)\n"
      "output y\n",
      dt, rows);
}

std::string scale_shift(const std::string& n) {
  return fmt::format(
      "input x: f32[{}]\n"
      "half = full() {{shape=[], value=0.5, dtype=f32}}\n"
      "one = full() {{shape=[], value=1.0, dtype=f32}}\n"
      "t0 = mul(x, half)\n"
      "y = add(t0, one)\n"
      "output y\n",
      n);
}

std::string softmax_rows(const std::string& rows, int64_t cols) {
  return fmt::format(
      "input x: f32[{}, {}]\n"
      "y = softmax(x) {{axis=-1}}\n"
      "output y\n",
      rows, cols);
}

/// The suite. Sizes are the at scale 1; --scale multiplies the leading dimension
/// (the element count for the 1-D cases).
std::vector<Workload> all_workloads(double s) {
  const int64_t n16m = scaled(int64_t{16} << 20, s), rows = scaled(16384, s);
  const int64_t frows = scaled(4096, s), irows = scaled(10000, s);
  auto layer_norm = [](const std::string& rows) {
    return fmt::format(
        "input x: f32[{}, 1024]\n"
        "input w: f32[1024]\n"
        "input b: f32[1024]\n"
        "y = layer_norm(x, w, b) {{dims=1, eps=1e-5}}\n"
        "output y\n",
        rows);
  };
  auto sum = [](const std::string& rows, int axis) {
    return fmt::format("input x: f32[{}, 1024]\ny = sum(x) {{axes=[{}]}}\noutput y\n", rows, axis);
  };
  auto transpose_add = [](const std::string& rows) {
    return fmt::format(
        "input x: f32[{0}, 4096]\n"
        "input y: f32[4096, {0}]\n"
        "xt = transpose(x) {{dim0=0, dim1=1}}\n"
        "z = add(xt, y)\n"
        "output z\n",
        rows);
  };
  // Each graph at its leading size `n` and with n symbolic (`make` formats either).
  std::vector<Workload> w;
  auto add = [&](const char* id, std::string desc, int64_t n,
                 const std::function<std::string(const std::string&)>& make, Ceiling c,
                 double atol = -1) {
    w.push_back({id, std::move(desc), make(std::to_string(n)), c, atol, make("n"), n});
  };
  add("a", fmt::format("x*0.5+1, f32[{}]", n16m), n16m, scale_shift, Ceiling::Copy);
  add(
      "b", fmt::format("gelu(x*w+b), f32[{}, 1024]", rows), rows,
      [](const std::string& r) { return gelu_affine("f32", r); }, Ceiling::Copy);
  add(
      "c", fmt::format("softmax(-1), f32[{}, 1024]", rows), rows,
      [](const std::string& r) { return softmax_rows(r, 1024); }, Ceiling::Copy);
  add("d", fmt::format("layer_norm(w, b), f32[{}, 1024]", rows), rows, layer_norm, Ceiling::Copy);
  add(
      "e1", fmt::format("sum(-1), f32[{}, 1024]", rows), rows,
      [&](const std::string& r) { return sum(r, 1); }, Ceiling::Read, 1e-6 * 1024);
  add(
      "e0", fmt::format("sum(0), f32[{}, 1024]", rows), rows,
      [&](const std::string& r) { return sum(r, 0); }, Ceiling::Read,
      1e-6 * static_cast<double>(rows));
  add("f", fmt::format("x.t()+y, x f32[{}, 4096]", frows), frows, transpose_add, Ceiling::Copy);
  add(
      "i", fmt::format("softmax(-1), f32[{}, 1000]", irows), irows,
      [](const std::string& r) { return softmax_rows(r, 1000); }, Ceiling::Copy);
  add(
      "j", fmt::format("gelu(x*w+b), bf16[{}, 1024]", rows), rows,
      [](const std::string& r) { return gelu_affine("bf16", r); }, Ceiling::Copy);
  add("k", fmt::format("x*0.5+1, f32[{}] (tail)", n16m + 3), n16m + 3, scale_shift, Ceiling::Copy);
  return w;
}

// ---------------------------------------------------------------- helpers

struct Options {
  std::vector<int> threads{1, 2};
  int runs = 20;
  int warmup = 3;
  int compile_samples = 3;
  std::vector<std::string> workloads;  // empty: all
  double scale = 1.0;
  bool check = true;
  bool list = false;
  bool size_generic = false;
  int rounds = 5;
  std::string json_path;
  std::string write_graphs;  // a directory: each workload's graph as <id>.coil, then exit
};

/// The options through CLI11 (as the coil tool): bad values stop with the usage and exit 2.
Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app{"coil_cpu_bench: the CPU workloads against the bandwidth ceiling"};
  app.add_option("--threads", o.threads, "thread counts, e.g. 1,2")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--runs", o.runs, "timed runs per measurement")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_option("--workloads", o.workloads, "a subset, e.g. a,b,e0")->delimiter(',');
  app.add_option("--compile-samples", o.compile_samples,
                 "cold compiles per workload, the median reported")
      ->check(CLI::PositiveNumber);
  app.add_option("--scale", o.scale, "multiplies every workload's leading dimension")
      ->check(CLI::PositiveNumber);
  bool no_check = false;
  app.add_flag("--no-check", no_check, "skip the comparison with the reference interpreter");
  app.add_option("--json", o.json_path, "write the results here");
  app.add_flag("--list", o.list, "print the workloads and exit");
  app.add_flag("--size-generic", o.size_generic,
               "time each workload's size-generic model (leading dim symbolic) against the one "
               "compiled for its size, alternating --rounds blocks of --runs (issue 20)");
  app.add_option("--rounds", o.rounds, "alternated blocks per model with --size-generic")
      ->check(CLI::PositiveNumber);
  app.add_option("--write-graphs", o.write_graphs,
                 "write each workload's graph as DIR/<id>.coil and exit (bench/roofline.py)")
      ->type_name("DIR");
  parse_or_exit(app, argc, argv);
  o.check = !no_check;
  return o;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

/// The median (and min, max) of a list of times.
Timing summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  size_t n = t.size();
  double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  return {med, t.front(), t.back(), static_cast<int>(n)};
}

/// `warmup` untimed calls, then `runs` calls each timed on its own (back to back, as
/// eager_bench.py times torch: a workload's data then partly stays in the L3 between calls,
/// the same for the ceiling, coil and torch). The times are appended to `times`.
void time_block(const std::function<void()>& f, int warmup, int runs, std::vector<double>& times) {
  for (int i = 0; i < warmup; ++i) f();
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    f();
    times.push_back(ms_since(start));
  }
}

json timing_json(const Timing& t, double bytes) {
  return json{{"median_ms", t.median_ms},
              {"min_ms", t.min_ms},
              {"max_ms", t.max_ms},
              {"runs", t.runs},
              {"gbps", bytes / (t.median_ms * 1e-3) / 1e9}};
}

int64_t spec_bytes(const ValueSpec& v) {
  return shape_numel(v.shape) * dtype_size(v.dtype);
}

json spec_json(const ValueSpec& v) {
  return json{{"name", v.name}, {"dtype", std::string(dtype_name(v.dtype))}, {"shape", v.shape}};
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

/// A fresh, empty, private cache directory; COIL_CACHE_DIR points at it.
fs::path fresh_cache_dir(const fs::path& root, const std::string& name) {
  fs::path dir = root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  setenv("COIL_CACHE_DIR", dir.c_str(), 1);
  return dir;
}

/// Buffers for the ceiling kernels, allocated and first-touched once at the largest size. Like
/// coil's own large tensors (Tensor::empty) they are 2 MiB aligned and advised to use huge
/// pages, so that the ceiling has the same page size as the workloads it bounds (4 KiB pages
/// cost a row sum ~40% here).
struct CeilingBuffers {
  std::unique_ptr<float[], decltype(&std::free)> a{nullptr, &std::free};
  std::unique_ptr<float[], decltype(&std::free)> b{nullptr, &std::free};
  int64_t floats = 0;

  void reserve(int64_t n, int threads) {
    if (n <= floats) return;
    constexpr size_t kHuge = size_t{2} << 20;
    size_t bytes = (static_cast<size_t>(n) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
    a.reset(static_cast<float*>(std::aligned_alloc(kHuge, bytes)));
    b.reset(static_cast<float*>(std::aligned_alloc(kHuge, bytes)));
    if (!a || !b) throw std::bad_alloc();
    ::madvise(a.get(), bytes, MADV_HUGEPAGE);
    ::madvise(b.get(), bytes, MADV_HUGEPAGE);
    fill_floats(a.get(), n, 1.0f, threads);
    fill_floats(b.get(), n, 0.0f, threads);
    floats = n;
  }
};

volatile float g_sink = 0;

/// --size-generic: each workload's model compiled for its size against its size-generic model
/// (the leading dim the symbol n, bound at the call), the same inputs and output buffers,
/// timed in alternating blocks (--rounds of --runs each, after --warmup calls), medians over
/// all timed runs. The two outputs must agree (the generic one is checked against the
/// specialized one, whose code the default mode checks against the interpreter).
json size_generic_suite(const Options& opt, const std::vector<Workload>& suite) {
  json rows = json::array();
  fmt::print("\n{:<4} {:>3} {:>14} {:>14} {:>8} {:>8}\n", "wl", "thr", "specialized ms",
             "generic ms", "diff", "check");
  for (const Workload& w : suite) {
    CompiledModel spec = compile(parse_graph(w.text, "<" + w.id + ">"));
    CompiledModel gen = compile(parse_graph(w.generic, "<" + w.id + " generic>"));
    std::vector<Tensor> inputs;
    uint64_t seed = 1;
    for (const auto& v : spec.inputs()) inputs.push_back(random_tensor(v.dtype, v.shape, seed++));
    std::vector<TensorRef> refs;
    for (const auto& t : inputs) refs.push_back(t.ref());
    std::vector<Tensor> out_s, out_g;
    for (const auto& v : spec.outputs()) {
      out_s.push_back(Tensor::zeros(v.dtype, v.shape));
      out_g.push_back(Tensor::zeros(v.dtype, v.shape));
    }
    spec.run_into(refs, out_s);
    gen.run_into(refs, out_g);
    bool ok = true;
    for (size_t i = 0; i < out_s.size(); ++i) {
      Tolerance tol = default_tolerance(out_s[i].dtype());
      if (w.check_atol >= 0) tol.atol = w.check_atol;
      ok = ok && compare_tensors(out_g[i], out_s[i], tol).ok;
    }
    const CompiledModel::SizeStats st = gen.size_stats();
    json per_thread = json::array();
    for (int t : opt.threads) {
      set_num_threads(t);
      std::vector<double> ts, tg;
      // Both write the same output buffers: two 64 MB outputs may sit on pages of different
      // kinds (huge or not), which moved f's transposed stores by 20% on the GPU host while the
      // two kernels alone timed the same (bench/experiments/f_tile).
      for (int r = 0; r < opt.rounds; ++r) {
        time_block([&] { spec.run_into(refs, out_s); }, opt.warmup, opt.runs, ts);
        time_block([&] { gen.run_into(refs, out_s); }, opt.warmup, opt.runs, tg);
      }
      const Timing a = summarize(ts), b = summarize(tg);
      const double diff = b.median_ms / a.median_ms - 1;
      fmt::print("{:<4} {:>3} {:>14.3f} {:>14.3f} {:>+7.1f}% {:>8}\n", w.id, t, a.median_ms,
                 b.median_ms, 100 * diff, ok ? "ok" : "FAIL");
      std::fflush(stdout);
      per_thread.push_back(json{{"threads", t},
                                {"specialized", timing_json(a, 0)},
                                {"generic", timing_json(b, 0)},
                                {"generic_vs_specialized", diff}});
    }
    rows.push_back(json{{"id", w.id},
                        {"desc", w.desc},
                        {"n", w.n},
                        {"generic_graph", w.generic},
                        {"generic_matches_specialized", ok},
                        {"generic_size_generic", st.specialized == 0},
                        {"threads", per_thread}});
  }
  return rows;
}

// ---------------------------------------------------------------- the run

int main_impl(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  std::vector<Workload> suite = all_workloads(opt.scale);
  if (!opt.write_graphs.empty()) {
    std::filesystem::create_directories(opt.write_graphs);
    for (const auto& w : suite) {
      std::ofstream(std::filesystem::path(opt.write_graphs) / (w.id + ".coil"))
          << "# " << w.desc << " (coil_cpu_bench workload " << w.id << ")\n"
          << w.text;
    }
    return 0;
  }
  if (opt.list) {
    for (const auto& w : suite)
      fmt::print("{:<4} {:<40} ceiling: {}\n", w.id, w.desc,
                 w.ceiling == Ceiling::Copy ? "copy" : "read");
    return 0;
  }
  if (!opt.workloads.empty()) {
    std::vector<Workload> picked;
    for (const auto& id : opt.workloads) {
      auto it =
          std::find_if(suite.begin(), suite.end(), [&](const Workload& w) { return w.id == id; });
      if (it == suite.end()) {
        fmt::print(stderr, "coil_cpu_bench: unknown workload '{}' (see --list)\n", id);
        std::exit(2);
      }
      picked.push_back(*it);
    }
    suite = picked;
  }
  if (opt.runs < 10)
    fmt::print(stderr, "warning: --runs {} is below the suite's minimum of 10 timed runs\n",
               opt.runs);

  const int max_threads = *std::max_element(opt.threads.begin(), opt.threads.end());
  char tmpl[] = "/tmp/coil-cpu-bench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    fmt::print(stderr, "coil_cpu_bench: cannot create a temporary directory\n");
    return 2;
  }
  const fs::path cache_root = tmpl;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{cache_root};

  json out;
  out["tool"] = "coil_cpu_bench";
  out["date"] = now_iso();
  out["host"] = host_json();
  out["load_average_start"] = load_average();
  out["config"] = json{{"threads", opt.threads},
                       {"runs", opt.runs},
                       {"warmup", opt.warmup},
                       {"scale", opt.scale},
                       {"check", opt.check},
                       {"omp_proc_bind", getenv("OMP_PROC_BIND") ? getenv("OMP_PROC_BIND") : ""}};

  fmt::print("coil CPU benchmark on {} ({} logical CPUs), {}\n",
             out["host"].value("cpu", std::string("?")), out["host"]["logical_cpus"].get<int>(),
             out["host"]["compiler"].get<std::string>());
  fmt::print("threads {}, {} warm-up + {} timed runs (median), load average {}\n",
             fmt::join(opt.threads, ","), opt.warmup, opt.runs, load_average());

  // One fresh, empty cache directory for the run. The first compile in it (a tiny graph) pays
  // the one-off costs: in the process, toolchain discovery and OpenMP start-up; in the cache
  // directory, what coil builds once per machine (today the vector-ISA probe and the
  // precompiled kernel header). Each workload's cold compile then misses only on its own
  // module (every workload's source differs), which is the per-graph cost.
  fresh_cache_dir(cache_root, "cache");
  {
    Graph g = parse_graph(scale_shift("64"), "<first>");
    auto t0 = Clock::now();
    CompiledModel m = compile(g);
    out["first_compile_in_process_ms"] = ms_since(t0);
    json stages = json::object();
    for (const auto& [name, s] : m.report().stage_seconds) stages[name] = s * 1e3;
    out["first_compile_stages_ms"] = stages;
    fmt::print(
        "first compile (tiny graph; toolchain discovery and the cache directory's one-off "
        "work): {:.1f} ms\n",
        out["first_compile_in_process_ms"].get<double>());
  }

  if (opt.size_generic) {
    out["size_generic"] = size_generic_suite(opt, suite);
    out["load_average_end"] = load_average();
    fmt::print("load average at the end: {}\n", load_average());
    bool all_ok = true;
    for (const auto& r : out["size_generic"])
      all_ok = all_ok && r["generic_matches_specialized"].get<bool>();
    if (!opt.json_path.empty()) std::ofstream(opt.json_path) << out.dump(2) << "\n";
    return all_ok ? 0 : 1;
  }

  CeilingBuffers ceiling_buffers;
  json results = json::array();
  fmt::print("\n{:<4} {:>3} {:>9} {:>6} {:>9} {:>7} {:>10} {:>9} {:>7} {:>10} {:>6}\n", "wl", "thr",
             "min MB", "ceil", "ceil GB/s", "nt GB/s", "coil ms", "coil GB/s", "% ceil",
             "cold comp", "check");
  for (const Workload& w : suite) {
    json r;
    r["id"] = w.id;
    r["desc"] = w.desc;
    r["graph"] = w.text;
    Graph g = parse_graph(w.text, "<" + w.id + ">");

    // Cold: this graph's module is not in the cache yet (its entry is removed before each
    // further sample). Warm: the same compile again (a hit).
    std::vector<double> cold_samples;
    auto t0 = Clock::now();
    CompiledModel m = compile(g);
    cold_samples.push_back(ms_since(t0));
    for (int i = 1; i < opt.compile_samples; ++i) {
      fs::remove_all(m.report().so_path.parent_path());
      t0 = Clock::now();
      CompiledModel again = compile(g);
      cold_samples.push_back(ms_since(t0));
      if (again.report().cache_hit) {
        fmt::print(stderr, "coil_cpu_bench: {}'s cold compile sample hit the cache\n", w.id);
        std::exit(1);
      }
    }
    const double cold_ms = summarize(cold_samples).median_ms;
    json stages = json::object();
    for (const auto& [name, s] : m.report().stage_seconds) stages[name] = s * 1e3;
    t0 = Clock::now();
    bool warm_hit = compile(g).report().cache_hit;
    double warm_ms = ms_since(t0);
    r["compile"] = json{{"cold_ms", cold_ms},
                        {"cold_samples_ms", cold_samples},
                        {"cold_cache_hit", m.report().cache_hit},
                        {"warm_ms", warm_ms},
                        {"warm_cache_hit", warm_hit},
                        {"cold_stages_ms", stages},
                        {"kernels", m.report().kernels.size()},
                        {"arena_bytes", m.report().arena_bytes}};

    int64_t bytes_read = 0, bytes_written = 0;
    json ins = json::array(), outs_json = json::array();
    for (const auto& v : m.inputs()) bytes_read += spec_bytes(v), ins.push_back(spec_json(v));
    for (const auto& v : m.outputs())
      bytes_written += spec_bytes(v), outs_json.push_back(spec_json(v));
    const int64_t min_bytes = bytes_read + bytes_written;
    r["inputs"] = ins;
    r["outputs"] = outs_json;
    r["bytes_read"] = bytes_read;
    r["bytes_written"] = bytes_written;
    r["min_bytes"] = min_bytes;

    // Inputs once, outputs once (reused by every run).
    std::vector<Tensor> inputs;
    uint64_t seed = 1;
    for (const auto& v : m.inputs()) inputs.push_back(random_tensor(v.dtype, v.shape, seed++));
    std::vector<TensorRef> refs;
    for (const auto& t : inputs) refs.push_back(t.ref());
    std::vector<Tensor> outputs;
    for (const auto& v : m.outputs()) outputs.push_back(Tensor::zeros(v.dtype, v.shape));

    json check = json{{"done", opt.check}};
    std::string check_word = "-";
    if (opt.check) {
      m.run_into(refs, outputs);
      auto t1 = Clock::now();
      std::vector<Tensor> want = interpret(g, inputs);
      bool ok = true;
      double max_abs = 0, max_rel = 0;
      std::string msg;
      for (size_t i = 0; i < outputs.size(); ++i) {
        Tolerance tol = default_tolerance(m.outputs()[i].dtype);
        if (w.check_atol >= 0) tol.atol = w.check_atol;
        CompareResult c = compare_tensors(outputs[i], want[i], tol);
        ok = ok && c.ok;
        max_abs = std::max(max_abs, c.max_abs_error);
        max_rel = std::max(max_rel, c.max_rel_error);
        if (!c.ok && msg.empty()) msg = c.message;
      }
      check = json{{"done", true},
                   {"ok", ok},
                   {"max_abs_error", max_abs},
                   {"max_rel_error", max_rel},
                   {"atol_override", w.check_atol >= 0 ? json(w.check_atol) : json(nullptr)},
                   {"message", msg},
                   {"seconds", ms_since(t1) / 1e3}};
      check_word = ok ? "ok" : "FAIL";
    }
    r["check"] = check;

    // The ceiling at this workload's footprint.
    const bool copy = w.ceiling == Ceiling::Copy;
    const int64_t ceil_floats = copy ? (min_bytes / 2 + 3) / 4 : (bytes_read + 3) / 4;  // per array
    const double ceil_bytes =
        copy ? 8.0 * static_cast<double>(ceil_floats) : 4.0 * static_cast<double>(ceil_floats);
    ceiling_buffers.reserve(ceil_floats, max_threads);
    r["ceiling"] = json{{"kind", copy ? "copy" : "read"},
                        {"array_bytes", ceil_floats * 4},
                        {"bytes_per_run", ceil_bytes}};

    json per_thread = json::array();
    for (int t : opt.threads) {
      set_num_threads(t);
      // Blocks: ceiling, [non-temporal copy,] coil, ceiling again. The ceiling's median is
      // over both of its blocks, so a drift of the machine's bandwidth during the coil block
      // (it is shared) mostly cancels.
      float* dst = ceiling_buffers.b.get();
      const float* src = ceiling_buffers.a.get();
      std::function<void()> ceiling_run;
      if (copy)
        ceiling_run = [&] { copy_floats(dst, src, ceil_floats, t); };
      else
        ceiling_run = [&] { g_sink = g_sink + sum_floats(src, ceil_floats, t); };
      std::vector<double> ceiling_times, nt_times, coil_times;
      time_block(ceiling_run, opt.warmup, opt.runs, ceiling_times);
      bool streaming = true;
      if (copy)
        time_block([&] { streaming = copy_floats_nontemporal(dst, src, ceil_floats, t); },
                   opt.warmup, opt.runs, nt_times);
      const long faults0 = minor_faults();
      time_block([&] { m.run_into(refs, outputs); }, opt.warmup, opt.runs, coil_times);
      const double faults = static_cast<double>(minor_faults() - faults0) / opt.runs;
      time_block(ceiling_run, opt.warmup, opt.runs, ceiling_times);
      const Timing ct = summarize(ceiling_times);
      const Timing kt = summarize(coil_times);
      json nt_json = nullptr;
      if (copy && streaming) nt_json = timing_json(summarize(nt_times), ceil_bytes);
      json cj = timing_json(ct, ceil_bytes);
      json kj = timing_json(kt, static_cast<double>(min_bytes));
      const double ceil_gbps = cj["gbps"].get<double>();
      kj["frac_ceiling"] = kj["gbps"].get<double>() / ceil_gbps;
      kj["minor_faults_per_run"] = faults;
      per_thread.push_back(json{{"threads", t},
                                {"omp_max_threads", omp_get_max_threads()},
                                {"ceiling", cj},
                                {"copy_nontemporal", nt_json},
                                {"coil", kj}});
      fmt::print(
          "{:<4} {:>3} {:>9.1f} {:>6} {:>9.1f} {:>7} {:>10.3f} {:>9.1f} {:>6.0f}% {:>8.0f}ms "
          "{:>6}\n",
          w.id, t, static_cast<double>(min_bytes) / 1e6, copy ? "copy" : "read", ceil_gbps,
          nt_json.is_null() ? std::string("-")
                            : fmt::format("{:.1f}", nt_json["gbps"].get<double>()),
          kt.median_ms, kj["gbps"].get<double>(), 100 * kj["frac_ceiling"].get<double>(), cold_ms,
          check_word);
      std::fflush(stdout);
    }
    r["threads"] = per_thread;
    results.push_back(r);
  }
  out["workloads"] = results;
  out["load_average_end"] = load_average();
  fmt::print("load average at the end: {}\n", load_average());

  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "coil_cpu_bench: cannot write {}\n", opt.json_path);
      return 2;
    }
    fmt::print("wrote {}\n", opt.json_path);
  }
  bool all_ok = true;
  for (const auto& r : results)
    if (r["check"].value("done", false) && !r["check"].value("ok", false)) all_ok = false;
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace coil::bench

int main(int argc, char** argv) {
  try {
    return coil::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "coil_cpu_bench: " << e.what() << "\n";
    return 3;
  }
}

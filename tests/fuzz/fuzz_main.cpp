// coil_fuzz: the differential fuzzer (tests/fuzz/README.md). Generates random graphs (graph i
// of seed S is generated from mix_seed(S, i)), or reads .coil cases, runs each compiled (fusion
// on and off) against the reference interpreter in a forked child, shrinks each failure and
// saves it, then prints a summary. Exit status: 0 when nothing failed (with --known-failures:
// when the failures are exactly the listed ones), 1 otherwise, 2 on a usage error.
#include <CLI/CLI.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <set>

#include <fmt/format.h>

#include "coil/error.h"
#include "fuzz/batch.h"
#include "fuzz/check_values.h"
#include "fuzz/cuda_emit.h"
#include "fuzz/evaluate.h"
#include "fuzz/failure_store.h"
#include "fuzz/forked_runner.h"
#include "fuzz/graph_generator.h"
#include "fuzz/shrinker.h"
#include "graph/text_format.h"
#include "runtime/isa.h"

namespace fs = std::filesystem;
using namespace coil;
using namespace coil::fuzz;

namespace {

// One graph to run: generated (key = its index) or read from a file (key = the file name).
struct Item {
  std::string key, origin;
  fs::path file;  // empty for a generated graph
  uint64_t graph_seed = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Compiles two tiny graphs once, in a child, so that the precompiled headers of the fresh cache
// exist before the parallel children need them (otherwise each of them builds its own).
void warm_cache() {
  const char* graphs[] = {"input x: f32[4]\ny = neg(x)\noutput y\n",
                          "input a: f32[4, 4]\ny = matmul(a, a)\noutput y\n"};
  run_forked(2, 1, 120, [&](size_t i) {
    return evaluate_case(FuzzCase{parse_graph(graphs[i]), {}, 1, 1, ""}, EvalOptions{0, true});
  });
}

}  // namespace

// Runs the built cases in batches of `batch` (fuzz/batch.h): one compile per batch. A batch that
// passes passes each member; a failing one runs its members alone, so each failure belongs to
// its own graph. A failure that only the batch shows (members interacting: the memory plan, a
// kernel-count limit) goes to the batch's first member, with the merged case to shrink.
static std::vector<Outcome> run_batched(std::vector<FuzzCase>& cases,
                                        const std::vector<bool>& built, int batch, int jobs,
                                        int timeout_s, const EvalOptions& eval) {
  std::vector<std::vector<size_t>> groups;
  for (size_t j = 0; j < cases.size(); ++j) {
    if (!built[j]) continue;
    if (groups.empty() || groups.back().size() >= static_cast<size_t>(batch)) groups.emplace_back();
    groups.back().push_back(j);
  }
  std::vector<FuzzCase> merged(groups.size());
  std::vector<bool> merged_ok(groups.size(), false);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<const FuzzCase*> members;
    for (size_t j : groups[g]) members.push_back(&cases[j]);
    try {
      merged[g] = merge_cases(members);
      merged_ok[g] = true;
    } catch (const Error&) {
      // run the members one by one below
    }
  }
  std::vector<Outcome> group_run = run_forked(groups.size(), jobs, timeout_s, [&](size_t g) {
    return merged_ok[g] ? evaluate_case(merged[g], eval) : Outcome{"unsupported", "not merged"};
  });
  std::vector<Outcome> out(cases.size());
  std::vector<size_t> alone;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (group_run[g].cls.empty()) continue;  // every member passed
    if (group_run[g].cls == "stopped") {
      for (size_t j : groups[g]) out[j] = group_run[g];
      continue;
    }
    for (size_t j : groups[g]) alone.push_back(j);
  }
  std::vector<Outcome> alone_run = run_forked(alone.size(), jobs, timeout_s, [&](size_t k) {
    return evaluate_case(cases[alone[k]], eval);
  });
  for (size_t k = 0; k < alone.size(); ++k) out[alone[k]] = alone_run[k];
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!merged_ok[g] || !group_run[g].failed()) continue;
    bool any = false;
    for (size_t j : groups[g]) any = any || out[j].failed();
    if (any) continue;
    size_t first = groups[g][0];
    out[first] = group_run[g];
    out[first].message = "only in its batch: " + out[first].message;
    cases[first] = std::move(merged[g]);
  }
  return out;
}

int main(int argc, char** argv) {
  CLI::App app{"coil_fuzz: random graphs, compiled code vs the reference interpreter"};
  uint64_t seed = 1;
  int64_t graphs = 0, start = 0, index = -1;
  int jobs = 1, timeout_s = 60, max_shrink = 100, shrink_per_key = 1, batch = 1;
  double time_limit = 0;
  bool print = false, no_shrink = false, keep_modules = false, quiet = false;
  std::string out_dir = "fuzz-out", graphs_dir, known_path, cache_dir, emit_cuda, check_values,
              check_placement;
  app.add_option("--seed", seed, "run seed: graph i is generated from hash(seed, i)");
  app.add_option("--graphs", graphs, "number of generated graphs (indices start..start+N-1)");
  app.add_option("--start", start, "first index");
  app.add_option("--index", index, "only graph INDEX");
  app.add_flag("--print", print, "print graph --index (as a .coil case) and exit");
  app.add_option("--graphs-dir", graphs_dir, "also run every .coil case in DIR (or one file)");
  app.add_option("--jobs", jobs, "graphs run at once, each in its own child process");
  app.add_option("--batch", batch,
                 "compile this many graphs as one (independent subgraphs); a failing batch's "
                 "graphs are run again one by one");
  app.add_option("--out", out_dir, "where shrunk failures and failures.tsv go");
  app.add_option("--known-failures", known_path, "expected failures (CI): fail on any other");
  app.add_flag("--no-shrink", no_shrink, "save failing cases as they are");
  app.add_option("--max-shrink-evals", max_shrink, "evaluations per shrink");
  app.add_option("--shrink-per-key", shrink_per_key, "failures shrunk per failure key");
  app.add_option("--timeout", timeout_s, "seconds per graph before it counts as a timeout");
  app.add_option("--time-limit", time_limit, "start no more graphs after this many seconds");
  app.add_option("--cache-dir", cache_dir, "code cache (default: a fresh /tmp dir, deleted)");
  app.add_flag("--keep-modules", keep_modules, "keep compiled modules in the cache");
  app.add_flag("-q,--quiet", quiet, "no progress lines");
  app.add_option("--emit-cuda", emit_cuda,
                 "write each graph (or batch) as a Triton case directory in DIR for "
                 "tests/fuzz/run_triton.py (no CPU runs; failures go to --out, default DIR/emit)");
  app.add_option("--check-values", check_values,
                 "the local check of node values saved in DIR (graph.coil, values.json: "
                 "fuzz/check_values.h), as run_triton.py saves them; exit 0 when explained");
  app.add_option("--check-placement", check_placement,
                 "the rounding placements of a GPU output that differs only when fused "
                 "(graph.coil, values.json: fuzz/check_values.h); exit 0 when one matches");
  CLI11_PARSE(app, argc, argv);
  if (!check_values.empty()) return run_check_values(check_values);
  if (!check_placement.empty()) return run_check_placement(check_placement);

  std::vector<Item> items;
  if (index >= 0) {
    start = index;
    graphs = 1;
  }
  for (int64_t i = start; i < start + graphs; ++i)
    items.push_back({std::to_string(i),
                     fmt::format("coil_fuzz --seed {} --index {}", seed, i),
                     {},
                     mix_seed(seed, static_cast<uint64_t>(i))});
  if (print) {
    for (const Item& it : items)
      std::fputs(case_text(generate_case(it.graph_seed), {it.origin}).c_str(), stdout);
    return 0;
  }
  if (!graphs_dir.empty()) {
    std::vector<fs::path> files;
    if (fs::is_directory(graphs_dir)) {
      for (const auto& e : fs::directory_iterator(graphs_dir))
        if (e.path().extension() == ".coil") files.push_back(e.path());
    } else {
      files.push_back(graphs_dir);
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) items.push_back({f.filename().string(), f.string(), f, 0});
  }
  if (items.empty()) {
    std::fprintf(stderr,
                 "coil_fuzz: nothing to run (give --graphs N, --index I or --graphs-dir)\n");
    return 2;
  }

  if (!emit_cuda.empty()) {  // the Triton mode's first stage (fuzz/cuda_emit.h)
    std::vector<EmitItem> emit;
    for (const Item& it : items)
      emit.push_back({it.key, it.file.empty() ? it.origin : "coil_fuzz --graphs-dir " + it.origin,
                      it.file, it.graph_seed});
    return run_cuda_emit(emit, {emit_cuda, app.count("--out") ? out_dir : "", batch, jobs,
                                timeout_s, time_limit, quiet});
  }

  // A cache of our own, so that the fuzzer never fills the user's (COIL_CACHE_DIR).
  bool own_cache = cache_dir.empty();
  if (own_cache) {
    char tmpl[] = "/tmp/coil-fuzz-cache-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::perror("coil_fuzz: mkdtemp");
      return 2;
    }
    cache_dir = tmpl;
  }
  ::setenv("COIL_CACHE_DIR", cache_dir.c_str(), 1);
  std::signal(SIGINT, [](int) { request_stop(); });
  std::signal(SIGTERM, [](int) { request_stop(); });
  try {
    host_isa();  // the ISA probe, once, before the children inherit its result
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_fuzz: %s\n", e.what());
    return 2;
  }
  warm_cache();

  const auto t0 = std::chrono::steady_clock::now();
  double shrink_seconds = 0;
  std::map<std::string, int> counts;          // class -> graphs
  std::map<std::string, std::string> failed;  // item key -> class
  std::map<std::string, int> shrunk_per_key;  // failure key -> failures shrunk
  std::set<std::string> distinct;             // saved files (signatures) of this run
  std::set<std::string> ran;
  EvalOptions eval;
  eval.delete_modules = !keep_modules;
  const size_t chunk = static_cast<size_t>(std::max(4 * jobs, 8) * std::max(batch, 1));
  size_t done = 0;
  for (size_t base = 0; base < items.size() && !stop_requested() &&
                        (time_limit <= 0 || seconds_since(t0) < time_limit);
       base += chunk) {
    size_t n = std::min(chunk, items.size() - base);
    std::vector<FuzzCase> cases(n);
    std::vector<Outcome> outcomes(n);
    std::vector<bool> built(n, false);
    for (size_t j = 0; j < n; ++j) {
      const Item& it = items[base + j];
      try {
        cases[j] = it.file.empty() ? generate_case(it.graph_seed) : load_case_file(it.file);
        built[j] = true;
      } catch (const Error& e) {
        outcomes[j] = {"interp-error", std::string("cannot build the case: ") + e.what()};
      } catch (const std::exception& e) {
        outcomes[j] = {"internal", std::string("graph builder: ") + e.what()};
      }
    }
    std::vector<Outcome> run = batch > 1
                                   ? run_batched(cases, built, batch, jobs, timeout_s, eval)
                                   : run_forked(n, jobs, timeout_s, [&](size_t j) {
                                       return built[j] ? evaluate_case(cases[j], eval) : Outcome{};
                                     });
    for (size_t j = 0; j < n; ++j) {
      const Item& it = items[base + j];
      if (built[j]) outcomes[j] = run[j];
      const Outcome& o = outcomes[j];
      if (o.cls == "stopped") continue;
      ran.insert(it.key);
      ++done;
      ++counts[o.cls.empty() ? "passed" : o.cls];
      // Explained differences are listed (failures.tsv), not saved or shrunk.
      if (o.cls == "rounding") log_failure(out_dir, it.origin, o, "-");
      if (!o.failed()) continue;
      failed[it.key] = o.cls;
      std::string key = failure_key(o);
      std::printf("[%s] %s\n", it.origin.c_str(), key.c_str());
      std::string file = "-";
      if (built[j] && (no_shrink || shrunk_per_key[key] < shrink_per_key)) {
        ++shrunk_per_key[key];
        FuzzCase c = clone_case(cases[j]);
        Outcome so = o;
        if (!no_shrink) {
          auto ts = std::chrono::steady_clock::now();
          ShrinkResult s = shrink_case(cases[j], o, {jobs, timeout_s, max_shrink});
          shrink_seconds += seconds_since(ts);
          c = std::move(s.shrunk);
          so = s.outcome;
          std::printf("    shrunk in %d evaluations to %d nodes\n", s.evaluations,
                      c.graph.num_nodes());
        }
        auto [path, fresh] = save_failure(out_dir, c, so, it.origin);
        distinct.insert(path.string());
        file = path.string();
        std::printf("    %s %s\n", fresh ? "saved" : "same as", file.c_str());
      } else if (built[j]) {
        file = "(not shrunk: key seen before)";
      }
      log_failure(out_dir, it.origin, o, file);
      std::fflush(stdout);
    }
    if (!quiet) {
      double s = seconds_since(t0);
      std::fprintf(stderr, "coil_fuzz: %zu/%zu graphs, %zu failing, %.1f s (%.2f graphs/s)\n", done,
                   items.size(), failed.size(), s, static_cast<double>(done) / s);
    }
  }

  double total = seconds_since(t0);
  std::printf("\ncoil_fuzz: %zu graphs in %.1f s: %.2f graphs/s (%.2f without shrinking)\n", done,
              total, static_cast<double>(done) / total,
              static_cast<double>(done) / std::max(total - shrink_seconds, 1e-9));
  for (const auto& [cls, k] : counts) std::printf("  %-14s %d\n", cls.c_str(), k);
  std::printf("  distinct failures saved: %zu (in %s)\n", distinct.size(), out_dir.c_str());
  if (own_cache) {
    std::error_code ec;
    fs::remove_all(cache_dir, ec);
  }

  if (known_path.empty()) return failed.empty() ? 0 : 1;
  int unexpected = 0;
  for (const auto& [key, cls] : load_known_failures(known_path)) {
    if (!ran.count(key)) continue;
    auto f = failed.find(key);
    if (f == failed.end() || f->second != cls) {
      std::printf("known failure %s (%s) now %s: update %s\n", key.c_str(), cls.c_str(),
                  f == failed.end() ? "passes" : f->second.c_str(), known_path.c_str());
      ++unexpected;
    }
  }
  auto known = load_known_failures(known_path);
  for (const auto& [key, cls] : failed) {
    if (known.count(key)) continue;
    std::printf("new failure: %s (%s)\n", key.c_str(), cls.c_str());
    ++unexpected;
  }
  return unexpected == 0 ? 0 : 1;
}

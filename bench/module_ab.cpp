// coil_module_ab: an in-process A/B of two compiled modules of one f32 graph (`coil compile
// GRAPH -o DIR` writes DIR/module.so), for a code generation change whose effect is smaller
// than the drift of a shared machine between two benchmark processes. The modules are called
// alternately (A B, B A, ...) on the same inputs, so both see the same load; prints each
// side's median and fastest time and the largest difference between their outputs.
//
//   coil_module_ab --a OLD/module.so --b NEW/module.so --inputs 16777216,1024,1024
//                  --output 16777216 --threads 2 --iters 150
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using GraphRun = void (*)(void* const*, void* const*, void* const*, char*, const char*);

GraphRun open_module(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("dlopen " + path + ": " + dlerror());
  auto run = reinterpret_cast<GraphRun>(dlsym(h, "coil_graph_run"));
  if (!run) throw std::runtime_error(path + " has no coil_graph_run");
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coil_module_ab: two compiled modules of one f32 graph, called alternately"};
  std::string a_path, b_path;
  std::vector<int64_t> input_sizes;
  int64_t output_size = 0;
  int threads = 1, iters = 100, warmup = 3;
  app.add_option("--a", a_path, "module A (the baseline)")->required();
  app.add_option("--b", b_path, "module B")->required();
  app.add_option("--inputs", input_sizes, "element count of each f32 input, in order")
      ->required()
      ->delimiter(',');
  app.add_option("--output", output_size, "element count of the one f32 output")->required();
  app.add_option("--threads", threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed calls of each module")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed calls of each first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  GraphRun run_a = open_module(a_path), run_b = open_module(b_path);
  omp_set_num_threads(threads);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> inputs;
  std::vector<void*> input_ptrs;
  for (int64_t n : input_sizes) {
    inputs.emplace_back(static_cast<size_t>(n));
    for (float& v : inputs.back()) v = dist(rng);
    input_ptrs.push_back(inputs.back().data());
  }
  std::vector<float> out_a(static_cast<size_t>(output_size)), out_b(out_a.size());
  void* outs_a[] = {out_a.data()};
  void* outs_b[] = {out_b.data()};
  std::vector<char> arena(size_t{1} << 26);  // modules of one graph without an arena plan
  std::vector<double> ms_a, ms_b;
  for (int it = 0; it < warmup + iters; ++it) {
    for (int half = 0; half < 2; ++half) {
      const bool a = (it + half) % 2 == 0;
      auto t0 = std::chrono::steady_clock::now();
      (a ? run_a : run_b)(input_ptrs.data(), a ? outs_a : outs_b, nullptr, arena.data(), nullptr);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (it >= warmup) (a ? ms_a : ms_b).push_back(ms);
    }
  }
  double diff = 0;
  for (size_t i = 0; i < out_a.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(out_a[i] - out_b[i])));
  const double fa = *std::min_element(ms_a.begin(), ms_a.end());
  const double fb = *std::min_element(ms_b.begin(), ms_b.end());
  std::printf(
      "A median %.3f ms fastest %.3f | B median %.3f ms fastest %.3f | B/A %.3f "
      "(fastest %.3f) | max |A-B| %g\n",
      median(ms_a), fa, median(ms_b), fb, median(ms_b) / median(ms_a), fb / fa, diff);
  return 0;
}

// coil_concurrency_bench: throughput of one CompiledModel called from several threads at once,
// against the same number of separately compiled models (issue 22, "Concurrent runs";
// docs/benchmarks.md, "Concurrent runs"). Never run by CTest.
//
//   coil_concurrency_bench MODEL.onnx|MODEL.coil [--callers 1,2,4] [--threads-per-call 1]
//       [--seconds 2] [--rounds 3]
//
// For each caller count N, alternately in each round: "shared" (N threads calling one model)
// and "separate" (N threads, each calling a model of its own: compile() again, so its own
// arena), each thread calling run_into with its own inputs and outputs as often as it can for
// --seconds; the throughput is calls per second over all threads, the median of the rounds.
// Each calling thread runs its kernels on --threads-per-call OpenMP threads (set in that
// thread: OpenMP's thread count is per thread). Inputs are random with a fixed seed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_host.h"
#include "coil/coil.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/text_format.h"
#include "runtime/compare.h"

namespace {

using coil::CompiledModel;
using coil::Tensor;

struct Caller {
  std::vector<Tensor> inputs, outputs;
};

Caller make_caller(const CompiledModel& m, uint64_t seed) {
  Caller c;
  for (const coil::ValueSpec& s : m.inputs())
    c.inputs.push_back(coil::random_tensor(s.dtype, s.shape, seed++));
  for (const coil::ValueSpec& s : m.outputs()) c.outputs.push_back(Tensor::empty(s.dtype, s.shape));
  return c;
}

// Calls per second of `models.size()` threads, thread t calling *models[t] for `seconds`.
double throughput(const std::vector<const CompiledModel*>& models, int threads_per_call,
                  double seconds) {
  std::vector<Caller> callers;
  for (size_t t = 0; t < models.size(); ++t) callers.push_back(make_caller(*models[t], 11 * t));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<long> calls(models.size(), 0);
  std::vector<double> elapsed(models.size(), 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < models.size(); ++t) {
    threads.emplace_back([&, t] {
      coil::set_num_threads(threads_per_call);
      std::vector<coil::TensorRef> refs;
      for (const Tensor& in : callers[t].inputs) refs.push_back(in.ref());
      models[t]->run_into(refs, callers[t].outputs);  // warm up this thread's buffers
      ++ready;
      while (!go) std::this_thread::yield();
      auto start = std::chrono::steady_clock::now();
      std::chrono::duration<double> d{};
      do {
        models[t]->run_into(refs, callers[t].outputs);
        ++calls[t];
        d = std::chrono::steady_clock::now() - start;
      } while (d.count() < seconds);
      elapsed[t] = d.count();
    });
  }
  while (ready < static_cast<int>(models.size())) std::this_thread::yield();
  go = true;
  for (std::thread& th : threads) th.join();
  double total = 0;
  for (size_t t = 0; t < models.size(); ++t) total += calls[t] / elapsed[t];
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"throughput of one model called from several threads (issue 22)"};
  std::string model;
  std::vector<int> callers{1, 2, 4};
  int threads_per_call = 1, rounds = 3;
  double seconds = 2;
  app.add_option("model", model, "a .onnx or .coil model with static shapes")->required();
  app.add_option("--callers", callers, "caller thread counts")->delimiter(',');
  app.add_option("--threads-per-call", threads_per_call, "OpenMP threads of each call");
  app.add_option("--seconds", seconds, "how long each measurement calls");
  app.add_option("--rounds", rounds, "rounds (the median is reported)");
  coil::bench::parse_or_exit(app, argc, argv);

  const bool onnx = model.size() > 5 && model.substr(model.size() - 5) == ".onnx";
  const coil::Graph g = onnx ? coil::import_onnx(model) : coil::load_graph_file(model);
  coil::set_num_threads(threads_per_call);
  const int most = *std::max_element(callers.begin(), callers.end());
  std::vector<CompiledModel> separate;
  for (int i = 0; i < most; ++i) separate.push_back(coil::compile(g));
  std::printf(
      "%s\nload average: %s\nmodel %s, %d OpenMP thread(s) per call, %.1f s per "
      "measurement, median of %d rounds\n",
      coil::bench::host_json()["cpu"].get<std::string>().c_str(),
      coil::bench::load_average().c_str(), model.c_str(), threads_per_call, seconds, rounds);
  std::printf(
      "| callers | one model, shared (calls/s) | separate models (calls/s) | shared / "
      "separate | shared / 1 caller |\n|---|---|---|---|---|\n");
  double single = 0;
  for (int n : callers) {
    std::vector<double> shared_r, separate_r;
    for (int r = 0; r < rounds; ++r) {
      std::vector<const CompiledModel*> one(static_cast<size_t>(n), &separate[0]);
      shared_r.push_back(throughput(one, threads_per_call, seconds));
      std::vector<const CompiledModel*> own;
      for (int i = 0; i < n; ++i) own.push_back(&separate[static_cast<size_t>(i)]);
      separate_r.push_back(throughput(own, threads_per_call, seconds));
    }
    double s = median(shared_r), p = median(separate_r);
    if (single == 0) single = s;
    std::printf("| %d | %.1f | %.1f | %.2f | %.2fx |\n", n, s, p, s / p, s / single);
  }
  std::printf("load average after: %s\n", coil::bench::load_average().c_str());
  return 0;
}

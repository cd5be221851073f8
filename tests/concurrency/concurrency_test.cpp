// Concurrency through the public API (include/coil/coil.h), in one process: threads compiling
// the same graph and different graphs at once into one fresh code cache (the same keys racing,
// the ISA probe, the precompiled headers, autotuning of one matmul shape), and threads running
// one CompiledModel at once. Every result is compared with the reference interpreter, which the
// threads run concurrently too. Label `concurrency`: it runs in the normal build (scripts/test.sh)
// and is what the ThreadSanitizer lane of scripts/sanitize.sh runs (docs/debugging.md,
// "Sanitizers"); processes compiling at once are tested by CompileCache.ConcurrentProcesses* and
// CodeCacheTest.ConcurrentProcessesShareOneEntry.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "coil/coil.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "runtime/compare.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

// Enough threads to overlap on the 2-core machines, few enough that a sanitized run (each
// compile a g++ process) stays within a minute or two.
constexpr int kThreads = 4;

// Each test gets a fresh cache directory: nothing is a hit from an earlier run, so the threads
// really race on building the same entries.
class Concurrency : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("COIL_CACHE_DIR")) saved_ = old;
    dir_ = fs::path(COIL_BINARY_DIR) / "test-cache" /
           fmt::format("concurrency-{}-{}-{}",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name(), ::getpid(),
                       std::chrono::steady_clock::now().time_since_epoch().count());
    ::setenv("COIL_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) {
      ::unsetenv("COIL_CACHE_DIR");
    } else {
      ::setenv("COIL_CACHE_DIR", saved_.c_str(), 1);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  std::string saved_;
  fs::path dir_;
};

// Errors found by the threads, reported by the main thread after the join.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    list_.push_back(std::move(what));
  }
  std::string all() const {
    std::string out;
    for (const std::string& f : list_) out += f + "\n";
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> list_;
};

std::vector<Tensor> random_inputs(const CompiledModel& m, uint64_t seed) {
  std::vector<Tensor> inputs;
  for (const ValueSpec& s : m.inputs()) inputs.push_back(random_tensor(s.dtype, s.shape, seed++));
  return inputs;
}

// "" when every output of `m` on `inputs` matches the reference interpreter on `g`.
std::string check_against_reference(const Graph& g, const CompiledModel& m,
                                    const std::vector<Tensor>& inputs, const std::string& what) {
  std::vector<Tensor> got = m.run(inputs);
  std::vector<Tensor> want = interpret(g, inputs);
  if (got.size() != want.size()) return fmt::format("{}: {} outputs", what, got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult c = compare_tensors(got[i], want[i], default_tolerance(got[i].dtype()));
    if (!c.ok) return fmt::format("{}: output {}: {}", what, m.outputs()[i].name, c.message);
  }
  return "";
}

// A graph every thread compiles: a matmul (autotuned: every thread asks for the same shape's
// timings at once), its epilogue, a softmax and a layer norm, each an OpenMP-parallel kernel.
const char* kSharedGraph =
    "input a: f32[48, 40]\n"
    "input b: f32[40, 36]\n"
    "input w: f32[36]\n"
    "m = matmul(a, b)\n"
    "r = relu(m)\n"
    "s = softmax(r) {axis=-1}\n"
    "n = layer_norm(m, w)\n"
    "output s\n"
    "output n\n";

// A graph of its own for thread `t`: other shapes and constants, so a different module.
std::string own_graph(int t) {
  return fmt::format(
      "input x: f32[{}, 33]\n"
      "c = full() {{shape=[], value={}, dtype=f32}}\n"
      "y = mul(x, c)\n"
      "z = tanh(y)\n"
      "s = sum(z) {{axes=[1]}}\n"
      "output s\n"
      "output z\n",
      5 + 3 * t, 0.25 * (t + 1));
}

TEST_F(Concurrency, CompilesOfTheSameAndOfDifferentGraphs) {
  const Graph shared = parse_graph(kSharedGraph, "<shared>");
  std::vector<Graph> own;
  for (int t = 0; t < kThreads; ++t) own.push_back(parse_graph(own_graph(t), "<own>"));

  Failures failures;
  std::vector<CompileReport> shared_reports(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Half the threads compile their own graph first, so that both orders overlap.
        CompiledModel mine, common;
        if (t % 2 == 0) mine = compile(own[t]);
        common = compile(shared);
        if (t % 2 == 1) mine = compile(own[t]);
        shared_reports[t] = common.report();
        for (uint64_t seed : {uint64_t(10 * t + 1), uint64_t(10 * t + 2)}) {
          std::string e = check_against_reference(shared, common, random_inputs(common, seed),
                                                  fmt::format("thread {} shared graph", t));
          if (!e.empty()) failures.add(e);
          e = check_against_reference(own[t], mine, random_inputs(mine, seed),
                                      fmt::format("thread {} own graph", t));
          if (!e.empty()) failures.add(e);
        }
      } catch (const std::exception& e) {
        failures.add(fmt::format("thread {}: {}", t, e.what()));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.all(), "");
  // One module for the shared graph: every thread generated the same code (the same autotune
  // choice) and loaded the same cache entry.
  for (int t = 1; t < kThreads; ++t) {
    EXPECT_EQ(shared_reports[t].cache_key, shared_reports[0].cache_key) << "thread " << t;
    EXPECT_EQ(shared_reports[t].so_path, shared_reports[0].so_path) << "thread " << t;
  }
  // The threads stored the shared graph's whole-graph cache entry at once: it is whole, and
  // serves the next compile the same module and listing.
  CompiledModel warm = compile(shared);
  EXPECT_TRUE(warm.report().model_cache_hit);
  EXPECT_EQ(warm.report().cache_key, shared_reports[0].cache_key);
  EXPECT_EQ(warm.report().source, shared_reports[0].source);
  EXPECT_EQ(check_against_reference(shared, warm, random_inputs(warm, 99), "warm shared graph"),
            "");
}

TEST_F(Concurrency, RunsOfOneModel) {
  const Graph g = parse_graph(kSharedGraph, "<shared>");
  CompileOptions options;
  options.autotune = false;  // the template: the test is about running, not choosing
  const CompiledModel m = compile(g, options);
  // The same inputs in every thread must give the same bits as a run on the main thread.
  const std::vector<Tensor> common_inputs = random_inputs(m, 7);
  const std::vector<Tensor> common_outputs = m.run(common_inputs);

  constexpr int kRuns = 6;
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::vector<Tensor> reused;
        for (const ValueSpec& s : m.outputs()) reused.push_back(Tensor::empty(s.dtype, s.shape));
        for (int r = 0; r < kRuns; ++r) {
          std::string what = fmt::format("thread {} run {}", t, r);
          if (r % 2 == 0) {
            std::string e =
                check_against_reference(g, m, random_inputs(m, 100 * t + 10 * r + 1), what);
            if (!e.empty()) failures.add(e);
            continue;
          }
          std::vector<TensorRef> refs;
          for (const Tensor& in : common_inputs) refs.push_back(in.ref());
          m.run_into(refs, reused);
          for (size_t i = 0; i < reused.size(); ++i) {
            CompareResult c = compare_tensors(reused[i], common_outputs[i], Tolerance{0, 0});
            if (!c.ok)
              failures.add(fmt::format("{}: output {} differs from the main thread's: {}", what,
                                       m.outputs()[i].name, c.message));
          }
        }
      } catch (const std::exception& e) {
        failures.add(fmt::format("thread {}: {}", t, e.what()));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.all(), "");
}

// A model with run-time checks (gather's index bounds): its calls run one at a time (the module
// records a failing check in one global), and a call with a bad index fails alone: the error
// names its value, and the other threads' calls, before and after it, are right.
TEST_F(Concurrency, RunsOfOneModelWithRunChecks) {
  const Graph g = parse_graph(
      "input d: f32[50, 16]\n"
      "input i: i64[37]\n"
      "x = gather(d, i) {axis=0}\n"
      "y = mul(x, x)\n"
      "output y\n",
      "<gather>");
  const CompiledModel m = compile(g);
  const Tensor data = random_tensor(DType::F32, {50, 16}, 3);
  constexpr int kRuns = 6;
  Failures failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        std::string what = fmt::format("thread {} run {}", t, r);
        Tensor idx = Tensor::empty(DType::I64, {37});
        for (int64_t k = 0; k < 37; ++k) idx.data_as<int64_t>()[k] = (k * 7 + t + r) % 50 - 25;
        const bool bad = (t + r) % 3 == 0;
        const int64_t bad_value = 50 + 10 * t + r;
        if (bad) idx.data_as<int64_t>()[5 + r] = bad_value;
        try {
          if (bad) {
            m.run({data, idx});
            failures.add(what + ": an out-of-range index did not fail");
          } else {
            std::string e = check_against_reference(g, m, {data, idx}, what);
            if (!e.empty()) failures.add(e);
          }
        } catch (const std::exception& e) {
          if (!bad || std::string(e.what()).find(std::to_string(bad_value)) == std::string::npos)
            failures.add(fmt::format("{}: {}", what, e.what()));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.all(), "");
}

}  // namespace
}  // namespace coil

// The matmul autotuning policy of each mode (driver/autotune.h), through the CLI and its
// COIL_LOGS=autotune lines: the default mode decides by cached measurements and heuristics and
// times only what they leave open, with few samples; max-autotune times every candidate. Each
// decision must also give a model that computes the right numbers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "coil/coil.h"
#include "graph/text_format.h"
#include "support/error_of.h"
#include "support/private_cache.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using testing::PrivateCache;
using testing::read_text;

struct Cli {
  int status = 0;
  std::string log;
};

// `coil check MODEL` (compile, run, compare with the reference interpreter) with
// COIL_LOGS=autotune on `threads` threads (the heuristics depend on it), in the test's cache.
Cli check(const PrivateCache& cache, const std::string& graph, const std::string& extra = "",
          int threads = 2) {
  fs::create_directories(cache.dir());
  fs::path model = cache.dir() / "model.coil";
  std::ofstream(model) << graph;
  fs::path log = cache.dir() / "log";
  std::string cmd =
      fmt::format("COIL_NUM_THREADS={} COIL_LOGS=autotune '{}' check '{}' {} >'{}' 2>&1", threads,
                  COIL_CLI, model.string(), extra, log.string());
  Cli r;
  r.status = std::system(cmd.c_str());
  r.log = read_text(log);
  return r;
}

bool has(const Cli& r, const std::string& text) {
  return r.log.find(text) != std::string::npos;
}

int timing_files(const PrivateCache& cache) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache.dir() / "autotune", ec))
    if (e.path().filename().string().find('.') == std::string::npos) ++n;
  return n;
}

std::string product(int m, int n, int k) {
  return fmt::format(
      "input a: f32[{}, {}]\ninput b: f32[{}, {}]\nm = matmul(a, b)\n"
      "y = relu(m)\noutput y\n",
      m, k, k, n);
}

// A constant weight: the template, untimed, in the default mode.
TEST(AutotunePolicy, DefaultModeKeepsTheTemplateForConstantWeightsUntimed) {
  PrivateCache cache("policy-const");
  std::string w =
      "const w: f32[4, 3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.0, 2.0, 3.0]";
  Cli r =
      check(cache, "input a: f32[600, 4]\n" + w + "\nm = matmul(a, w)\ny = relu(m)\noutput y\n");
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_TRUE(has(r, "matmul 600x3x4")) << r.log;
  EXPECT_TRUE(has(r, "template (heuristic: B is a constant")) << r.log;
  EXPECT_EQ(timing_files(cache), 0);
}

// The same on more threads than the measurements behind the heuristic: the choice is timed.
TEST(AutotunePolicy, DefaultModeTimesConstantWeightsOnManyThreads) {
  PrivateCache cache("policy-const-threads");
  std::string w = "const w: f32[128, 64] = [";
  for (int i = 0; i < 128 * 64; ++i) w += fmt::format("{}{}.0", i ? ", " : "", i % 5 - 2);
  w += "]";
  std::string graph =
      "input a: f32[128, 128]\n" + w + "\nm = matmul(a, w)\ny = relu(m)\noutput y\n";
  Cli two = check(cache, graph);
  ASSERT_EQ(two.status, 0) << two.log;
  EXPECT_TRUE(has(two, "at 2 threads not timed")) << two.log;
  Cli four = check(cache, graph, "", 4);
  ASSERT_EQ(four.status, 0) << four.log;
  EXPECT_TRUE(has(four, "matmul 128x64x128 (4 threads, B packed at load)")) << four.log;
  EXPECT_TRUE(has(four, "(quick: best of 3 samples each)")) << four.log;
}

// A tiny product of two inputs: the template, untimed.
TEST(AutotunePolicy, DefaultModeDoesNotTimeTinyProducts) {
  PrivateCache cache("policy-tiny");
  Cli r = check(cache, product(8, 8, 8));
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_TRUE(has(r, "matmul 8x8x8")) << r.log;
  EXPECT_TRUE(has(r, "MFLOP is not timed")) << r.log;
  EXPECT_EQ(timing_files(cache), 0);
}

// A row of A against an input B (a decode step's projection through coil.torch): oneDNN,
// untimed (the template would pack all of B per call); a tiny B stays on the template.
TEST(AutotunePolicy, DefaultModeSendsFewRowsAgainstAPerCallBToTheLibrary) {
  PrivateCache cache("policy-gemv");
  // Sums of 768 products of [-2, 2] values: oneDNN's order rounds otherwise than the
  // reference's (docs/numerics.md), so the check's tolerance is widened.
  const std::string tol = "--rtol 1e-3 --atol 1e-4";
  for (int m : {1, 8}) {
    Cli r = check(cache, product(m, 512, 768), tol);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_TRUE(has(r, fmt::format("matmul {}x512x768", m))) << r.log;
    EXPECT_TRUE(has(r, "dnnl (heuristic: ")) << r.log;
  }
  Cli rows16 = check(cache, product(16, 512, 768), tol);
  ASSERT_EQ(rows16.status, 0) << rows16.log;
  EXPECT_FALSE(has(rows16, "dnnl (heuristic: ")) << rows16.log;
  EXPECT_EQ(timing_files(cache), 1);  // only the 16-row product was timed
}

// A product the heuristics leave open: the quick search (template against oneDNN, best of 3
// each), cached; another shape of its size bucket then takes its decision untimed.
TEST(AutotunePolicy, DefaultModeTimesOpenChoicesQuicklyAndSharesThemInTheBucket) {
  PrivateCache cache("policy-quick");
  Cli first = check(cache, product(96, 72, 80));
  ASSERT_EQ(first.status, 0) << first.log;
  EXPECT_TRUE(has(first, "matmul 96x72x80")) << first.log;
  EXPECT_TRUE(has(first, "(quick: best of 3 samples each)")) << first.log;
  EXPECT_FALSE(has(first, "openblas")) << first.log;
  EXPECT_EQ(timing_files(cache), 1);
  Cli again = check(cache, product(96, 72, 80));
  EXPECT_TRUE(has(again, "(quick: best of 3 samples each)") && has(again, "(cached)")) << again.log;
  Cli bucket = check(cache, product(100, 70, 90));  // 128 x 128 x 128 as well
  ASSERT_EQ(bucket.status, 0) << bucket.log;
  EXPECT_TRUE(has(bucket, "matmul 100x70x90")) << bucket.log;
  EXPECT_TRUE(has(bucket, "measured on 96x72x80 of its size bucket")) << bucket.log;
  EXPECT_EQ(timing_files(cache), 1);
}

// max-autotune times the three candidates, whatever the heuristics would say, and a later
// default-mode compile of the shape uses those timings.
TEST(AutotunePolicy, MaxAutotuneTimesEveryCandidate) {
  PrivateCache cache("policy-max");
  Cli max = check(cache, product(8, 8, 8), "--mode max-autotune");
  ASSERT_EQ(max.status, 0) << max.log;
  EXPECT_TRUE(has(max, "template ") && has(max, "dnnl ") && has(max, "openblas ")) << max.log;
  EXPECT_FALSE(has(max, "heuristic")) << max.log;
  Cli later = check(cache, product(8, 8, 8));
  EXPECT_TRUE(has(later, "openblas") && has(later, "(cached)")) << later.log;
}

TEST(AutotunePolicy, UnknownModeIsAnErrorNamingIt) {
  PrivateCache cache("policy-bad");
  Cli r = check(cache, product(8, 8, 8), "--mode fast");
  EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.log;
  EXPECT_TRUE(has(r, "'fast'")) << r.log;
}

TEST(AutotunePolicy, UnknownModeInTheApiIsAnErrorNamingIt) {
  Graph g = parse_graph(product(8, 8, 8));
  CompileOptions o;
  o.mode = "max_autotune";
  std::string error = testing::error_of([&] { compile(g, o); });
  EXPECT_NE(error.find("mode 'max_autotune': expected default or max-autotune"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace coil

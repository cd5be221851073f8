// Focused cases of the ONNX ops of issue 27 beyond ONNX's own node tests (which are in the
// allowlist): odd shapes, negative and repeated indices, every reduction, the Resize modes
// torch exports, ConvTranspose with groups/dilations/output_padding/output_shape. Each family's
// cases are written by onnx_op_cases.py (the expected outputs from torch, or numpy loops written
// from the ONNX spec) in the backend-test layout, then run through the conformance runner:
// import, compile, run, compare with the conformance tolerance. The default tier runs every
// other case of each family (each compiles a module: the 13 families took 280 s of a cold
// run's 2,430 test-s); COIL_SLOW_TESTS=1 runs them all (tests/support/slow_tests.h).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "conformance/onnx_conformance.h"
#include "support/slow_tests.h"

namespace coil::conformance {
namespace {
namespace fs = std::filesystem;

struct Family {
  std::string name;
  int min_cases;  // fewer means the generator broke
};

void PrintTo(const Family& f, std::ostream* os) {
  *os << f.name;
}

class OnnxOpCases : public ::testing::TestWithParam<Family> {};

TEST_P(OnnxOpCases, MatchReference) {
  const Family& f = GetParam();
  fs::path dir =
      fs::path(COIL_BINARY_DIR) / "test-models" / fmt::format("op-cases-{}-{}", f.name, getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd =
      fmt::format("'{}' '{}/tests/conformance/onnx_op_cases.py' '{}' {} > '{}' 2>&1", COIL_PYTHON,
                  COIL_SOURCE_DIR, dir.string(), f.name, (dir / "generate.log").string());
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "onnx_op_cases.py failed, see " << dir / "generate.log";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  EXPECT_GE(static_cast<int>(cases.size()), f.min_cases);
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!coil::testing::in_default_tier(i, 2)) continue;
    const fs::path& c = cases[i];
    CaseResult r = run_case(c);
    if (r.outcome == Outcome::Pass) continue;
    ++failed;
    ADD_FAILURE() << c.filename().string() << ": " << outcome_name(r.outcome) << ": " << r.detail;
  }
  if (failed == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Families, OnnxOpCases,
    ::testing::Values(Family{"losses", 70}, Family{"resize", 35}, Family{"conv_transpose", 13},
                      Family{"scatter", 80}, Family{"misc", 102}, Family{"einsum", 17},
                      Family{"attention", 16}, Family{"pool3d", 52}, Family{"integer", 41},
                      Family{"tfidf", 7}, Family{"training", 36}, Family{"roialign", 6},
                      Family{"dft", 13}),
    [](const ::testing::TestParamInfo<Family>& info) { return info.param.name; });

}  // namespace
}  // namespace coil::conformance

// ONNX conformance: every test in allowlist.txt must pass (a regression fails CI). A test marked
// "slow" there, and the two groups of in_slow_tier(), run only with COIL_SLOW_TESTS=1
// (tests/support/slow_tests.h). The full picture, with reasons, is conformance_report_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "conformance/onnx_conformance.h"
#include "driver/pipeline.h"
#include "support/slow_tests.h"

namespace coil::conformance {

// Found by ADL: gtest prints test parameters with it.
void PrintTo(const AllowedTest& t, std::ostream* os) {
  *os << t.path << (t.slow ? " (slow)" : "");
}

namespace {

const std::vector<AllowedTest>& allowlist() {
  static const std::vector<AllowedTest> tests =
      read_allowlist(std::string(COIL_SOURCE_DIR) + "/tests/conformance/allowlist.txt");
  return tests;
}

// Groups whose ops the default tier covers otherwise, so that a cold CI run stays in its
// 20 minutes (each test compiles a module; these 200 took 160 s of a cold run's 2,430 test-s):
// the *_expanded tests (an op's ONNX function body; the op itself, and whether fusion brings
// the body back to its kernels, OnnxExpandedFusion, stay in the default tier) and the
// pytorch-converted/-operator tests of ops the node tests also cover: their convolutions
// (1-D and 3-D, groups, dilations: no node test has them) stay.
// And of the node tests of one op family (node/test_<first word>, e.g. the 79 of reduce), every
// third in allowlist order (190 tests, 90 s): the first two of every three run, so each family
// keeps most of its variants and a family of one or two tests keeps all.
bool in_slow_tier(const std::string& path) {
  if (path.ends_with("_expanded")) return true;
  if (path.starts_with("pytorch-"))
    return path.find("Conv") == std::string::npos && path.find("_conv") == std::string::npos;
  static const std::set<std::string> third = [] {
    std::set<std::string> out;  // the tests whose index in their family is 2 mod 3
    std::map<std::string, size_t> seen;
    for (const AllowedTest& t : allowlist()) {
      const std::string prefix = "node/test_";
      if (!t.path.starts_with(prefix) || t.path.ends_with("_expanded")) continue;
      std::string family = t.path.substr(prefix.size());
      family = family.substr(0, family.find('_'));
      if (seen[family]++ % 3 == 2) out.insert(t.path);
    }
    return out;
  }();
  return third.count(path) > 0;
}

class OnnxConformance : public ::testing::TestWithParam<AllowedTest> {};

TEST_P(OnnxConformance, Passes) {
  const AllowedTest& t = GetParam();
  if ((t.slow || in_slow_tier(t.path)) && !coil::testing::slow_tests_enabled())
    GTEST_SKIP() << "slow: runs with COIL_SLOW_TESTS=1";
  std::filesystem::path dir = testdata_root() / t.path;
  ASSERT_TRUE(std::filesystem::exists(dir / "model.onnx")) << dir << " is missing";
  CaseResult r = run_case(dir);
  EXPECT_EQ(r.outcome, Outcome::Pass)
      << t.path << ": " << outcome_name(r.outcome) << ": " << r.detail;
}

std::string test_name(const ::testing::TestParamInfo<AllowedTest>& info) {
  std::string s = info.param.path;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Allowlist, OnnxConformance, ::testing::ValuesIn(allowlist()), test_name);

// The *_expanded tests replace an op by its ONNX function body (LayerNormalization by
// ReduceMean, Sub, Pow, Sqrt, Div, ...): fusion must bring the body back to about the kernels
// of the op itself. One kernel more is allowed: outer-loop fusion does not yet reach across
// the body's Flatten/Reshape of the rows (docs/onnx.md).
class OnnxExpandedFusion : public ::testing::TestWithParam<AllowedTest> {};

// Planned, not compiled (the expanded tests' modules compile only in the slow tier).
int kernel_count(const std::filesystem::path& dir) {
  PreparedCase c;
  CaseResult r = prepare_case(dir, &c);
  EXPECT_EQ(r.outcome, Outcome::Pass) << dir << ": " << r.detail;
  return static_cast<int>(generate_program(c.graph, c.options).schedule.kernels.size());
}

TEST_P(OnnxExpandedFusion, FusesLikeTheOp) {
  std::string expanded = GetParam().path;
  std::string op = expanded.substr(0, expanded.size() - std::string("_expanded").size());
  int k_op = kernel_count(testdata_root() / op), k_body = kernel_count(testdata_root() / expanded);
  EXPECT_LE(k_body, k_op + 1) << op << ": " << k_op << " kernels; its function body: " << k_body;
}

std::vector<AllowedTest> expanded_pairs() {
  std::vector<AllowedTest> out;
  const std::vector<AllowedTest>& all = allowlist();
  for (const AllowedTest& t : all) {
    const std::string suffix = "_expanded";
    if (t.path.size() <= suffix.size() || !t.path.ends_with(suffix)) continue;
    std::string op = t.path.substr(0, t.path.size() - suffix.size());
    if (std::any_of(all.begin(), all.end(), [&](const AllowedTest& a) { return a.path == op; }))
      out.push_back(t);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Allowlist, OnnxExpandedFusion, ::testing::ValuesIn(expanded_pairs()),
                         test_name);

}  // namespace
}  // namespace coil::conformance

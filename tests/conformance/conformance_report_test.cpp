// The conformance report: runs every test of the ONNX test data whose ops the frontend supports
// and prints pass/fail with reasons, the failures grouped, and the counts that docs/onnx.md
// quotes. Disabled by default (minutes of compiling); run it with
//   ./build/tests/coil_conformance_tests --gtest_also_run_disabled_tests
//       --gtest_filter='OnnxConformanceReport.*'
// COIL_CONFORMANCE_FILTER=substring limits the tests; COIL_CONFORMANCE_OUT=FILE writes the
// passing tests there in allowlist form. Each test runs in a forked child with a time limit,
// so a crash or a hang is reported as such instead of ending the run.
// COIL_CONFORMANCE_RESULTS=FILE writes one line per test, `test<TAB>outcome<TAB>specialized
// (0/1)<TAB>detail`, tests with unsupported ops included (outcome "unsupported", not run): the
// per-test record that bench/onnx_node_tests.py sets next to ONNX Runtime's.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "conformance/onnx_conformance.h"

namespace coil::conformance {
namespace {
namespace fs = std::filesystem;

CaseResult run_isolated(const fs::path& dir) {
  int fds[2];
  if (pipe(fds) != 0) return {Outcome::RunError, "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(120);
    CaseResult r;
    try {
      r = run_case(dir);
    } catch (const std::exception& e) {
      r = {Outcome::RunError, std::string("exception: ") + e.what()};
    }
    std::string msg =
        fmt::format("{}\t{}\t{}", static_cast<int>(r.outcome), r.specialized ? 1 : 0, r.detail);
    for (size_t off = 0; off < msg.size();) {
      ssize_t k = write(fds[1], msg.data() + off, msg.size() - off);
      if (k <= 0) break;
      off += static_cast<size_t>(k);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t k; (k = read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(k));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return {Outcome::RunError, WTERMSIG(status) == SIGALRM
                                   ? "timeout (120 s)"
                                   : fmt::format("crash (signal {})", WTERMSIG(status))};
  size_t a = msg.find('\t'), b = msg.find('\t', a + 1);
  if (a == std::string::npos || b == std::string::npos) return {Outcome::RunError, "no result"};
  return {static_cast<Outcome>(std::stoi(msg.substr(0, a))), msg.substr(b + 1),
          msg.substr(a + 1, 1) == "1"};
}

// A short key to group failures by: the unsupported ops, or the first words of the message.
std::string reason_key(const CaseResult& r) {
  std::string d = r.detail;
  if (auto p = d.find("unsupported ops: "); p != std::string::npos) return d.substr(p);
  if (auto p = d.find(".onnx: "); p != std::string::npos) d = d.substr(p + 7);
  if (auto p = d.find(".pb: "); p != std::string::npos) d = d.substr(p + 5);
  if (r.outcome == Outcome::Mismatch) return "values differ";
  return d.substr(0, 90);
}

TEST(OnnxConformanceReport, DISABLED_AllTests) {
  const char* filter = std::getenv("COIL_CONFORMANCE_FILTER");
  std::vector<std::string> passing;
  std::map<std::string, std::pair<int, int>> per_dir;  // dir -> (in list, passing)
  std::map<std::string, int> not_in_list;              // unsupported op -> tests
  std::map<std::string, std::vector<std::string>> failures;
  int specialized = 0;
  std::ofstream results;
  if (const char* f = std::getenv("COIL_CONFORMANCE_RESULTS")) {
    results.open(f);
    if (!results) throw Error(fmt::format("COIL_CONFORMANCE_RESULTS: cannot write {}", f));
  }
  // One line per test; tabs and newlines in the detail become spaces so that a line is a test.
  auto record = [&](const std::string& name, Outcome o, bool spec, std::string detail) {
    if (!results.is_open()) return;
    std::replace_if(
        detail.begin(), detail.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
    results << name << '\t' << outcome_name(o) << '\t' << (spec ? 1 : 0) << '\t'
            << detail.substr(0, 600) << '\n'
            << std::flush;
  };
  for (const char* sub : {"node", "simple", "pytorch-converted", "pytorch-operator"}) {
    fs::path root = testdata_root() / sub;
    if (!fs::exists(root)) continue;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root)) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      std::string name = std::string(sub) + "/" + dir.filename().string();
      if (filter && name.find(filter) == std::string::npos) continue;
      if (!fs::exists(dir / "model.onnx")) continue;
      std::vector<std::string> missing;
      for (const auto& op : model_ops(dir / "model.onnx"))
        if (!op_supported(op)) missing.push_back(op);
      if (!missing.empty()) {
        for (const auto& op : missing) ++not_in_list[op];
        record(name, Outcome::Unsupported, false,
               fmt::format("unsupported ops: {}", fmt::join(missing, ", ")));
        continue;
      }
      ++per_dir[sub].first;
      CaseResult r = run_isolated(dir);
      fmt::print("{:<12} {}{}{}\n", outcome_name(r.outcome), name,
                 r.specialized ? " (specialized)" : "",
                 r.outcome == Outcome::Pass ? "" : ": " + r.detail.substr(0, 300));
      std::fflush(stdout);
      record(name, r.outcome, r.specialized, r.detail);
      if (r.outcome == Outcome::Pass) {
        ++per_dir[sub].second;
        passing.push_back(name);
        specialized += r.specialized;
      } else {
        failures[fmt::format("{}: {}", outcome_name(r.outcome), reason_key(r))].push_back(name);
      }
    }
  }
  fmt::print("\n=== tests whose ops are all supported: passing / total ===\n");
  for (const auto& [dir, c] : per_dir) fmt::print("  {:<18} {} / {}\n", dir, c.second, c.first);
  fmt::print("  ({} of the passing tests bind integer inputs as constants)\n", specialized);
  fmt::print("\n=== failures by reason ===\n");
  for (const auto& [reason, tests] : failures)
    fmt::print("  {:>3}  {}\n       {}\n", tests.size(), reason, fmt::join(tests, " "));
  fmt::print("\n=== ops not supported (tests using each) ===\n");
  for (const auto& [op, k] : not_in_list) fmt::print("  {}:{}", op, k);
  fmt::print("\n");
  if (const char* out = std::getenv("COIL_CONFORMANCE_OUT")) {
    std::ofstream f(out);
    for (const auto& t : passing) f << t << "\n";
    fmt::print("wrote {} tests to {}\n", passing.size(), out);
  }
}

}  // namespace
}  // namespace coil::conformance

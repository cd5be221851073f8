// `coil minify MODEL -o REPRO.coil`: shrinks a model that fails (a compile error, an internal
// error, a crash or hang of a generated kernel, a result that differs from the reference
// interpreter) to a small text-format graph that fails the same way. The model becomes a
// fuzz case (src/fuzz/fuzz_case.h) and goes through the fuzzer's shrinker (src/fuzz/shrinker.h):
// every candidate runs in a forked child, compiled with fusion on and off (matmul autotuning
// off) and compared with the reference interpreter. The repro is written with its inputs as
// .npy files and the `coil check` line that reproduces it.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "commands.h"
#include "fuzz/evaluate.h"
#include "fuzz/forked_runner.h"
#include "fuzz/fuzz_case.h"
#include "fuzz/shrinker.h"
#include "prepare.h"
#include "support/check.h"
#include "support/env.h"
#include "support/npy.h"

namespace coil::cli {
namespace {

namespace fs = std::filesystem;

/// Nodes that compute something (not inputs or constants).
int computed_nodes(const Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes())
    n += node->op_name() != "input" && node->op_name() != "constant";
  return n;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

/// Writes the case's inputs beside the repro and returns the `coil check` line that runs it.
std::string write_repro_inputs(const fuzz::FuzzCase& c, const fs::path& repro) {
  fs::path dir = repro;
  dir.replace_extension(".inputs");
  fs::create_directories(dir);
  std::vector<Tensor> values = fuzz::case_inputs(c);
  std::string line;
  if (std::string bug = env(EnvVar::testing_inject_bug); !bug.empty())
    line += fmt::format("{}={} ", env_name(EnvVar::testing_inject_bug), bug);
  line += fmt::format("COIL_NUM_THREADS={} coil check {}", c.threads, repro.string());
  for (size_t i = 0; i < c.graph.inputs().size(); ++i) {
    const std::string& name = c.graph.node(c.graph.inputs()[i]).name;
    fs::path file = dir / (name + ".npy");
    write_npy(file, values[i]);
    line += fmt::format(" --input {}={}", name, file.string());
  }
  return line;
}

}  // namespace

int cmd_minify(const ModelArgs& a, const MinifyArgs& m) {
  COIL_USER_CHECK(a.device == "cpu",
                  "coil minify --device {}: the minifier runs the CPU backend only (compiled C++ "
                  "against the reference interpreter)",
                  a.device);
  COIL_USER_CHECK(m.jobs > 0, "--jobs {}: must be positive", m.jobs);
  COIL_USER_CHECK(m.max_evaluations > 0, "--max-evaluations {}: must be positive",
                  m.max_evaluations);
  COIL_USER_CHECK(m.timeout_s > 0, "--timeout {}: must be positive", m.timeout_s);
  COIL_USER_CHECK(m.threads > 0, "--threads {}: must be positive", m.threads);
  Prepared p = prepare(a);
  fuzz::FuzzCase c{std::move(p.graph), p.options.sizes, a.seed, m.threads, ""};
  for (const std::string& s : a.inputs) {
    std::string name = split_pair(s, "--input", "NAME=FILE.npy").first;
    const auto& ins = c.graph.inputs();
    for (size_t i = 0; i < ins.size(); ++i)
      if (c.graph.node(ins[i]).name == name) c.given[name] = p.inputs[i];
  }
  int before = computed_nodes(c.graph);
  fmt::print(
      "coil minify: {} ({} nodes): running it with fusion on and off against the "
      "reference interpreter\n",
      a.model, before);
  std::fflush(stdout);  // before forking: a child would print the buffer again
  fuzz::Outcome failure =
      fuzz::run_forked(1, 1, m.timeout_s, [&](size_t) { return fuzz::evaluate_case(c); }).front();
  if (!failure.failed()) {
    fmt::print(
        "the model does not fail ({}); nothing to minify\n",
        failure.cls.empty() ? "it passed" : failure.cls + ": " + first_line(failure.message));
    return kExitCheckFailed;
  }
  fmt::print("it fails: {}: {}\nshrinking (at most {} evaluations, {} at a time)\n", failure.cls,
             first_line(failure.message), m.max_evaluations, m.jobs);
  std::fflush(stdout);
  fuzz::ShrinkResult r = fuzz::shrink_case(c, failure, {m.jobs, m.timeout_s, m.max_evaluations});
  int after = computed_nodes(r.shrunk.graph);
  fs::path out(m.output);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  std::string reproduce = write_repro_inputs(r.shrunk, out);
  std::vector<std::string> header = {
      fmt::format("coil minify of {}: {} nodes -> {} after {} evaluations", a.model, before, after,
                  r.evaluations),
      fmt::format("failure: {}: {}", r.outcome.cls, first_line(r.outcome.message)),
      "reproduce: " + reproduce};
  std::ofstream(out) << fuzz::case_text(r.shrunk, header);
  fmt::print("{} nodes -> {} after {} evaluations; wrote {}\nfailure: {}: {}\nreproduce: {}\n",
             before, after, r.evaluations, out.string(), r.outcome.cls,
             first_line(r.outcome.message), reproduce);
  return kExitOk;
}

}  // namespace coil::cli

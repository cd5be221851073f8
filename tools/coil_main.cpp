// coil: compile and run tensor programs from the command line.
//   coil demo | compile MODEL -o DIR | run MODEL | check MODEL | bench MODEL
// Run `coil --help` or `coil CMD --help` for options.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "coil/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace coil::cli;
  CLI::App app{"coil: a tensor compiler (graph -> loop IR -> fused C++ kernels)"};
  app.require_subcommand(1);

  auto add_model_args = [](CLI::App* c, ModelArgs& a) {
    c->add_option("model", a.model, "model: coil's text format (.coil) or ONNX (.onnx)")
        ->required();
    c->add_option("--size", a.sizes, "bind a size symbol, NAME=VALUE (repeatable)");
    c->add_option("--input", a.inputs, "an input as NAME=FILE.npy (repeatable; others are random)");
    c->add_option("--seed", a.seed, "seed for random inputs");
    c->add_option("--device", a.device,
                  "cpu (default) or cuda: Triton kernels in a Python module for coil_runtime")
        ->check(CLI::IsMember({"cpu", "cuda"}));
  };

  int demo_runs = 20;
  auto* demo = app.add_subcommand(
      "demo", "compile and run the built-in model, check it against the reference");
  demo->add_option("--runs", demo_runs, "timed runs");

  bool ops_markdown = false;
  auto* ops = app.add_subcommand("ops", "list every op with its attributes and meaning");
  ops->add_flag("--markdown", ops_markdown, "print docs/ops.md (markdown tables)");

  ModelArgs compile_args;
  std::string out_dir;
  auto* compile =
      app.add_subcommand("compile",
                         "write the generated code, the .so (cpu) and report.json to DIR; with "
                         "--device cuda, module.py (Triton) and report.json");
  add_model_args(compile, compile_args);
  compile->add_option("-o,--output-dir", out_dir, "output directory")->required();

  ModelArgs run_args;
  std::string run_out = ".";
  auto* run = app.add_subcommand("run", "run the model and write each output as DIR/NAME.npy");
  add_model_args(run, run_args);
  run->add_option("--output-dir", run_out, "where to write outputs");

  ModelArgs check_args;
  std::vector<std::string> expects;
  double rtol = -1, atol = -1;
  auto* check = app.add_subcommand(
      "check", "compare outputs with --expect files or the reference interpreter");
  add_model_args(check, check_args);
  check->add_option("--expect", expects, "expected output NAME=FILE.npy (repeatable)");
  check->add_option("--rtol", rtol, "relative tolerance (default: per dtype)");
  check->add_option("--atol", atol, "absolute tolerance (default: per dtype)");

  ModelArgs bench_args;
  int threads = 0, runs = 20, warmup = 3;
  bool json = false;
  auto* bench = app.add_subcommand("bench", "time the compiled model (median of runs)");
  add_model_args(bench, bench_args);
  bench->add_option("--threads", threads, "OpenMP threads (default: COIL_NUM_THREADS / all cores)");
  bench->add_option("--runs", runs, "timed runs");
  bench->add_option("--warmup", warmup, "untimed runs first");
  bench->add_flag("--json", json, "print JSON to stdout");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return cmd_demo(demo_runs);
    if (*ops) return cmd_ops(ops_markdown);
    if (*compile) return cmd_compile(compile_args, out_dir);
    if (*run) return cmd_run(run_args, run_out);
    if (*check) return cmd_check(check_args, expects, rtol, atol);
    if (*bench) return cmd_bench(bench_args, threads, runs, warmup, json);
  } catch (const coil::Error& e) {
    std::fprintf(stderr, "coil: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}

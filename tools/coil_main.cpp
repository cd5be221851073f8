// coil: compile and run tensor programs from the command line.
//   coil demo | ops | compile MODEL -o DIR | export MODEL -o DIR | run MODEL|DIR | check MODEL |
//   bench MODEL | minify MODEL -o REPRO.coil
// Run `coil --help` or `coil CMD --help` for options. Exit codes: commands.h (ExitCode).
#include <CLI/CLI.hpp>

#include <cstdio>

#include <fmt/format.h>

#include "coil/error.h"
#include "command_line.h"
#include "commands.h"
#include "support/env.h"
#include "version.h"

namespace {

/// Runs the command line; every exception becomes its message and exit code (commands.h).
int run_main(int argc, char** argv) {
  using namespace coil::cli;
  CLI::App app{"coil: a tensor compiler (graph -> loop IR -> fused C++ kernels)", "coil"};
  app.set_version_flag("--version", version_text,
                       "print coil's version and build, the host ISA "
                       "and the compiler of generated kernels");
  app.footer(
      "Exit codes: 0 success, 1 a check failed, 2 usage or input error, 3 unsupported op or "
      "feature, 4 internal error (docs/errors.md).");
  app.require_subcommand(0, 1);
  // Each option's default is shown in --help (options whose default is prose say it there).
  app.option_defaults()->always_capture_default();

  auto add_model_args = [](CLI::App* c, ModelArgs& a) {
    c->allow_extras();  // unknown options are reported by parse_command_line
    c->add_option("model", a.model, "model: coil's text format (.coil) or ONNX (.onnx)")
        ->required()
        ->type_name("MODEL");
    c->add_option("--size", a.sizes, "bind a size symbol (repeatable)")
        ->type_name("NAME=VALUE")
        ->default_str("");
    c->add_option("--input", a.inputs, "an input from a file (repeatable; others are random)")
        ->type_name("NAME=FILE.npy")
        ->default_str("");
    c->add_option("--seed", a.seed, "seed for random inputs");
    c->add_flag("--quiet", a.quiet,
                "no progress line on stderr (shown on a terminal when a compile takes more "
                "than a second)");
    c->add_option("--device", a.device,
                  "cpu, or cuda: Triton kernels in a Python module for coil_runtime")
        ->type_name("cpu|cuda")
        ->check(CLI::Validator(
            [](std::string& d) {
              return d == "cpu" || d == "cuda" ? "" : "'" + d + "' is not cpu or cuda";
            },
            ""));
    c->add_option("--precision", a.precision,
                  "f32 matmuls and convolutions: highest (IEEE fp32 on every device) or high "
                  "(TF32 allowed on NVIDIA GPUs; the CPU stays IEEE)")
        ->type_name("highest|high")
        ->check(CLI::Validator(
            [](std::string& v) {
              return v == "highest" || v == "high" ? "" : "'" + v + "' is not highest or high";
            },
            ""));
  };

  auto add_mode = [](CLI::App* c, ModelArgs& a) {
    c->add_option("--mode", a.mode,
                  "default: heuristics and cached measurements, timing only close choices; "
                  "max-autotune: time every matmul candidate (CompileOptions::mode)")
        ->type_name("default|max-autotune")
        ->check(CLI::Validator(
            [](std::string& v) {
              return v == "default" || v == "max-autotune"
                         ? ""
                         : "'" + v + "' is not default or max-autotune";
            },
            ""));
  };

  auto add_remote_cache = [](CLI::App* c, ModelArgs& a) {
    c->add_option("--remote-cache", a.remote_cache,
                  "a compile cache shared with other machines, redis://HOST[:PORT][/DB] "
                  "(docs/remote-cache.md; default: COIL_REMOTE_CACHE)")
        ->type_name("URL")
        ->default_str("");
  };

  auto add_debug_dir = [](CLI::App* c, ModelArgs& a) {
    c->add_option("--debug-dir", a.debug_dir,
                  "write every stage of the compile and a repro per kernel below DIR "
                  "(docs/debugging.md; default: COIL_DEBUG_DIR)")
        ->type_name("DIR")
        ->default_str("");
  };
  auto add_save_values = [](CLI::App* c, ModelArgs& a) {
    c->add_flag("--save-kernel-values", a.save_kernel_values,
                "with --debug-dir: save each kernel's arguments of this call into its repro");
  };

  int demo_runs = 20;
  auto* demo = app.add_subcommand(
      "demo", "compile and run the built-in model, check it against the reference");
  demo->allow_extras();
  demo->add_option("--runs", demo_runs, "timed runs");

  bool ops_markdown = false;
  auto* ops = app.add_subcommand("ops", "list every op with its attributes and meaning");
  ops->allow_extras();
  ops->add_flag("--markdown", ops_markdown, "print docs/ops.md (markdown tables)");

  ModelArgs compile_args;
  std::string out_dir;
  auto* compile =
      app.add_subcommand("compile",
                         "write the generated code, the .so (cpu) and report.json to DIR; with "
                         "--device cuda, module.py (Triton) and report.json");
  add_model_args(compile, compile_args);
  add_debug_dir(compile, compile_args);
  add_mode(compile, compile_args);
  add_remote_cache(compile, compile_args);
  compile->add_flag("--write-graph", compile_args.write_graph,
                    "also write DIR/graph.coil, the graph as coil reads it (with its weights)");
  compile->add_flag("--graph-without-weights", compile_args.graph_without_weights,
                    "write DIR/graph.coil with each constant declared as an input instead of its "
                    "data (the structure alone; it still parses)");
  compile->add_option("-o,--output-dir", out_dir, "output directory")->required()->type_name("DIR");

  ModelArgs export_args;
  std::string export_dir;
  auto* exp = app.add_subcommand(
      "export",
      "compile the model and write DIR: module.so, weights.bin and manifest.json, which `coil "
      "run DIR` and coil::ExportedModel (libcoil_runtime) run with no compiler (docs/deploy.md)");
  add_model_args(exp, export_args);
  add_mode(exp, export_args);
  add_remote_cache(exp, export_args);
  exp->add_option("-o,--output-dir", export_dir, "the exported model's directory")
      ->required()
      ->type_name("DIR");

  ModelArgs run_args;
  std::string run_out = ".";
  auto* run = app.add_subcommand(
      "run",
      "run the model (or a directory `coil export` wrote) and write each output as "
      "DIR/NAME.npy");
  add_model_args(run, run_args);
  add_debug_dir(run, run_args);
  add_mode(run, run_args);
  add_remote_cache(run, run_args);
  add_save_values(run, run_args);
  run->add_option("--output-dir", run_out, "where to write outputs")->type_name("DIR");

  ModelArgs check_args;
  std::vector<std::string> expects;
  double rtol = -1, atol = -1;
  auto* check = app.add_subcommand(
      "check", "compare outputs with --expect files or the reference interpreter");
  add_model_args(check, check_args);
  add_debug_dir(check, check_args);
  add_mode(check, check_args);
  add_remote_cache(check, check_args);
  add_save_values(check, check_args);
  check->add_option("--expect", expects, "an expected output (repeatable)")
      ->type_name("NAME=FILE.npy")
      ->default_str("");
  check->add_option("--rtol", rtol, "relative tolerance")->default_str("per dtype");
  check->add_option("--atol", atol, "absolute tolerance")->default_str("per dtype");

  ModelArgs bench_args;
  BenchArgs bench_opts;
  auto* bench = app.add_subcommand("bench", "time the compiled model (median of runs)");
  add_model_args(bench, bench_args);
  add_debug_dir(bench, bench_args);
  add_mode(bench, bench_args);
  add_remote_cache(bench, bench_args);
  bench
      ->add_option("--threads", bench_opts.threads,
                   "OpenMP threads (default: COIL_NUM_THREADS, else all cores)")
      ->default_str("");
  bench->add_option("--runs", bench_opts.runs, "timed runs");
  bench->add_option("--warmup", bench_opts.warmup, "untimed runs first");
  bench->add_flag("--json", bench_opts.json,
                  "print JSON to stdout (p90, p99, noisy, load average)");
  bench->add_flag("--profile", bench_opts.profile,
                  "also time each kernel alone: a table per kernel and a Chrome trace");
  bench->add_option("--trace", bench_opts.trace, "where --profile writes the Chrome trace")
      ->type_name("FILE");

  ModelArgs minify_args;
  MinifyArgs minify;
  auto* min = app.add_subcommand(
      "minify",
      "shrink a failing model (compile error, crash, internal error, or a mismatch with the "
      "reference interpreter) to a small graph that fails the same way");
  add_model_args(min, minify_args);
  min->add_option("-o,--output", minify.output, "the repro (inputs beside it in REPRO.inputs/)")
      ->required()
      ->type_name("REPRO.coil");
  min->add_option("--jobs", minify.jobs, "candidates run at once (forked children)");
  min->add_option("--max-evaluations", minify.max_evaluations, "candidates tried at most");
  min->add_option("--timeout", minify.timeout_s, "seconds per candidate (a hang is a failure)");
  min->add_option("--threads", minify.threads, "OpenMP threads of the compiled kernels");

  // Hidden (no group, so neither --help nor the command list shows it): makes an internal error
  // on purpose, so that tests can check its message and exit code (docs/errors.md).
  bool std_exception = false;
  auto* crash = app.add_subcommand("debug-internal-error", "fail with an internal error");
  crash->group("");
  crash->add_flag("--std-exception", std_exception, "throw a std::exception instead");

  if (auto stop = parse_command_line(app, argc, argv)) return *stop;
  if (*demo) return cmd_demo(demo_runs);
  if (*ops) return cmd_ops(ops_markdown);
  if (*compile) return cmd_compile(compile_args, out_dir);
  if (*exp) return cmd_export(export_args, export_dir);
  if (*run) return cmd_run(run_args, run_out);
  if (*check) return cmd_check(check_args, expects, rtol, atol);
  if (*bench) return cmd_bench(bench_args, bench_opts);
  if (*min) return cmd_minify(minify_args, minify);
  if (*crash) return cmd_debug_internal_error(std_exception);
  return kExitInternal;  // parse_command_line returns a code when no command is chosen
}

}  // namespace

int main(int argc, char** argv) {
  using namespace coil::cli;
  try {
    coil::warn_unknown_env_vars();
    return run_main(argc, argv);
  } catch (const coil::UnsupportedError& e) {
    print_error(e.what());
    return kExitUnsupported;
  } catch (const coil::Error& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const coil::InternalError& e) {
    print_error(std::string(e.what()) + "\n(a bug in coil: please report it with the model)");
    return kExitInternal;
  } catch (const std::exception& e) {
    print_error(fmt::format("internal error: {}\n(a bug in coil: please report it with the model)",
                            e.what()));
    return kExitInternal;
  } catch (...) {
    print_error("internal error: an unknown exception\n(a bug in coil: please report it)");
    return kExitInternal;
  }
}

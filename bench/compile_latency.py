#!/usr/bin/env python3
"""Compile-latency benchmark (issue 25; docs/benchmarks.md, "Compile latency"): how long a user
waits for coil to compile a model on the CPU, cold, warm and in a first process.

For each model (`coil demo`'s built-in block, and tests/models/export_models.py's resnet18,
efficientnet_b0 and gpt_block exported to ONNX), in rounds:

  cold            `coil compile MODEL -o OUT --quiet` in a new process with a fresh
                  COIL_CACHE_DIR (code cache, autotune timings, model cache all empty; the ISA
                  probe is the machine's and stays cached, as on any machine after its first
                  compile): report.json's compile_total_seconds, its stages, and the process's
                  wall time
  first-process   the same command again, a new process over the now warm cache: the
                  whole-graph cache serves it (report.json says model_cache hit)
  no-compiler     the same with PATH pointing at an empty directory and CXX unset: the warm
                  path must not need g++

With --remote-cache (issue 23; docs/remote-cache.md) the rounds measure the remote cache
instead, against a private redis-server this script starts on a free loopback port (emptied
before each round):

  cold            a fresh cache directory, Redis empty: the compile fills both
  from_redis      another fresh cache directory: the whole-graph entry and the module come from
                  Redis (a machine of the fleet seeing the model for the first time)
  from_redis_no_compiler   the same with no compiler on PATH
  warm_local      the second cache directory again: the local cache serves it

Before the rounds each model is compiled once in a throwaway cache ("first on this machine"),
which pays what a machine pays once whatever the cache directory (the ISA probe, the
precompiled headers of each flag set); it is reported apart.

and the run time in each mode (`coil bench MODEL --mode default|max-autotune --runs R`, the two
alternately for --run-rounds rounds, the median of the rounds' medians), which must agree within
the noise (the default mode times fewer candidates but must not pick slower kernels). `coil demo` has no --output-dir: its compile time is the one
it prints ("compile: X ms"), cold and warm alike.

Prints a table of medians over the rounds and writes JSON (default
bench/results/compile-latency-<date>.json) with every sample, the CPU model, the core count and
the load average before and after.

  /usr/bin/python3 bench/compile_latency.py [--rounds 3] [--models demo,resnet18,...]
      [--coil build/bin/coil] [--runs 20] [--no-run-time] [--json FILE] [--notes TEXT]
      [--remote-cache]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

MODELS = ["demo", "resnet18", "efficientnet_b0", "gpt_block"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="cold/warm rounds per model")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    p.add_argument("--runs", type=int, default=20, help="coil bench runs per mode and round")
    p.add_argument("--run-rounds", type=int, default=5,
                   help="rounds of the run-time comparison (the modes alternate)")
    p.add_argument("--no-run-time", action="store_true", help="skip the run-time comparison")
    p.add_argument("--model-dir", default="", help="exported models (default: a temp dir)")
    p.add_argument("--json", default="")
    p.add_argument("--notes", default="")
    p.add_argument("--remote-cache", action="store_true",
                   help="measure the Redis remote cache (rounds: cold, from_redis, "
                        "from_redis_no_compiler, warm_local)")
    a = p.parse_args()
    a.models = [m for m in a.models.split(",") if m]
    for m in a.models:
        if m not in MODELS:
            p.error(f"unknown model {m} (known: {', '.join(MODELS)})")
    return a


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return wall, r.stdout


def compile_once(args, model, cache, env_extra=None):
    """(wall seconds, compile() seconds, stages, model cache hit) of one process."""
    env = dict(os.environ, COIL_CACHE_DIR=cache)
    env.pop("COIL_LOGS", None)
    for k, v in (env_extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if model == "demo":
        wall, out = timed([args.coil, "demo", "--runs", "1"], env)
        m = re.search(r"compile: ([0-9.]+) ms \(code cache (\w+), model cache (\w+)\)(.*)", out)
        if not m:
            raise SystemExit(f"coil demo printed no compile line:\n{out}")
        stages = {k: float(v) / 1e3 for k, v in re.findall(r", (\w+) ([0-9.]+)", m.group(4))}
        return wall, float(m.group(1)) / 1e3, stages, m.group(3) == "hit"
    out_dir = os.path.join(cache, "out")
    wall, _ = timed([args.coil, "compile", model, "-o", out_dir, "--quiet"], env)
    with open(os.path.join(out_dir, "report.json")) as f:
        report = json.load(f)
    return (wall, report["compile_total_seconds"], report["compile_seconds"],
            report.get("model_cache") == "hit")


def run_time(args, model, mode, cache):
    env = dict(os.environ, COIL_CACHE_DIR=cache)
    _, out = timed([args.coil, "bench", model, "--mode", mode, "--runs", str(args.runs),
                    "--json", "--quiet"], env)
    j = json.loads(out[out.index("{"):])
    return j.get("median_ms") or j.get("median_s", 0) * 1e3


def main():
    args = parse_args()
    redis = None
    if args.remote_cache:
        sys.path.insert(0, os.path.join(ROOT, "tests", "remote_cache"))
        from private_redis import PrivateRedis  # a redis-server on a free loopback port
        redis = PrivateRedis()
        redis.env = {"COIL_REMOTE_CACHE": redis.url,
                     "COIL_REMOTE_CACHE_KEY": "compile-latency-bench-secret"}
        redis.flush = lambda: redis.cli("FLUSHALL")
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="coil-latency-models-")
    import export_models  # noqa: E402 (tests/models/export_models.py; needs torch)
    paths = {}
    for name in args.models:
        if name == "demo":
            paths[name] = "demo"
            continue
        path = os.path.join(model_dir, f"{name}.onnx")
        if not os.path.exists(path):
            export_models.export(name, model_dir)
        paths[name] = path
    empty_bin = tempfile.mkdtemp(prefix="coil-no-compiler-")
    no_compiler = {"PATH": empty_bin, "CXX": None}

    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "cpu": cpu_model(), "cores": os.cpu_count(), "load_before": load_average(),
               "notes": args.notes, "models": {}, "first_on_machine": {}}
    remote = redis.env if redis else {}
    results["remote_cache"] = bool(redis)
    for name in args.models:
        cache = tempfile.mkdtemp(prefix="coil-latency-prime-")
        try:
            wall, comp, _, _ = compile_once(args, paths[name], cache, remote)
            results["first_on_machine"][name] = {"wall_s": wall, "compile_s": comp}
            print(f"{name}: first compile on this machine {comp:.3f} s (wall {wall:.3f} s)",
                  flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    for name in args.models:
        if redis:
            # One cache directory per machine of the fleet: the first fills Redis, the others
            # are new to the model.
            kinds = (("cold", 0, remote), ("from_redis", 1, remote),
                     ("from_redis_no_compiler", 2, {**remote, **no_compiler}),
                     ("warm_local", 1, remote))
        else:
            kinds = (("cold", 0, None), ("first_process", 0, None),
                     ("no_compiler", 0, no_compiler))
        rows = {kind: [] for kind, _, _ in kinds}
        for _ in range(args.rounds):
            caches = [tempfile.mkdtemp(prefix="coil-latency-cache-") for _ in range(3)]
            if redis:
                redis.flush()
            try:
                for kind, which, extra in kinds:
                    wall, comp, stages, hit = compile_once(args, paths[name], caches[which],
                                                           extra)
                    rows[kind].append({"wall_s": wall, "compile_s": comp, "stages": stages,
                                       "model_cache_hit": hit})
            finally:
                for cache in caches:
                    shutil.rmtree(cache, ignore_errors=True)
        entry = {k: v for k, v in rows.items()}
        for k, v in rows.items():
            entry[f"{k}_compile_median_s"] = statistics.median(r["compile_s"] for r in v)
            entry[f"{k}_wall_median_s"] = statistics.median(r["wall_s"] for r in v)
        if redis:
            results["models"][name] = entry
            print(f"{name}: " + ", ".join(
                f"{kind} {entry[kind + '_compile_median_s'] * 1e3:.1f} ms (wall "
                f"{entry[kind + '_wall_median_s']:.3f} s)" for kind, _, _ in kinds), flush=True)
            continue
        if not args.no_run_time and name != "demo":
            # The two modes' models alternately, --run-rounds times (the machines are shared
            # and a model's speed drifts between processes): the median of the rounds' medians.
            cache = tempfile.mkdtemp(prefix="coil-latency-run-")
            try:
                samples = {"default": [], "max-autotune": []}
                for mode in samples:  # each mode's decisions (COIL_LOGS=autotune), for the record
                    env = dict(os.environ, COIL_CACHE_DIR=cache, COIL_LOGS="autotune")
                    r = subprocess.run([args.coil, "compile", paths[name], "--mode", mode, "-o",
                                        os.path.join(cache, "out-" + mode), "--quiet"],
                                       env=env, capture_output=True, text=True)
                    entry[f"autotune_{mode}"] = [line for line in r.stderr.splitlines()
                                                 if "[coil:autotune]" in line]
                for _ in range(args.run_rounds):
                    for mode in samples:
                        samples[mode].append(run_time(args, paths[name], mode, cache))
                for mode, v in samples.items():
                    entry[f"run_ms_{mode}"] = statistics.median(v)
                    entry[f"run_ms_{mode}_rounds"] = v
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        results["models"][name] = entry
        print(f"{name}: cold {entry['cold_compile_median_s']:.3f} s "
              f"(wall {entry['cold_wall_median_s']:.3f}), first-process "
              f"{entry['first_process_compile_median_s'] * 1e3:.1f} ms (wall "
              f"{entry['first_process_wall_median_s']:.3f} s), no compiler "
              f"{entry['no_compiler_compile_median_s'] * 1e3:.1f} ms"
              + (f", run default {entry['run_ms_default']:.3f} ms / max-autotune "
                 f"{entry['run_ms_max-autotune']:.3f} ms" if "run_ms_default" in entry else ""),
              flush=True)
    results["load_after"] = load_average()
    if redis:
        redis.stop()
        print(f"\n{results['cpu']}, {results['cores']} cores, load {results['load_before']} -> "
              f"{results['load_after']}; medians of {args.rounds} rounds; Redis on loopback")
        print("| model | cold (fills Redis) | from Redis (new cache dir) | from Redis, no compiler "
              "| warm local |")
        print("|---|---|---|---|---|")
        for name, e in results["models"].items():
            cells = []
            for kind in ("cold", "from_redis", "from_redis_no_compiler", "warm_local"):
                hit = kind == "cold" or all(r["model_cache_hit"] for r in e[kind])
                cells.append(f"{e[kind + '_compile_median_s'] * 1e3:.1f} ms (wall "
                             f"{e[kind + '_wall_median_s']:.3f} s){'' if hit else ' (MISS)'}")
            print(f"| {name} | " + " | ".join(cells) + " |")

    if not redis:
        print_table(args, results)
    path = args.json or os.path.join(
        ROOT, "bench", "results",
        f"compile-latency-{'remote-' if redis else ''}"
        f"{datetime.datetime.now().strftime('%Y-%m-%dT%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {path}")
    return 0


def print_table(args, results):
    print(f"\n{results['cpu']}, {results['cores']} cores, load {results['load_before']} -> "
          f"{results['load_after']}; medians of {args.rounds} rounds")
    print("| model | cold compile | cold wall | stages (cold) | first-process compile | "
          "first-process wall | no compiler | run default / max-autotune |")
    print("|---|---|---|---|---|---|---|---|")
    for name, e in results["models"].items():
        cold = e["cold"][len(e["cold"]) // 2]["stages"]
        stages = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in cold.items())
        run = (f"{e['run_ms_default']:.3f} / {e['run_ms_max-autotune']:.3f} ms"
               if "run_ms_default" in e else "-")
        hits = all(r["model_cache_hit"] for r in e["first_process"] + e["no_compiler"])
        print(f"| {name} | {e['cold_compile_median_s']:.3f} s | {e['cold_wall_median_s']:.3f} s "
              f"| {stages} | {e['first_process_compile_median_s'] * 1e3:.1f} ms"
              f"{'' if hits else ' (MISS)'} | {e['first_process_wall_median_s']:.3f} s | "
              f"{e['no_compiler_compile_median_s'] * 1e3:.1f} ms | {run} |")


if __name__ == "__main__":
    sys.exit(main())

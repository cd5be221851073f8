"""Runs a generated module on .npy inputs and writes its outputs.

    python -m coil_runtime.run DIR/module.py --inputs x.npy w.npy --outputs-dir out/
    python -m coil_runtime.run DIR/module.py --inputs x=x.npy w=w.npy --outputs-dir out/ --bench 100
    python -m coil_runtime.run DIR/module.py --inputs x=x.npy --bench 50 --warmup 5 --json

Inputs are given in the order of the module's `call(args)` (the graph's input order); the
NAME=FILE form is checked against the module's INPUT_NAMES when it defines them. Outputs are
written as NAME.npy with the module's OUTPUT_NAMES if it defines them, else out0.npy, out1.npy...
(bf16 as '|V2', as coil writes it).

The first call (which autotunes and JIT-compiles the kernels) produces the outputs. --bench N
then makes W untimed calls (--warmup W, default 0) and times N calls with a host timer,
synchronizing the device before and after each call, and prints the median.

--json prints one JSON line instead of the per-output lines (what `coil run|check|bench
--device cuda` reads): {"device": GPU name, "first_call_ms": ..., "outputs": [{"name", "dtype",
"shape", "file"}], and with --bench "median_ms", "min_ms", "max_ms", "mean_ms", "runs",
"warmup", "timer"}. Errors go to stderr as "error: ..." lines.

--profile (with --bench N) then times each kernel: N more calls with a CUDA event pair around
every Triton launch (each `triton_*` launcher's run) and around the whole call, and adds
"kernels": [{"name", "median_us", "share"}] in launch order (share: of the kernels' sum) and
"profile_call_median_us" (the whole call, GPU time between its events; library calls made
directly by call() are in it and in no kernel). With --trace FILE it writes a Chrome trace of
those calls (one event per launch, GPU times).

Exit codes: 0 ok, 2 usage or input error, or no CUDA device ("error: no CUDA device ...").
"""

import argparse
import json
import os
import sys
import time


def _time_calls(call, runs, sync):
    """Seconds of each of `runs` calls, synchronizing the device before and after each."""
    times = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def _profile_kernels(mod, call, runs, torch, trace_path=None):
    """Per-kernel GPU times of `runs` calls (see the module docstring)."""
    spans = []  # per launch: (call index, kernel name, start event, end event)
    current, depth = [0], [0]
    originals = {}
    for name, obj in list(vars(mod).items()):
        if name.startswith("triton_") and callable(getattr(obj, "run", None)):
            originals[name] = obj
            launch = obj.run

            def timed(*args, _launch=launch, _name=name, **kwargs):
                # Only the outermost launch is a span: a matmul template whose autotuner chose
                # its extern path launches the epilogue kernel inside its own run.
                depth[0] += 1
                try:
                    if depth[0] > 1:
                        return _launch(*args, **kwargs)
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    result = _launch(*args, **kwargs)
                    end.record()
                    spans.append((current[0], _name, start, end))
                    return result
                finally:
                    depth[0] -= 1

            obj.run = timed  # an instance attribute: shadows the class's run
    calls = []
    try:
        for i in range(runs):
            current[0] = i
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            calls.append((start, end))
        torch.cuda.synchronize()
    finally:
        for obj in originals.values():
            del obj.run
    order, per_kernel = [], {}
    for _, name, s, e in spans:
        if name not in per_kernel:
            order.append(name)
            per_kernel[name] = []
        per_kernel[name].append(s.elapsed_time(e) * 1e3)  # us
    medians = {n: sorted(v)[len(v) // 2] for n, v in per_kernel.items()}
    total = sum(medians.values()) or 1.0
    whole = sorted(s.elapsed_time(e) * 1e3 for s, e in calls)
    if trace_path:
        events = []
        for i, name, s, e in spans:
            events.append({"name": name, "cat": "kernel", "ph": "X", "pid": 1, "tid": 1,
                           "ts": calls[0][0].elapsed_time(s) * 1e3,
                           "dur": s.elapsed_time(e) * 1e3, "args": {"run": i}})
        with open(trace_path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f, indent=1)
    return ([{"name": n, "median_us": medians[n], "share": medians[n] / total,
              "launches_per_call": len(per_kernel[n]) / runs} for n in order],
            whole[len(whole) // 2])


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m coil_runtime.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="a generated module.py")
    p.add_argument("--inputs", nargs="*", default=[], metavar="[NAME=]FILE.npy")
    p.add_argument("--outputs-dir", default=None, help="write each output here as .npy")
    p.add_argument("--bench", type=int, default=0, metavar="N",
                   help="also time N calls (after the first call) and print the median")
    p.add_argument("--warmup", type=int, default=0, metavar="W",
                   help="with --bench: W untimed calls before the timed ones (default 0)")
    p.add_argument("--profile", action="store_true",
                   help="with --bench N: also time each kernel over N more calls (CUDA events)")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="with --profile: write a Chrome trace of the profiled calls")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line (outputs, timings) instead of the text lines")
    a = p.parse_args(argv)
    if a.bench < 0 or a.warmup < 0:
        print("error: --bench and --warmup must not be negative", file=sys.stderr)
        return 2
    if a.profile and a.bench == 0:
        print("error: --profile needs --bench N (the number of profiled calls)", file=sys.stderr)
        return 2

    import torch
    from . import runtime

    if not torch.cuda.is_available():
        print(f"error: no CUDA device (torch {torch.__version__}, built for CUDA "
              f"{torch.version.cuda}; torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    mod = runtime.load_module(a.module)
    expected_names = getattr(mod, "INPUT_NAMES", None)
    inputs = []
    for i, spec in enumerate(a.inputs):
        name, _, path = spec.rpartition("=")
        if name and expected_names is not None:
            if i >= len(expected_names) or expected_names[i] != name:
                print(f"error: input {i} is '{name}' but the module expects "
                      f"{list(expected_names)} in that order", file=sys.stderr)
                return 2
        inputs.append(runtime.read_npy(path).cuda())

    t0 = time.perf_counter()
    try:
        outs = mod.call(list(inputs))
    except ValueError as e:  # check_input's errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.cuda.synchronize()
    first_call_ms = (time.perf_counter() - t0) * 1e3
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    names = list(getattr(mod, "OUTPUT_NAMES", None) or [f"out{i}" for i in range(len(outs))])
    report = {"device": torch.cuda.get_device_name(), "first_call_ms": first_call_ms,
              "outputs": []}
    for name, t in zip(names, outs):
        dtype = str(t.dtype).replace("torch.", "")
        line = f"{name}: {dtype}{list(t.shape)}"
        path = None
        if a.outputs_dir:
            os.makedirs(a.outputs_dir, exist_ok=True)
            path = os.path.join(a.outputs_dir, f"{name}.npy")
            runtime.write_npy(path, t)
            line += f" -> {path}"
        report["outputs"].append({"name": name, "dtype": dtype, "shape": list(t.shape),
                                  "file": path})
        if not a.json:
            print(line)

    if a.bench > 0:
        times = _time_calls(lambda: mod.call(list(inputs)), a.warmup, torch.cuda.synchronize)
        times = sorted(_time_calls(lambda: mod.call(list(inputs)), a.bench,
                                   torch.cuda.synchronize))
        med = times[len(times) // 2] * 1e3
        report.update(median_ms=med, min_ms=times[0] * 1e3, max_ms=times[-1] * 1e3,
                      mean_ms=sum(times) / len(times) * 1e3, runs=a.bench, warmup=a.warmup,
                      timer="host, synchronized each call")
        if not a.json:
            print(f"median {med:.4f} ms over {a.bench} calls "
                  f"(host timer, synchronized each call)")
    if a.profile:
        kernels, call_us = _profile_kernels(mod, lambda: mod.call(list(inputs)), a.bench, torch,
                                            a.trace)
        report.update(kernels=kernels, profile_call_median_us=call_us)
        if not a.json:
            for k in kernels:
                print(f"{k['name']}: {k['median_us']:.2f} us ({100 * k['share']:.1f}%)")
            print(f"whole call: {call_us:.2f} us (GPU time between events)")
    if a.json:
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

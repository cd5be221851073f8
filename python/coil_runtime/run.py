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
    p.add_argument("--json", action="store_true",
                   help="print one JSON line (outputs, timings) instead of the text lines")
    a = p.parse_args(argv)
    if a.bench < 0 or a.warmup < 0:
        print("error: --bench and --warmup must not be negative", file=sys.stderr)
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
    if a.json:
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

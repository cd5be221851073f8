"""Runs a generated module on .npy inputs and writes its outputs.

    python -m coil_runtime.run DIR/module.py --inputs x.npy w.npy --outputs-dir out/
    python -m coil_runtime.run DIR/module.py --inputs x=x.npy w=w.npy --outputs-dir out/ --bench 100

Inputs are given in the order of the module's `call(args)` (the graph's input order); the
NAME=FILE form is checked against the module's INPUT_NAMES when it defines them. Outputs are
written as NAME.npy with the module's OUTPUT_NAMES if it defines them, else out0.npy, out1.npy...
(bf16 as '|V2', as coil writes it). Exit codes: 0 ok, 2 usage or input error.
"""

import argparse
import os
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m coil_runtime.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="a generated module.py")
    p.add_argument("--inputs", nargs="*", default=[], metavar="[NAME=]FILE.npy")
    p.add_argument("--outputs-dir", default=None, help="write each output here as .npy")
    p.add_argument("--bench", type=int, default=0, metavar="N",
                   help="also time N calls (after one warm-up call) and print the median")
    a = p.parse_args(argv)

    import torch
    from . import runtime

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
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

    try:
        outs = mod.call(list(inputs))
    except ValueError as e:  # check_input's errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.cuda.synchronize()
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    names = list(getattr(mod, "OUTPUT_NAMES", None) or [f"out{i}" for i in range(len(outs))])
    for name, t in zip(names, outs):
        line = f"{name}: {str(t.dtype).replace('torch.', '')}{list(t.shape)}"
        if a.outputs_dir:
            os.makedirs(a.outputs_dir, exist_ok=True)
            path = os.path.join(a.outputs_dir, f"{name}.npy")
            runtime.write_npy(path, t)
            line += f" -> {path}"
        print(line)

    if a.bench > 0:
        times = []
        for _ in range(a.bench):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            mod.call(list(inputs))
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"median {times[len(times) // 2] * 1e3:.4f} ms over {a.bench} calls "
              f"(host timer, synchronized each call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

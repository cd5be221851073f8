"""Writes the size-generic Triton run's modules (tests/gpu/test_triton_dynamic.py runs them), on
the build machine: per case of tests/gpu/triton_dynamic_cases.py, into
tests/gpu/generated/dynamic/<case>/,
  generic/module.py      `coil compile --device cuda` with every size unbound: the one module
                         for every size its guards accept;
  bound_<s><v>/module.py the variants for sizes of 0 or 1 (Inductor's 0/1 rule), the other
                         sizes still unbound;
and manifest.json (what was written, and the generation time of each module). Fails (exit 1)
when coil refuses a size-generic module.

    python3 tests/gpu/prepare_triton_dynamic.py [--coil build/bin/coil] [--only CASE ...]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "gpu", "generated", "dynamic")
sys.path.insert(0, HERE)

import triton_dynamic_cases as cases  # noqa: E402


def compile_module(coil, graph_path, out_dir, bound):
    cmd = [coil, "compile", graph_path, "--device", "cuda", "-o", out_dir]
    for s, v in bound:
        cmd += ["--size", f"{s}={v}"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    names = a.only or sorted(cases.CASES)
    if not a.only and os.path.isdir(OUT):
        shutil.rmtree(OUT)
    manifest_path = os.path.join(OUT, "manifest.json")
    manifest = json.load(open(manifest_path)) if a.only and os.path.exists(manifest_path) else {}
    for name in names:
        c = cases.CASES[name]
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        graph = os.path.join(d, "graph.coil")
        with open(graph, "w") as f:
            f.write(c["graph"])
        entry = {"generic": "generic/module.py", "variants": {}, "generate_ms": {}}
        entry["generate_ms"]["generic"] = compile_module(a.coil, graph,
                                                         os.path.join(d, "generic"), ())
        src = open(os.path.join(d, "generic", "module.py")).read()
        if "SIZE_SYMBOLS = " not in src:
            raise SystemExit(f"error: {name}: the generic module is not size-generic")
        for bound in cases.variants(c):
            sub = cases.variant_dir(bound)
            entry["generate_ms"][sub] = compile_module(a.coil, graph, os.path.join(d, sub), bound)
            entry["variants"][sub] = {"bound": dict(bound), "module": f"{sub}/module.py"}
        manifest[name] = entry
        print(f"{name}: generic + {len(entry['variants'])} variant(s) "
              f"({', '.join(entry['variants']) or 'none'})")
    os.makedirs(OUT, exist_ok=True)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

"""Generates what the GPU run needs, on a machine where coil builds (tests/gpu/prepare.sh).

For each correctness case tests/gpu/cases/NAME.coil, into tests/gpu/generated/NAME/:
  module.py        `coil compile NAME.coil --device cuda -o DIR` (the Triton module)
  inputs/*.npy     fixed inputs (numpy, seeded by the case name; '# gpu-input' directives)
  expected/*.npy   `coil run` on those inputs (coil's CPU backend), after `coil check` has
                   compared that backend with the reference interpreter on the same inputs
  case.json        inputs and outputs in call order, tolerance, extra checks, status
For each benchmark workload bench/gpu/workloads/W.coil: tests/gpu/generated/bench_W/module.py,
and bench_W_generic/module.py, the same graph with its leading size the symbol n (GENERIC_DIMS;
bench_gpu.py --size-generic times the two).
For each precision workload bench/gpu/precision/W.coil, once per --precision:
tests/gpu/generated/precision_W_{highest,high}/module.py (bench/gpu/precision_bench.py).
tests/gpu/generated/MANIFEST.json records the coil commit and every status.

Directives (comments in a .coil file):
  # gpu-input NAME: randn | uniform LO HI | randint LO HI | positive   [nan=FRACTION]
  # gpu-tol: rtol=R atol=A            (else docs/numerics.md's tolerance for each output dtype)
  # gpu-check: noncontig NAME         (test_ops also checks that bad inputs are rejected)

    python3 tests/gpu/prepare_cases.py [--coil build/bin/coil] [--only NAME ...]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES = os.path.join(ROOT, "tests", "gpu", "cases")
WORKLOADS = os.path.join(ROOT, "bench", "gpu", "workloads")
PRECISION_WORKLOADS = os.path.join(ROOT, "bench", "gpu", "precision")
PRECISIONS = ("highest", "high")
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")

INPUT_RE = re.compile(r"^\s*input\s+(\w+)\s*:\s*(\w+)\s*\[([^\]]*)\]")
OUTPUT_RE = re.compile(r"^\s*output\s+(\w+)\s*(?:=\s*\w+\s*)?(?:#.*)?$")
DIRECTIVE_RE = re.compile(r"^\s*#\s*gpu-(input|tol|check)\s*:?\s*(.*)$")


def parse_case(path):
    """Inputs (name, dtype, shape), output names in order, and the gpu-* directives."""
    inputs, outputs, gen, tol, checks = [], [], {}, {}, []
    for line in open(path):
        m = DIRECTIVE_RE.match(line)
        if m:
            kind, rest = m.group(1), m.group(2).strip()
            if kind == "input":
                name, _, spec = rest.partition(":")
                gen[name.strip()] = spec.split()
            elif kind == "tol":
                for item in rest.split():
                    k, _, v = item.partition("=")
                    tol[k] = float(v)
            else:
                checks.append(rest)
            continue
        line = line.split("#", 1)[0]
        m = INPUT_RE.match(line)
        if m:
            dims = [d.strip() for d in m.group(3).split(",") if d.strip()]
            if not all(d.isdigit() for d in dims):
                raise ValueError(f"{path}: input {m.group(1)} needs static sizes, got {dims}")
            inputs.append({"name": m.group(1), "dtype": m.group(2),
                           "shape": [int(d) for d in dims]})
            continue
        m = OUTPUT_RE.match(line)
        if m:
            outputs.append(m.group(1))
    return inputs, outputs, gen, tol, checks


def to_bf16_bits(a):
    """float32 -> bf16 bit patterns (round to nearest even), as uint16."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def make_input(case, spec, gen):
    """A deterministic random array for one input, saved the way coil reads it."""
    rng = np.random.default_rng(zlib.crc32(f"{case}/{spec['name']}".encode()))
    shape, dtype = tuple(spec["shape"]), spec["dtype"]
    words = gen.get(spec["name"], ["randn"])
    nan = 0.0
    args = []
    for w in words:
        if w.startswith("nan="):
            nan = float(w[4:])
        else:
            args.append(w)
    kind = args[0] if args else "randn"
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("i8", "u8", "i32", "i64"):
        lo, hi = (int(args[1]), int(args[2])) if kind == "randint" else (-10, 10)
        if dtype == "u8":
            lo = max(lo, 0)
        np_t = {"i8": np.int8, "u8": np.uint8, "i32": np.int32, "i64": np.int64}[dtype]
        return rng.integers(lo, hi, size=shape).astype(np_t)
    if kind == "uniform":
        a = rng.uniform(float(args[1]), float(args[2]), size=shape)
    elif kind == "randint":
        a = rng.integers(int(args[1]), int(args[2]), size=shape).astype(np.float64)
    elif kind == "positive":
        a = rng.uniform(0.1, 2.0, size=shape)
    else:
        a = rng.standard_normal(size=shape)
    if nan > 0:
        a[rng.random(shape) < nan] = np.nan
    if dtype == "f64":
        return a.astype(np.float64)
    if dtype == "f32":
        return a.astype(np.float32)
    if dtype == "f16":
        return a.astype(np.float16)
    if dtype == "bf16":
        return to_bf16_bits(a.astype(np.float32)).view(np.dtype("V2"))
    raise ValueError(f"{case}: unsupported input dtype {dtype}")


def run(cmd, timeout=600):
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).strip()


def coil_has_cuda(coil):
    rc, out = run([coil, "compile", "--help"])
    return "--device" in out


def compile_cuda(coil, model, out_dir, extra=()):
    """`coil compile --device cuda`; returns (status, log). Drops CPU artifacts (.so)."""
    os.makedirs(out_dir, exist_ok=True)
    rc, out = run([coil, "compile", model, "--device", "cuda", "-o", out_dir, *extra])
    for f in os.listdir(out_dir):
        if f.endswith(".so"):
            os.remove(os.path.join(out_dir, f))
    if rc != 0:
        return "compile-failed", out[-2000:]
    if not os.path.exists(os.path.join(out_dir, "module.py")):
        return "compile-failed", "coil compile succeeded but wrote no module.py\n" + out[-1500:]
    return "ok", out[-500:]


def prepare_case(coil, name, has_cuda):
    src = os.path.join(CASES, name + ".coil")
    out_dir = os.path.join(GENERATED, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    inputs, outputs, gen, tol, checks = parse_case(src)
    info = {"name": name, "source": os.path.relpath(src, ROOT), "inputs": [], "outputs": [],
            "tolerance": tol, "checks": checks}
    if has_cuda:
        info["status"], info["compile_log"] = compile_cuda(coil, src, out_dir)
    else:
        info["status"], info["compile_log"] = "no-cuda-codegen", "coil compile has no --device"
    os.makedirs(os.path.join(out_dir, "inputs"), exist_ok=True)
    args = []
    for spec in inputs:
        rel = f"inputs/{spec['name']}.npy"
        np.save(os.path.join(out_dir, rel), make_input(name, spec, gen), allow_pickle=False)
        info["inputs"].append({**spec, "file": rel})
        args += ["--input", f"{spec['name']}={os.path.join(out_dir, rel)}"]
    tol_args = []
    if "rtol" in tol:
        tol_args += ["--rtol", str(tol["rtol"])]
    if "atol" in tol:
        tol_args += ["--atol", str(tol["atol"])]
    rc, out = run([coil, "check", src, *args, *tol_args])
    info["reference_check"] = "passed" if rc == 0 else "FAILED"
    info["reference_log"] = out[-1500:]
    rc, out = run([coil, "run", src, *args, "--output-dir", os.path.join(out_dir, "expected")])
    if rc != 0:
        info["status"] = "expected-failed"
        info["compile_log"] = out[-2000:]
    for o in outputs:
        info["outputs"].append({"name": o, "file": f"expected/{o}.npy"})
    with open(os.path.join(out_dir, "case.json"), "w") as f:
        json.dump(info, f, indent=1)
    return info


# Per benchmark workload, the input dims that become the size symbol n in its size-generic
# twin (the leading size; f's y is [n', n] against x's [n, n'], as x.t() + y needs).
GENERIC_DIMS = {"a": {"x": [0]}, "b": {"x": [0]}, "c": {"x": [0]}, "d": {"x": [0]},
                "e0": {"x": [0]}, "e1": {"x": [0]}, "f": {"x": [0], "y": [1]}, "i": {"x": [0]},
                "g": {"x": [0]}, "overhead": {"x": [0]}}


def generic_text(text, dims):
    """`text` with the listed dims of its inputs' shapes replaced by the symbol n."""
    def repl(m):
        name, dtype, shape = m.group(1), m.group(2), [d.strip() for d in m.group(3).split(",")]
        for d in dims.get(name, []):
            shape[d] = "n"
        return f"input {name}: {dtype}[{', '.join(shape)}]"
    out = re.sub(r"^input (\w+): (\w+)\[([^\]]*)\]", repl, text, flags=re.M)
    missing = [k for k in dims if not re.search(rf"^input {k}: \w+\[[^\]]*\bn\b", out, re.M)]
    if missing:
        raise SystemExit(f"error: GENERIC_DIMS names inputs the workload lacks: {missing}")
    return out


def prepare_workload(coil, name, has_cuda):
    src = os.path.join(WORKLOADS, name + ".coil")
    out_dir = os.path.join(GENERATED, "bench_" + name)
    gen_dir = out_dir + "_generic"
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(gen_dir, ignore_errors=True)
    if not has_cuda:
        return {"status": "no-cuda-codegen"}
    status, log = compile_cuda(coil, src, out_dir)
    if status != "ok" or name not in GENERIC_DIMS:
        return {"status": status, "log": log}
    os.makedirs(gen_dir, exist_ok=True)
    gen_src = os.path.join(gen_dir, name + "_generic.coil")
    with open(src) as f, open(gen_src, "w") as g:
        g.write(generic_text(f.read(), GENERIC_DIMS[name]))
    status, gen_log = compile_cuda(coil, gen_src, gen_dir)
    if status == "ok" and "SIZE_SYMBOLS" not in open(os.path.join(gen_dir, "module.py")).read():
        status, gen_log = "compile-failed", "the generic module is not size-generic\n" + gen_log
    return {"status": status, "log": log + "\n(generic) " + gen_log}


def prepare_precision_workload(coil, name, precision, has_cuda):
    src = os.path.join(PRECISION_WORKLOADS, name + ".coil")
    out_dir = os.path.join(GENERATED, f"precision_{name}_{precision}")
    shutil.rmtree(out_dir, ignore_errors=True)
    if not has_cuda:
        return {"status": "no-cuda-codegen"}
    status, log = compile_cuda(coil, src, out_dir, ["--precision", precision])
    return {"status": status, "log": log}


def git_describe():
    rc, head = run(["git", "rev-parse", "--short", "HEAD"])
    rc2, dirty = run(["git", "status", "--porcelain", "--", "src", "tools", "include"])
    return head + ("+dirty" if dirty else "")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    p.add_argument("--only", nargs="*", help="just these cases/workloads")
    a = p.parse_args()
    coil = os.path.abspath(a.coil)
    has_cuda = coil_has_cuda(coil)
    if not has_cuda:
        print("NOTE: this coil has no `compile --device cuda` yet: inputs and expected outputs "
              "are written, modules are not (cases are marked no-cuda-codegen)")
    os.makedirs(GENERATED, exist_ok=True)
    manifest_path = os.path.join(GENERATED, "MANIFEST.json")
    manifest = {"cases": {}, "bench": {}, "precision": {}}
    if a.only and os.path.exists(manifest_path):
        manifest = json.load(open(manifest_path))
    cases = sorted(f[:-5] for f in os.listdir(CASES) if f.endswith(".coil"))
    workloads = sorted(f[:-5] for f in os.listdir(WORKLOADS) if f.endswith(".coil"))
    precision = sorted(f[:-5] for f in os.listdir(PRECISION_WORKLOADS) if f.endswith(".coil"))
    if a.only:
        cases = [c for c in cases if c in a.only]
        workloads = [w for w in workloads if w in a.only]
        precision = [w for w in precision if "precision_" + w in a.only]
    else:  # a full run starts from scratch: no stale modules travel to the GPU
        for d in os.listdir(GENERATED):
            if os.path.isdir(os.path.join(GENERATED, d)):
                shutil.rmtree(os.path.join(GENERATED, d))
    failures, not_compiled = 0, []  # bad test data; cases the GPU will report as SKIP
    for c in cases:
        t = time.time()
        info = prepare_case(coil, c, has_cuda)
        manifest["cases"][c] = {"status": info["status"],
                                "reference_check": info["reference_check"]}
        print(f"  {c:<22} {info['status']:<16} reference check {info['reference_check']:<7} "
              f"{time.time() - t:5.1f} s")
        if info["status"] == "compile-failed":
            not_compiled.append(c)
        elif info["status"] == "expected-failed" or info["reference_check"] != "passed":
            failures += 1
        if info["status"] not in ("ok", "no-cuda-codegen"):
            print("    " + info["compile_log"].replace("\n", "\n    ")[-1500:])
        elif info["reference_check"] != "passed":
            print("    " + info["reference_log"].replace("\n", "\n    ")[-1500:])
    for w in workloads:
        t = time.time()
        res = prepare_workload(coil, w, has_cuda)
        manifest["bench"][w] = res["status"]
        print(f"  bench_{w:<16} {res['status']:<16} {time.time() - t:5.1f} s")
        if res["status"] not in ("ok", "no-cuda-codegen"):
            not_compiled.append("bench_" + w)
            print("    " + res.get("log", "").replace("\n", "\n    ")[-1500:])
    for w in precision:
        for mode in PRECISIONS:
            t = time.time()
            res = prepare_precision_workload(coil, w, mode, has_cuda)
            key = f"precision_{w}_{mode}"
            manifest.setdefault("precision", {})[key] = res["status"]
            print(f"  {key:<22} {res['status']:<16} {time.time() - t:5.1f} s")
            if res["status"] not in ("ok", "no-cuda-codegen"):
                not_compiled.append(key)
                print("    " + res.get("log", "").replace("\n", "\n    ")[-1500:])
    manifest["coil"] = git_describe()
    manifest["generated_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    manifest["cuda_codegen"] = has_cuda
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(GENERATED) for f in fs)
    print(f"wrote {os.path.relpath(GENERATED, ROOT)}: {size / 2**20:.1f} MiB; "
          f"{failures} case(s) with bad test data; "
          f"{len(not_compiled)} not compiled for cuda (SKIP on the GPU): {' '.join(not_compiled)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

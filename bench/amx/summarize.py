#!/usr/bin/env python3
"""The table of bench/amx/run_device.sh: bf16 GEMM per size and thread count from two
coil_gemm_bench JSONs (the AMX run, with oneDNN's, coil fp32's and torch's rows merged, and the
COIL_CPU_ISA=avx512 run), with issue 28's targets:
  coil AMX >= torch eager bf16 (oneDNN) at every size and thread count,
  coil AMX >= 3x coil fp32 at 16 threads,
  coil AMX >= 1 TFLOP/s per core at 2048^2 (1 thread).
Exits 1 when a coil row is missing or its check against oneDNN failed (the targets are
reported, not enforced: they are what the lead measures).

  python3 bench/amx/summarize.py AMX.json AVX512BF16.json --threads 1,16 --sizes 1024,2048,4096
      [--json OUT]
"""

import argparse
import json
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("amx_json")
    p.add_argument("avx512_json")
    p.add_argument("--threads", default="1,16")
    p.add_argument("--sizes", default="1024,2048,4096")
    p.add_argument("--json", default="")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",") if t]
    sizes = [int(s) for s in a.sizes.split(",") if s]
    amx, avx = json.load(open(a.amx_json)), json.load(open(a.avx512_json))
    problems = []
    if amx.get("coil_isa") != "avx512_amx":
        problems.append(f"the AMX run compiled for {amx.get('coil_isa')!r}, not avx512_amx")
    if avx.get("coil_isa") != "avx512":
        problems.append(f"the AVX512-BF16 run compiled for {avx.get('coil_isa')!r}, not avx512")

    def row(doc, wid, backend, t, what):
        for r in doc["rows"]:
            if r["id"] == wid and r["backend"] == backend and r["threads"] == t:
                check = r.get("check")
                if backend == "coil" and not (check and check.get("ok")):
                    problems.append(f"{what} {wid} at {t} threads: check against oneDNN failed "
                                    f"({check})")
                return r["gflops"]
        if backend == "coil":
            skipped = doc.get("coil_skipped", {}).get(f"{wid}/{t}", "")
            problems.append(f"{what} {wid} at {t} threads: no row {skipped[:300]}")
        return None

    table = []
    hdr = (f"{'size':>5} {'thr':>3} {'coil AMX':>9} {'coil bf16':>9} {'coil f32':>9} "
           f"{'oneDNN':>9} {'torch':>9}  AMX/torch AMX/f32 GF/core")
    print("\nbf16 GEMM, GFLOP/s (median); coil bf16 = AVX512-BF16 kernel, oneDNN = its bf16 "
          "matmul, torch = eager bf16 torch.mm")
    print(hdr)
    for n in sizes:
        for t in threads:
            r = {"size": n, "threads": t,
                 "coil_amx": row(amx, f"bf16_sq{n}", "coil", t, "coil AMX"),
                 "coil_avx512_bf16": row(avx, f"bf16_sq{n}", "coil", t, "coil AVX512-BF16"),
                 "coil_fp32": row(amx, f"sq{n}", "coil", t, "coil fp32"),
                 "dnnl_bf16": row(amx, f"bf16_sq{n}", "dnnl_matmul_bf16", t, "oneDNN"),
                 "torch_bf16": row(amx, f"bf16_sq{n}", "torch_eager", t, "torch")}
            ca = r["coil_amx"]
            r["amx_over_torch"] = ca / r["torch_bf16"] if ca and r["torch_bf16"] else None
            r["amx_over_fp32"] = ca / r["coil_fp32"] if ca and r["coil_fp32"] else None
            r["amx_gflops_per_core"] = ca / t if ca else None
            r["targets"] = {
                "amx_ge_torch": r["amx_over_torch"] is not None and r["amx_over_torch"] >= 1.0}
            if t >= 16:
                r["targets"]["amx_ge_3x_fp32"] = (r["amx_over_fp32"] or 0) >= 3.0
            if n == 2048 and t == 1:
                r["targets"]["amx_ge_1tflops_per_core"] = (ca or 0) >= 1000.0
            table.append(r)

            def f(x, w=9):
                return f"{x:{w}.1f}" if x is not None else f"{'-':>{w}}"

            def ratio(x):
                return f"{x:9.2f}" if x is not None else f"{'-':>9}"
            print(f"{n:>5} {t:>3} {f(ca)} {f(r['coil_avx512_bf16'])} {f(r['coil_fp32'])} "
                  f"{f(r['dnnl_bf16'])} {f(r['torch_bf16'])} {ratio(r['amx_over_torch'])}"
                  f"{ratio(r['amx_over_fp32'])} {f(r['amx_gflops_per_core'], 8)}")
    missed = [f"{r['size']}/{r['threads']}: {k}" for r in table
              for k, ok in r["targets"].items() if not ok]
    print("targets missed: " + (", ".join(missed) if missed else "none"))
    out = {"tool": "bench/amx/summarize.py", "host": amx.get("host"),
           "torch": amx.get("torch"), "load_average": [amx.get("load_average_start"),
                                                       avx.get("load_average_end")],
           "rows": table, "targets_missed": missed, "problems": problems}
    if a.json:
        with open(a.json, "w") as fh:
            fh.write(json.dumps(out, indent=2) + "\n")
        print(f"wrote {a.json}")
    for msg in problems:
        print("PROBLEM: " + msg, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Before/after table of an A/B of coil_cpu_bench runs (docs/benchmarks.md, "Before and after
issue 17"): PREFIX-old-N.json (the commit before) and PREFIX-new-N.json (after), alternated.
Per cell: the median over rounds of each round's median, and the fastest single run.

  python3 compare.py suite      # or: tail
"""
import glob
import json
import math
import os
import statistics
import sys

prefix = sys.argv[1] if len(sys.argv) > 1 else "suite"
here = os.path.dirname(os.path.abspath(__file__))
med, fast = {}, {}
for side in ("old", "new"):
    for f in sorted(glob.glob(os.path.join(here, f"{prefix}-{side}-*.json"))):
        for w in json.load(open(f))["workloads"]:
            for t in w["threads"]:
                key = (w["id"], t["threads"])
                med.setdefault(key, {}).setdefault(side, []).append(t["coil"]["median_ms"])
                fast.setdefault(key, {}).setdefault(side, []).append(t["coil"]["min_ms"])
print("| wl | thr | before ms | after ms | after/before | fastest before | fastest after | after/before |")
print("|---|---|---|---|---|---|---|---|")
rm, rf = [], []
for key in med:
    o, n = statistics.median(med[key]["old"]), statistics.median(med[key]["new"])
    fo, fn = min(fast[key]["old"]), min(fast[key]["new"])
    rm.append(n / o)
    rf.append(fn / fo)
    print(f"| {key[0]} | {key[1]} | {o:.3f} | {n:.3f} | {n / o:.2f} | {fo:.3f} | {fn:.3f} | {fn / fo:.2f} |")
geo = lambda r: math.exp(sum(map(math.log, r)) / len(r))
print(f"\ngeometric mean after/before: medians {geo(rm):.3f}, fastest runs {geo(rf):.3f}")

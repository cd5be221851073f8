#!/usr/bin/env python3
"""Merges coil_cpu_bench's JSON and eager_bench.py's JSON into one results file and prints the
table (docs/benchmarks.md explains the columns).

  python3 bench/report.py --coil coil.json --torch torch.json --out bench/results/cpu-DATE.json
  python3 bench/report.py --merged bench/results/cpu-DATE.json      # reprint a saved run

Either input may be missing (then its columns are empty). Several --coil/--torch files are
rounds of the same run (run_cpu.sh --rounds N alternates coil and torch N times): every cell
becomes the median round's measurement, with all rounds' medians kept beside it
("rounds_median_ms"), so that a slow phase of a shared machine moves one round, not the table.
Standard library only.
"""

import argparse
import copy
import json
import signal
import sys

COMPILE_TARGET_MS = 300.0
TORCH_BACKENDS = ("eager", "inductor_alloc", "inductor")


def median_entry(entries):
    """The entry whose median_ms is the median over rounds (the lower middle of an even count),
    with every round's median_ms attached."""
    ranked = sorted(entries, key=lambda e: e["median_ms"])
    pick = dict(ranked[(len(ranked) - 1) // 2])
    pick["rounds_median_ms"] = [e["median_ms"] for e in entries]
    return pick


def combine_rounds(docs, kind):
    """One coil_cpu_bench (kind "coil") or eager_bench.py ("torch") document from several rounds
    of the same invocation: each measurement is its median round's."""
    if len(docs) == 1:
        return docs[0]
    out = copy.deepcopy(docs[0])
    out["rounds"] = len(docs)
    shared_cache = kind == "torch" and shares_inductor_cache(docs) and any(
        b.startswith("inductor") for b in (docs[0].get("config") or {}).get("backends", []))
    if shared_cache:
        out["inductor_compile_from"] = "first round (later rounds reuse its code cache)"
    out["load_average_end"] = docs[-1].get("load_average_end")
    for wi, w in enumerate(out["workloads"]):
        ws = [d["workloads"][wi] for d in docs]
        if any(x["id"] != w["id"] for x in ws):
            raise SystemExit(f"report.py: rounds disagree on workload {wi} ({w['id']})")
        if kind == "coil":
            colds = sorted(x["compile"]["cold_ms"] for x in ws)
            w["compile"]["cold_ms"] = colds[(len(colds) - 1) // 2]
            w["compile"]["rounds_cold_ms"] = [x["compile"]["cold_ms"] for x in ws]
            if all(x["check"].get("done") for x in ws):
                w["check"]["ok"] = all(x["check"].get("ok") for x in ws)
            for ti, t in enumerate(w["threads"]):
                for key in ("ceiling", "coil", "copy_nontemporal"):
                    if t.get(key):
                        t[key] = median_entry([x["threads"][ti][key] for x in ws])
        else:
            for backend, b in w["backends"].items():
                for ti, t in enumerate(b["threads"]):
                    entries = [x["backends"][backend]["threads"][ti] for x in ws]
                    b["threads"][ti] = median_entry(entries)
                    if shared_cache and entries[0].get("compile_ms") is not None:
                        # Later rounds found their kernels in the first round's cache.
                        b["threads"][ti]["compile_ms"] = entries[0]["compile_ms"]
                        b["threads"][ti]["rounds_compile_ms"] = [e["compile_ms"] for e in entries]
    return out


def shares_inductor_cache(docs):
    """True when eager_bench.py rounds ran with one Inductor cache directory (run_cpu.sh
    --rounds N > 1): then only the first round's compile times are cold."""
    dirs = {(d.get("config") or {}).get("inductor_cache_dir") for d in docs}
    return len(docs) > 1 and len(dirs) == 1 and None not in dirs


def merge(coil, torch):
    """One row per (workload, thread count) seen in either input."""
    rows = {}
    order = []

    def row(wid, threads, desc, min_bytes):
        key = (wid, threads)
        if key not in rows:
            rows[key] = {"workload": wid, "desc": desc, "threads": threads,
                         "min_bytes": min_bytes}
            order.append(key)
        return rows[key]

    warnings = []
    if coil:
        for w in coil["workloads"]:
            comp = w["compile"]
            for t in w["threads"]:
                r = row(w["id"], t["threads"], w["desc"], w["min_bytes"])
                r["ceiling"] = {"kind": w["ceiling"]["kind"], "gbps": t["ceiling"]["gbps"],
                                "median_ms": t["ceiling"]["median_ms"],
                                "min_ms": t["ceiling"]["min_ms"],
                                "bytes_per_run": w["ceiling"]["bytes_per_run"],
                                "array_bytes": w["ceiling"]["array_bytes"],
                                "copy_nontemporal_gbps":
                                    (t.get("copy_nontemporal") or {}).get("gbps")}
                if t["ceiling"].get("rounds_median_ms"):
                    r["ceiling"]["rounds_median_ms"] = t["ceiling"]["rounds_median_ms"]
                c = dict(t["coil"])
                r["coil"] = c
                r["coil_compile"] = {"cold_ms": comp["cold_ms"], "warm_ms": comp["warm_ms"],
                                     "meets_target": comp["cold_ms"] <= COMPILE_TARGET_MS}
                r["coil_check"] = w["check"].get("ok") if w["check"].get("done") else None
    if torch:
        for w in torch["workloads"]:
            for backend, b in w["backends"].items():
                for t in b["threads"]:
                    r = row(w["id"], t["threads"], w["desc"], w["min_bytes"])
                    if r["min_bytes"] != w["min_bytes"]:
                        warnings.append(f"{w['id']}: coil counts {r['min_bytes']} bytes, torch "
                                        f"{w['min_bytes']}")
                    entry = {k: t[k] for k in ("median_ms", "min_ms", "max_ms", "runs", "gbps",
                                               "minor_faults_per_run", "rounds_median_ms")
                             if k in t}
                    for k in ("compile_ms", "rounds_compile_ms", "check_vs_eager"):
                        if t.get(k) is not None:
                            entry[k] = t[k]
                    if b.get("notes"):
                        entry["notes"] = b["notes"]
                    r[backend] = entry

    for key in order:
        r = rows[key]
        ceil = r.get("ceiling", {}).get("gbps")
        # The same fraction from the fastest runs (min time, and the ceiling's min time): less
        # sensitive to other processes on a shared machine than the medians.
        ceil_best = (r["ceiling"]["bytes_per_run"] / (r["ceiling"]["min_ms"] * 1e-3) / 1e9
                     if r.get("ceiling") else None)
        eager = r.get("eager", {}).get("median_ms")
        for name in ("coil",) + TORCH_BACKENDS:
            e = r.get(name)
            if not e:
                continue
            if ceil:
                e["frac_ceiling"] = e["gbps"] / ceil
                if e.get("min_ms"):
                    e["frac_ceiling_best"] = r["min_bytes"] / (e["min_ms"] * 1e-3) / 1e9 / ceil_best
            if eager and name != "eager":
                e["speedup_vs_eager"] = eager / e["median_ms"]
        if "coil" in r:
            for name in ("inductor_alloc", "inductor"):
                if name in r:
                    r["coil"][f"speedup_vs_{name}"] = r[name]["median_ms"] / r["coil"]["median_ms"]
    return [rows[k] for k in order], sorted(set(warnings))


def fmt(v, spec, width, suffix=""):
    """v formatted in `width` characters plus `suffix`, or a right-aligned '-' in as many."""
    if v is None:
        return f"{'-':>{width + len(suffix)}}"
    return f"{v:{width}{spec}}{suffix}"


def print_table(merged, out=sys.stdout):
    rows = merged["rows"]
    host = merged.get("host") or {}
    print(f"{merged.get('date', '?')}  {host.get('cpu', '?')} ({host.get('logical_cpus', '?')} "
          f"CPUs)  {host.get('compiler', '')}  torch {merged.get('torch_version') or '-'}",
          file=out)
    if merged.get("notes"):
        print(merged["notes"], file=out)
    if merged.get("rounds", 1) > 1:
        print(f"{merged['rounds']} rounds, coil and torch alternating; each time is the median "
              "round's median", file=out)
    backends = [b for b in TORCH_BACKENDS if any(b in r for r in rows)]
    short = {"eager": "eager", "inductor_alloc": "ind", "inductor": "ind-out"}
    head = (f"{'wl':<4} {'thr':>3} {'MB':>6} {'ceiling':>13} {'nt':>5} | {'coil ms':>9} "
            f"{'GB/s':>6} {'%ceil':>6}")
    for b in backends:
        head += f" | {short[b] + ' ms':>10} {'%ceil':>6}"
        if b != "eager":
            head += f" {'/eager':>6}"
    if "eager" in backends:
        head += f" | {'coil/eager':>10}"
    if "inductor_alloc" in backends:
        head += f" {'coil/ind':>8}"
    head += f" | {'cold ms':>7} {'check':>5}"
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        c, ceil = r.get("coil", {}), r.get("ceiling")
        line = f"{r['workload']:<4} {r['threads']:>3} {r['min_bytes'] / 1e6:6.1f} "
        line += (f"{ceil['kind']:>4} {ceil['gbps']:5.1f}GB/s" if ceil else f"{'-':>13}")
        line += f" {fmt((ceil or {}).get('copy_nontemporal_gbps'), '.1f', 5)}"
        pct = lambda e: None if e.get("frac_ceiling") is None else 100 * e["frac_ceiling"]  # noqa
        line += (f" | {fmt(c.get('median_ms'), '.3f', 9)} {fmt(c.get('gbps'), '.1f', 6)}"
                 f" {fmt(pct(c), '.0f', 5, '%')}")
        for b in backends:
            e = r.get(b, {})
            line += f" | {fmt(e.get('median_ms'), '.3f', 10)} {fmt(pct(e), '.0f', 5, '%')}"
            if b != "eager":
                line += f" {fmt(e.get('speedup_vs_eager'), '.2f', 5, 'x')}"
        if "eager" in backends:
            line += f" | {fmt(c.get('speedup_vs_eager'), '.2f', 9, 'x')}"
        if "inductor_alloc" in backends:
            line += f" {fmt(c.get('speedup_vs_inductor_alloc'), '.2f', 7, 'x')}"
        comp = r.get("coil_compile", {})
        check = {True: "ok", False: "FAIL", None: "-"}[r.get("coil_check")]
        line += f" | {fmt(comp.get('cold_ms'), '.0f', 7)} {check:>5}"
        print(line, file=out)

    print(file=out)
    legend = [
        "MB: minimum bytes (each input read once + each output written once).",
        "ceiling: copy (read + write bytes) or read-only bandwidth at the workload's footprint, "
        "same threads;",
        "  nt: the same copy with non-temporal stores (GB/s, for reference only).",
        "%ceil = (MB / median time) / ceiling.  X/eager = eager time / X time (> 1: X is faster).",
        "ind = torch.compile (Inductor CPU) returning fresh outputs (heap-reused); ind-out = "
        "Inductor storing into a preallocated output.",
        f"cold ms: coil's compile with an empty cache (target <= {COMPILE_TARGET_MS:.0f} ms); "
        "check: coil vs the reference interpreter.",
    ]
    print("\n".join(legend), file=out)
    faults = lambda e: e.get("minor_faults_per_run", e.get("minor_faults_per_round", 0))  # noqa
    faulty = [f"{r['workload']}/{r['threads']}/{b}" for r in rows for b in ["coil"] + backends
              if faults(r.get(b, {})) > 0.01 * r["min_bytes"] / 4096]
    if faulty:
        print("page faults in timed runs (outputs not reused): " + ", ".join(faulty), file=out)
    for note in sorted({r[b]["notes"] for r in rows for b in backends
                        if r.get(b, {}).get("notes")}):
        print(f"note: {note}", file=out)
    compiles = {r["workload"]: r["coil_compile"] for r in rows if "coil_compile" in r}
    if compiles:
        slow = [w for w, c in compiles.items() if not c["meets_target"]]
        print(f"coil cold compile: {len(compiles) - len(slow)}/{len(compiles)} workloads within "
              f"{COMPILE_TARGET_MS:.0f} ms" + (f" (over: {', '.join(slow)})" if slow else ""),
              file=out)
    coil = merged.get("coil") or {}
    if coil.get("first_compile_in_process_ms") is not None:
        print(f"coil: the first compile in the process (a tiny graph, toolchain discovery) took "
              f"{coil['first_compile_in_process_ms']:.0f} ms, not counted above", file=out)
    torch = merged.get("torch") or {}
    if torch.get("inductor_first_compile_ms") is not None:
        print(f"inductor: the first compile in the process (includes its ISA probe) took "
              f"{torch['inductor_first_compile_ms']:.0f} ms", file=out)
    if torch.get("inductor_compile_from"):
        print(f"inductor compile times: {torch['inductor_compile_from']}", file=out)
    loads = {k: v for k, v in (merged.get("load_average") or {}).items() if v}
    if loads:
        print("load average (1/5/15 min): " + "; ".join(
            f"{k.replace('_', ' ')} {' '.join(v.split()[:3])}" for k, v in loads.items()),
            file=out)
        cpus = host.get("logical_cpus") or (torch.get("host") or {}).get("logical_cpus")
        busiest = max(float(v.split()[0]) for v in loads.values())
        if cpus and busiest > 0.5 * cpus:
            print(f"warning: the machine was busy (1-min load up to {busiest:.1f} on {cpus} CPUs): "
                  "times that use every CPU are unreliable", file=out)
    for w in merged.get("warnings", []):
        print(f"warning: {w}", file=out)


def load(path):
    if not path:
        return None
    with open(path) as f:
        return json.load(f)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--coil", action="append", default=[],
                   help="coil_cpu_bench --json output (repeat for rounds)")
    p.add_argument("--torch", action="append", default=[],
                   help="eager_bench.py --json output (repeat for rounds)")
    p.add_argument("--out", help="write the merged results here")
    p.add_argument("--merged", help="print the table of a merged results file")
    p.add_argument("--notes", default="", help="free text stored in the merged file")
    a = p.parse_args()
    if a.merged:
        print_table(load(a.merged))
        return 0
    coil = combine_rounds([load(f) for f in a.coil], "coil") if a.coil else None
    torch = combine_rounds([load(f) for f in a.torch], "torch") if a.torch else None
    if not coil and not torch:
        p.error("give --coil and/or --torch (or --merged)")
    rows, warnings = merge(coil, torch)
    first = coil or torch
    merged = {
        "schema": "coil-cpu-bench/1",
        "date": first["date"],
        "host": (coil or {}).get("host", {}),
        "torch_version": (torch or {}).get("torch_version"),
        "notes": a.notes,
        "rounds": max(len(a.coil), len(a.torch)),
        "load_average": {
            "coil_start": (coil or {}).get("load_average_start"),
            "coil_end": (coil or {}).get("load_average_end"),
            "torch_start": (torch or {}).get("load_average_start"),
            "torch_end": (torch or {}).get("load_average_end"),
        },
        "warnings": warnings,
        "rows": rows,
        "coil": coil,
        "torch": torch,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(merged, f, indent=2)
            f.write("\n")
    print_table(merged)
    if a.out:
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

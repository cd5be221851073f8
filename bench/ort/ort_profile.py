#!/usr/bin/env python3
"""Per-node times of an ONNX Runtime profile, to set beside `coil bench MODEL --profile`.

    node bench/ort/ort_time.js MODEL.onnx --threads 1 --runs 30 --profile /tmp/ort
    python3 bench/ort/ort_profile.py /tmp/ort_<date>.json [--top 20]

ORT's profile (enableProfiling) has one "Node" event per node and run, named
`<output>_<suffix>_kernel_time`. This prints, per node in run order, the median of its runs in
microseconds, its op, input shapes and whether ORT runs it in its blocked layout (NCHWc), then
totals per kind: convolutions split into 1x1, depthwise and other, as coil's kernels are split.
Standard library only.
"""
import argparse
import collections
import json
import statistics


def conv_kind(shapes):
    """1x1, depthwise or dense, from a Conv node's input shapes (x, w[, b])."""
    if len(shapes) < 2 or len(shapes[1]) != 4:
        return "conv"
    oc, icg, kh, kw = shapes[1]
    if icg == 1 and oc == shapes[0][1]:
        return "conv depthwise"
    if kh == 1 and kw == 1:
        return "conv 1x1"
    return "conv dense"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile")
    p.add_argument("--top", type=int, default=0, help="print only the N slowest nodes")
    args = p.parse_args()
    events = [e for e in json.load(open(args.profile)) if e.get("cat") == "Node"
              and e["name"].endswith("_kernel_time")]
    times = collections.defaultdict(list)
    meta = {}
    order = []
    for e in events:
        name = e["name"][: -len("_kernel_time")]
        if name not in meta:
            order.append(name)
            a = e.get("args", {})
            shapes = [list(d.values())[0] for d in a.get("input_type_shape", [])]
            op = a.get("op_name", "?")
            kind = conv_kind(shapes) if op in ("Conv", "FusedConv") else op
            meta[name] = (op, kind, shapes, "nchwc" in name)
        times[name].append(e["dur"])
    rows = [(statistics.median(times[n]), n) for n in order]
    total = sum(t for t, _ in rows)
    shown = sorted(rows, reverse=True)[: args.top] if args.top else rows
    print(f"{'median us':>10} {'share':>6}  {'kind':<15} {'nchwc':<5} node  inputs")
    for t, n in shown:
        op, kind, shapes, nchwc = meta[n]
        print(f"{t:10.1f} {100 * t / total:5.1f}%  {kind:<15} {'yes' if nchwc else '':<5} "
              f"{n[-48:]}  {shapes[:2]}")
    per_kind = collections.Counter()
    for t, n in rows:
        per_kind[meta[n][1]] += t
    print(f"\n{len(rows)} nodes, {total / 1000:.3f} ms in total (medians summed); per kind:")
    for kind, t in per_kind.most_common():
        print(f"  {kind:<15} {t / 1000:8.3f} ms  {100 * t / total:5.1f}%")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ONNX's backend node tests through coil and through ONNX Runtime, side by side (issue 27's
headline figure; docs/benchmarks.md, "ONNX node tests against ONNX Runtime"; the figures are in
docs/onnx.md, "Results").

Every directory of <testdata>/node (Debian's libonnx-testdata, ONNX 1.12: 810 tests and 122
`_expanded` ones, which replace an op by its function body) runs through

  ort   `node bench/ort/node_tests.js -` with the directories on stdin (onnxruntime-node from npm, installed by
        `bash scripts/setup_ort.sh`): every graph input fed from the test's .pb files at run
        time, one intra-op thread; restarted after the test that crashed it, if one does;
  coil  the conformance report (tests/conformance/conformance_report_test.cpp) with
        COIL_CONFORMANCE_RESULTS: import, compile, run, compare; a test whose ops coil does not
        have is a failure ("unsupported"). When the import says a shape argument (Reshape's
        shape, Slice's starts, ...) is a graph input, coil's runner binds the test's integer and
        one-element inputs (and Resize's roi and scales) as constants and imports again: a
        specialization on those values (`specialized` in the JSON; the table counts the passes
        that needed it).

Both compare every output with the expected one at rtol 1e-3, atol 1e-5 (integers, bools and
strings equal; NaN equal to NaN; dtype and shape equal). Prints the table (the non-expanded
tests and the whole set: total, ORT pass, coil pass, both, only ORT, only coil, neither), the
ORT-only tests grouped by op (the work left for coil) and the coil-only ones, and writes the JSON
(default bench/results/onnx-node-tests-<date>.json). Not a CTest test: it takes minutes.

  /usr/bin/python3 bench/onnx_node_tests.py [--build build] [--testdata DIR] [--filter SUBSTR]
      [--json FILE] [--ort-results FILE.jsonl] [--coil-results FILE.tsv] [--skip-coil]
      [--skip-ort]

--ort-results / --coil-results keep each side's raw per-test records (and, with --skip-ort /
--skip-coil, read them back instead of running that side again).
"""

import argparse
import collections
import datetime
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_TIMEOUT_S = 120  # per test, as coil's runner (conformance_report_test.cpp)


def testdata_root(arg):
    return arg or os.environ.get("COIL_ONNX_TESTDATA") or "/usr/share/libonnx-testdata/data"


def node_tests(root, substr):
    base = os.path.join(root, "node")
    names = sorted(d for d in os.listdir(base)
                   if os.path.exists(os.path.join(base, d, "model.onnx")))
    return [n for n in names if not substr or substr in n]


def model_ops(path):
    import onnx  # Debian's python3-onnx
    m = onnx.load(path, load_external_data=False)
    return sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                   for n in m.graph.node})


# ---- ONNX Runtime --------------------------------------------------------------------------


def run_ort(root, tests, out_file):
    """Runs the tests through bench/ort/node_tests.js; {test: {"outcome", "reason"}}."""
    script = os.path.join(ROOT, "bench", "ort", "node_tests.js")
    if not os.path.isdir(os.path.join(ROOT, "bench", "ort", "node_modules", "onnxruntime-node")):
        sys.exit("onnxruntime-node is missing: run `bash scripts/setup_ort.sh`")
    results = {}
    rest = list(tests)
    while rest:
        dirs = [os.path.join(root, "node", t) for t in rest]
        err = tempfile.TemporaryFile("w+")  # a file, not a pipe: nobody reads it while running
        proc = subprocess.Popen(["node", script, "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
        proc.stdin.write("".join(d + "\n" for d in dirs))
        proc.stdin.close()
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        while rest:
            try:
                line = lines.get(timeout=TEST_TIMEOUT_S)
            except queue.Empty:
                proc.kill()
                results[rest.pop(0)] = {"outcome": "error",
                                        "reason": f"timeout ({TEST_TIMEOUT_S} s)"}
                break
            if line is None:  # the process ended before the test's line: it crashed there
                proc.wait()
                err.seek(0)
                last = err.read().strip().splitlines()[-1:]
                results[rest.pop(0)] = {
                    "outcome": "error",
                    "reason": f"crash (exit {proc.returncode}) {' '.join(last)}".strip()}
                break
            r = json.loads(line)
            name = r.pop("test")
            assert name == rest[0], (name, rest[0])
            results[rest.pop(0)] = r
            print(f"ort  {r['outcome']:<5} {name}", flush=True)
        proc.wait()
    with open(out_file, "w") as f:
        for t in tests:
            f.write(json.dumps({"test": t, **results[t]}) + "\n")
    return results


def read_ort(path):
    with open(path) as f:
        return {r.pop("test"): r for r in map(json.loads, f)}


# ---- coil ----------------------------------------------------------------------------------


def run_coil(build, tests, substr, out_file):
    """Runs coil's conformance report on node/; {test: {"outcome", "specialized", "reason"}}."""
    binary = os.path.join(build, "tests", "coil_conformance_tests")
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: `ninja -C {build} coil_conformance_tests`")
    env = dict(os.environ, COIL_CONFORMANCE_RESULTS=out_file,
               COIL_CONFORMANCE_FILTER="node/" + (substr or ""))
    subprocess.run([binary, "--gtest_also_run_disabled_tests",
                    "--gtest_filter=OnnxConformanceReport.DISABLED_AllTests"],
                   env=env, check=True, cwd=ROOT)
    return read_coil(out_file)


def read_coil(path):
    results = {}
    with open(path) as f:
        for line in f:
            name, outcome, spec, reason = line.rstrip("\n").split("\t", 3)
            if name.startswith("node/"):
                results[name[5:]] = {"outcome": outcome, "specialized": spec == "1",
                                     "reason": reason}
    return results


# ---- the comparison ------------------------------------------------------------------------


def summarize(tests, ort, coil):
    s = collections.Counter(total=len(tests))
    for t in tests:
        o = ort[t]["outcome"] == "pass"
        c = coil[t]["outcome"] == "pass"
        s["ort_pass"] += o
        s["coil_pass"] += c
        s["coil_pass_specialized"] += c and coil[t]["specialized"]
        s["both"] += o and c
        s["only_ort"] += o and not c
        s["only_coil"] += c and not o
        s["neither"] += not o and not c
    return dict(s)


def group_key(test, ops, coil):
    """What an ORT-only test needs in coil: "Op: why", the op being the one coil lacks, else the
    op the test is for (an `_expanded` test: the op of its non-expanded twin)."""
    r = coil[test]
    reason = r["reason"]
    if r["outcome"] == "unsupported" and reason.startswith("unsupported ops: "):
        return reason[len("unsupported ops: "):] + ": op missing"
    twin = test[:-len("_expanded")] if test.endswith("_expanded") else test
    op = "+".join(ops.get(twin) or ops[test])
    m = re.search(r"unsupported ops: (\w+) \(node [^)]*\), opset \d+: (.*)\)$", reason)
    if m:
        return f"{m.group(1)}: {m.group(2)}"
    m = re.search(r"dtype (\w+)", reason)
    if m:
        return f"{op}: dtype {m.group(1)}"
    return f"{op}: {r['outcome']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--testdata")
    ap.add_argument("--filter", help="only the tests whose name contains this")
    ap.add_argument("--json")
    ap.add_argument("--ort-results")
    ap.add_argument("--coil-results")
    ap.add_argument("--skip-ort", action="store_true")
    ap.add_argument("--skip-coil", action="store_true")
    args = ap.parse_args()

    root = testdata_root(args.testdata)
    tests = node_tests(root, args.filter)
    tmp = tempfile.mkdtemp(prefix="onnx-node-tests-")
    ort_file = args.ort_results or os.path.join(tmp, "ort.jsonl")
    coil_file = args.coil_results or os.path.join(tmp, "coil.tsv")
    times = {}

    t0 = time.time()
    ort = read_ort(ort_file) if args.skip_ort else run_ort(root, tests, ort_file)
    times["ort_s"] = round(time.time() - t0, 1)
    t0 = time.time()
    coil = read_coil(coil_file) if args.skip_coil else run_coil(args.build, tests, args.filter,
                                                                coil_file)
    times["coil_s"] = round(time.time() - t0, 1)
    missing = [t for t in tests if t not in ort or t not in coil]
    if missing:
        sys.exit(f"no result for {len(missing)} tests, e.g. {missing[:5]}")

    ops = {t: model_ops(os.path.join(root, "node", t, "model.onnx")) for t in tests}
    plain = [t for t in tests if not t.endswith("_expanded")]
    summary = {"non_expanded": summarize(plain, ort, coil), "all": summarize(tests, ort, coil)}
    ort_only = collections.defaultdict(list)
    for t in tests:
        if ort[t]["outcome"] == "pass" and coil[t]["outcome"] != "pass":
            ort_only[group_key(t, ops, coil)].append(t)
    ort_only = dict(sorted(ort_only.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    coil_only = {t: ort[t]["reason"] for t in tests
                 if coil[t]["outcome"] == "pass" and ort[t]["outcome"] != "pass"}

    cols = ["total", "ort_pass", "coil_pass", "coil_pass_specialized", "both", "only_ort",
            "only_coil", "neither"]
    print("\n| tests | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for k, s in summary.items():
        print(f"| {k} | " + " | ".join(str(s.get(c, 0)) for c in cols) + " |")
    print(f"\nORT passes, coil does not ({sum(map(len, ort_only.values()))} tests), by op:")
    for k, v in ort_only.items():
        print(f"  {len(v):>3}  {k}: {' '.join(v)}")
    print(f"\ncoil passes, ORT does not ({len(coil_only)} tests):")
    for t, why in coil_only.items():
        print(f"  {t}: {why[:160]}")

    try:
        ort_version = subprocess.run(
            ["node", "-e", "console.log(require('onnxruntime-node/package.json').version)"],
            cwd=os.path.join(ROOT, "bench", "ort"), capture_output=True, text=True).stdout.strip()
    except OSError:
        ort_version = None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    out = {
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "testdata": os.path.join(root, "node"),
        "onnx_testdata_version": "1.12 (Debian libonnx-testdata)",
        "onnxruntime_node": ort_version,
        "coil_commit": commit,
        "tolerance": {"rtol": 1e-3, "atol": 1e-5},
        "filter": args.filter,
        "seconds": times,
        "summary": summary,
        "ort_only_by_op": ort_only,
        "coil_only": coil_only,
        "tests": {t: {"ops": ops[t], "ort": ort[t], "coil": coil[t]} for t in tests},
    }
    path = args.json or os.path.join(
        ROOT, "bench", "results",
        f"onnx-node-tests-{datetime.datetime.utcnow().strftime('%Y-%m-%d')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()

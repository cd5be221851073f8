#!/usr/bin/env python3
"""Tests of tests/fuzz/run_triton.py that need no GPU (ctest -L fuzz; tests/fuzz/README.md,
"Triton"):

    python3 tests/fuzz/test_run_triton.py                 # the comparison and the verdicts
    python3 tests/fuzz/test_run_triton.py --cases DIR     # also: DIR (coil_fuzz --emit-cuda)
                                                          # is complete and checks as it should

The comparison must be the CPU mode's (src/runtime/compare.cpp, tests/fuzz/evaluate.cpp): these
cases are the rules written out, each with an answer that must fail beside one that must pass.
"""

import argparse
import ast
import json
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_triton as rt  # noqa: E402

CASES_DIR = None

NAN, INF = float("nan"), float("inf")


class ElementMatches(unittest.TestCase):
    def check(self, got, exp, want, rtol=1e-4, atol=1e-5):
        self.assertEqual(bool(rt.element_matches(got, exp, rtol, atol)), want, (got, exp))

    def test_tolerance(self):
        self.check(1.0, 1.0, True)
        self.check(1.0 + 1e-4, 1.0, True)          # |d| = 1e-4 <= 1e-5 + 1e-4
        self.check(1.0 + 2e-4, 1.0, False)
        self.check(1e-5, 0.0, True)                # atol alone
        self.check(2e-5, 0.0, False)
        self.check(100.0, 100.0 + 0.0100, True)    # rtol scales with |expected|
        self.check(100.0, 100.0 + 0.0101, False)
        self.check(-0.0, 0.0, True)

    def test_nan_and_inf(self):
        self.check(NAN, NAN, True)
        self.check(NAN, 1.0, False)
        self.check(1.0, NAN, False)
        self.check(INF, INF, True)
        self.check(-INF, -INF, True)
        self.check(INF, -INF, False)
        self.check(INF, 1e308, False)
        self.check(1e308, INF, False)
        self.check(NAN, INF, False)

    def test_vectorized(self):
        got = np.array([1.0, NAN, INF, 2.0])
        exp = np.array([1.0, NAN, INF, 3.0])
        self.assertEqual(rt.element_matches(got, exp, 1e-4, 1e-5).tolist(),
                         [True, True, True, False])


class CompareOutput(unittest.TestCase):
    def test_right_answer_passes(self):
        e = np.linspace(-3, 3, 50)
        self.assertEqual(rt.compare_output(e.copy(), e, None, 1e-4, 1e-5), (True, ""))

    def test_wrong_answer_fails(self):
        e = np.linspace(-3, 3, 50)
        g = e.copy()
        g[17] += 0.01
        ok, msg = rt.compare_output(g, e, None, 1e-4, 1e-5)
        self.assertFalse(ok)
        self.assertIn("1 of 50 elements differ", msg)
        self.assertIn("linear index 17", msg)

    def test_worst_element_is_reported(self):
        e = np.zeros(10)
        g = e.copy()
        g[2], g[7] = 0.1, 0.5
        ok, msg = rt.compare_output(g, e, None, 1e-4, 1e-5)
        self.assertFalse(ok)
        self.assertIn("2 of 10", msg)
        self.assertIn("linear index 7", msg)

    def test_unwritten_element_fails(self):
        e = np.ones((3, 4))
        g = e.copy()
        g[1, 2] = NAN  # the runner poisons outputs with NaN
        self.assertFalse(rt.compare_output(g, e, None, 1e-2, 1e-3)[0])

    def test_integers_are_exact(self):
        e = np.array([0, 5, -3, 2**40], dtype=np.int64)
        self.assertTrue(rt.compare_output(e.copy(), e, None, 0, 0)[0])
        for i in range(4):
            g = e.copy()
            g[i] += 1
            self.assertFalse(rt.compare_output(g, e, None, 0, 0)[0], i)
        big = np.array([2**53 + 1], dtype=np.int64)  # exact beyond double's 53 bits, too
        self.assertFalse(rt.compare_output(big - 1, big, None, 0, 0)[0])

    def test_bools(self):
        e = rt.canonical(np.array([True, False, True]), "bool")
        self.assertTrue(rt.compare_output(e.copy(), e, None, 0, 0)[0])
        self.assertFalse(rt.compare_output(1 - e, e, None, 0, 0)[0])

    def test_shape_must_match(self):
        e = np.zeros((2, 3))
        self.assertFalse(rt.compare_output(np.zeros((3, 2)), e, None, 1e-4, 1e-5)[0])
        self.assertFalse(rt.compare_output(np.zeros(6), e, None, 1e-4, 1e-5)[0])

    def test_empty_output(self):
        e = np.zeros((2, 0))
        self.assertTrue(rt.compare_output(np.zeros((2, 0)), e, None, 1e-4, 1e-5)[0])

    def test_widened_reference(self):
        # within_either: within tolerance of either reference, or between two finite ones
        e = np.array([1.0, 1.0, 1.0, 1.0, NAN])
        w = np.array([1.5, 1.5, 1.5, 1.5, 2.0])
        tol = (1e-2, 1e-3)
        ok = lambda g: rt.compare_output(np.array(g), e, w, *tol)[0]  # noqa: E731
        self.assertTrue(ok([1.0, 1.5, 1.2, 1.505, NAN]))   # e, w, between, near w, NaN = e
        self.assertTrue(ok([1.0, 1.0, 1.0, 1.0, 2.0]))     # the widened NaN-free value
        self.assertFalse(ok([1.0, 1.0, 1.0, 1.6, NAN]))    # beyond both
        self.assertFalse(ok([1.0, 1.0, 1.0, 0.9, NAN]))    # below both
        self.assertFalse(ok([1.0, 1.0, 1.0, 1.0, 1.5]))    # between a NaN and 2: no
        self.assertFalse(rt.compare_output(np.array([1.2]), np.array([1.0]), None, *tol)[0])

    def test_widened_integers(self):
        e = np.array([3, 3], dtype=np.int64)
        w = np.array([5, 3], dtype=np.int64)
        self.assertTrue(rt.compare_output(np.array([4, 3]), e, w, 0, 0)[0])  # between
        self.assertFalse(rt.compare_output(np.array([6, 3]), e, w, 0, 0)[0])

    def test_bf16_and_f16_files(self):
        x = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
        raw = (x.view(np.uint32) >> 16).astype(np.uint16).view(np.dtype("V2"))
        self.assertEqual(rt.canonical(raw, "bf16").tolist(), [1.0, -2.5, 3.140625])
        self.assertEqual(rt.canonical(raw[1:2].reshape(()), "bf16").shape, ())  # 0-d stays
        h = np.array([0.1], dtype=np.float16)
        self.assertEqual(rt.canonical(h, "f16").dtype, np.float64)
        self.assertEqual(rt.canonical(np.array([7], dtype=np.uint8), "u8").dtype, np.int64)


def _meta(keys, outputs_per_graph=1):
    graphs, pos = [], 0
    for k in keys:
        outs = []
        for _ in range(outputs_per_graph):
            outs.append({"position": pos, "name": f"y{pos}"})
            pos += 1
        graphs.append({"key": k, "outputs": outs, "origin": f"coil_fuzz --index {k}"})
    return {"name": "case-x", "graphs": graphs}


class BatchVerdicts(unittest.TestCase):
    """Run's bookkeeping: failures in a batch run again alone, then are settled."""

    def make(self, keys):
        run = rt.Run("/none", ["c"], metas={"c": _meta(keys)})
        self.assertEqual(list(run.queue), [("c", None)])
        run.queue.clear()
        return run

    def test_wrong_member_is_rerun_alone(self):
        run = self.make(["1", "2", "3"])
        run.finish("c", None, {"1": ("", ""), "2": ("wrong", "w"), "3": ("", "")})
        self.assertEqual(list(run.queue), [("c", "2")])
        self.assertNotIn(("c", "2"), run.final)
        run.queue.clear()
        run.finish("c", "2", {"2": ("wrong", "w alone")})
        self.assertEqual(run.final[("c", "2")], ("wrong", "w alone"))
        self.assertEqual(run.final[("c", "1")], ("", ""))

    def test_wrong_only_in_batch_stays_a_failure(self):
        run = self.make(["1", "2"])
        run.finish("c", None, {"1": ("", ""), "2": ("wrong", "w")})
        run.finish("c", "2", {"2": ("", "")})
        self.assertEqual(run.final[("c", "2")], ("wrong", "only in its batch: w"))

    def test_call_error_explained_by_one_member(self):
        run = self.make(["1", "2", "3"])
        run.finish("c", None, {k: ("error", "boom") for k in "123"})
        self.assertEqual(list(run.queue), [("c", "1"), ("c", "2"), ("c", "3")])
        run.finish("c", "1", {"1": ("", "")})
        run.finish("c", "2", {"2": ("error", "boom alone")})
        self.assertEqual(len(run.final), 0)  # settled when all three are back
        run.finish("c", "3", {"3": ("", "")})
        self.assertEqual(run.final, {("c", "1"): ("", ""), ("c", "2"): ("error", "boom alone"),
                                     ("c", "3"): ("", "")})

    def test_call_error_only_in_batch_goes_to_first_member(self):
        run = self.make(["1", "2"])
        run.finish("c", None, {k: ("crash", "died") for k in "12"})
        run.finish("c", "1", {"1": ("", "")})
        run.finish("c", "2", {"2": ("", "")})
        self.assertEqual(run.final[("c", "1")], ("crash", "only in its batch: died"))
        self.assertEqual(run.final[("c", "2")], ("", ""))

    def test_time_limit(self):
        run = self.make(["1", "2"])
        run.finish("c", None, {"1": ("wrong", "w"), "2": ("", "")})
        run.not_run("c", "1")  # the alone run never happened: the batch's verdict stands
        self.assertEqual(run.final[("c", "1")], ("wrong", "w"))
        run2 = self.make(["1", "2"])
        run2.not_run("c", None)
        self.assertEqual({v[0] for v in run2.final.values()}, {"not-run"})

    def test_single_graph_case_is_final(self):
        run = self.make(["7"])
        run.finish("c", None, {"7": ("wrong", "w")})
        self.assertEqual(run.final[("c", "7")], ("wrong", "w"))
        self.assertEqual(len(run.queue), 0)


class EmittedCases(unittest.TestCase):
    """The case directories of `coil_fuzz --emit-cuda` (--cases DIR): complete, the modules
    parse, and the references check against themselves (and a wrong answer does not)."""

    def setUp(self):
        if CASES_DIR is None:
            self.skipTest("no --cases DIR")
        self.cases = sorted(d for d in os.listdir(CASES_DIR) if d.startswith("case-"))
        self.assertTrue(self.cases, f"no case directories in {CASES_DIR}")

    def test_cases_are_complete(self):
        for name in self.cases:
            d = os.path.join(CASES_DIR, name)
            meta = rt.read_case(d)
            self.assertEqual(meta["name"], name)
            files = [meta["modules"]["on"], meta["modules"]["off"], "graph.coil"]
            files += [i["file"] for i in meta["inputs"]]
            for g in meta["graphs"]:
                files.append(g["graph"])
                files += list(g.get("modules", {}).values())
                self.assertTrue(g["origin"].startswith("coil_fuzz "), g["origin"])
                for p in g["inputs"]:
                    self.assertLess(p, len(meta["inputs"]))
                for o in g["outputs"]:
                    files.append(o["ref"])
                    if o["wide"]:
                        files.append(o["wide"])
                    for k in ("position", "name", "op", "dtype", "shape", "rtol", "atol"):
                        self.assertIn(k, o)
            for f in files:
                self.assertTrue(os.path.isfile(os.path.join(d, f)), f"{name}: missing {f}")
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(d, f)) as src:
                        tree = ast.parse(src.read(), filename=f)
                    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
                    self.assertIn("call", names, f"{name}/{f}")
            positions = sorted(o["position"] for g in meta["graphs"] for o in g["outputs"])
            self.assertEqual(positions, list(range(len(positions))), name)

    def test_references_check(self):
        wrong_found = 0
        for name in self.cases:
            d = os.path.join(CASES_DIR, name)
            meta = rt.read_case(d)
            for g in meta["graphs"]:
                outs = {o["position"]: (o["dtype"], rt.load_npy(os.path.join(d, o["ref"]),
                                                                o["dtype"]))
                        for o in g["outputs"]}
                for o in g["outputs"]:
                    self.assertEqual(list(outs[o["position"]][1].shape), o["shape"])
                self.assertEqual(rt.check_graph(d, g, outs), [], f"{name} graph {g['key']}")
                for o in g["outputs"]:
                    dtype, ref = outs[o["position"]]
                    if ref.size == 0:
                        continue
                    bad = dict(outs)
                    bad[o["position"]] = (dtype, ref + np.where(np.isfinite(ref), 1.0, 0.0) +
                                          np.where(np.isfinite(ref), np.abs(ref), 0.0))
                    if not np.isfinite(ref).any():
                        continue
                    problems = rt.check_graph(d, g, bad)
                    self.assertTrue(problems, f"{name} graph {g['key']} output {o['name']}")
                    wrong_found += 1
                    bad[o["position"]] = ("i64" if dtype != "i64" else "f32", ref)
                    self.assertTrue(rt.check_graph(d, g, bad))
        self.assertGreater(wrong_found, 0)


def main():
    global CASES_DIR
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default=None, help="a directory coil_fuzz --emit-cuda wrote")
    args, rest = p.parse_known_args()
    CASES_DIR = args.cases
    if CASES_DIR is not None:
        with open(os.path.join(CASES_DIR, "emit", "summary.json")) as f:
            summary = json.load(f)
        print(f"{CASES_DIR}: {summary['graphs']} graphs in {summary['cases']} cases, "
              f"{summary['counts']}")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1)


if __name__ == "__main__":
    main()

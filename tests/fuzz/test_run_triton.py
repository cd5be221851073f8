#!/usr/bin/env python3
"""Tests of tests/fuzz/run_triton.py that need no GPU (ctest -L fuzz; tests/fuzz/README.md,
"Triton"):

    python3 tests/fuzz/test_run_triton.py                 # the comparison and the verdicts
    python3 tests/fuzz/test_run_triton.py --cases DIR     # also: DIR (coil_fuzz --emit-cuda)
                                                          # is complete and checks as it should
    python3 tests/fuzz/test_run_triton.py --coil-fuzz BIN # also: the local check of hand-made
                                                          # node values (coil_fuzz --check-values)

The comparison must be the CPU mode's (src/runtime/compare.cpp, tests/fuzz/evaluate.cpp): these
cases are the rules written out, each with an answer that must fail beside one that must pass.
"""

import argparse
import ast
import contextlib
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
import types
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_triton as rt  # noqa: E402

CASES_DIR = None
COIL_FUZZ = None

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


class LocalVerdicts(unittest.TestCase):
    """local_verdict: what the local check's answer makes of a differing output."""

    WRONG = "fusion=on: output y (div f32) differs: 1 of 4 elements differ"

    def test_explained_is_rounding(self):
        cls, msg = rt.local_verdict(self.WRONG, {"verdict": "explained", "message": "every node "
                                                 "matches", "dir": "local-000000007"})
        self.assertEqual(cls, "rounding")
        self.assertNotIn(cls, rt.FAILURES)
        self.assertTrue(msg.startswith(self.WRONG), msg)
        self.assertIn("local check: every node matches", msg)
        self.assertIn("local-000000007", msg)

    def test_everything_else_stays_wrong(self):
        for v, says in (("node-differs", "node m (matmul f32) differs"),
                        ("gone-when-stored", "with every node as an output the difference is gone"),
                        ("inconclusive", "inconclusive: the graph with every node"),
                        ("not-run", "not run: no coil_fuzz")):
            message = says.split(": ", 1)[-1]
            cls, msg = rt.local_verdict(self.WRONG, {"verdict": v, "message": message})
            self.assertEqual(cls, "wrong", v)
            self.assertIn("local check: " + says, msg)
        self.assertEqual(rt.local_verdict(self.WRONG, None), ("wrong", self.WRONG))

    def test_names(self):
        self.assertEqual(rt.local_dir_name("120"), "local-000000120")
        self.assertEqual(rt.local_dir_name("12_unread-conv2d.coil"), "local-12_unread_conv2d")

    def test_without_coil_fuzz_values_are_kept(self):
        v = rt.check_values("", "/tmp/x")
        self.assertEqual(v["verdict"], "not-run")
        self.assertEqual(rt.local_verdict(self.WRONG, v)[0], "wrong")


class RoundingBookkeeping(unittest.TestCase):
    """A difference explained as rounding is counted and listed, and is not a failure."""

    def test_batch_member_explained_alone(self):
        run = rt.Run("/none", ["c"], metas={"c": _meta(["1", "2", "3"])})
        run.queue.clear()
        run.finish("c", None, {"1": ("", ""), "2": ("wrong", "w"), "3": ("error", "boom")})
        run.finish("c", "2", {"2": ("rounding", "w | local check: every node matches")})
        run.finish("c", "3", {"3": ("rounding", "r")})
        self.assertEqual(run.final[("c", "2")][0], "rounding")
        # the batch's error is not explained by a member whose difference is rounding: it stays
        self.assertEqual(run.final[("c", "3")], ("error", "only in its batch: boom"))
        self.assertEqual(run.final[("c", "1")], ("", ""))

    def test_reports(self):
        out = tempfile.mkdtemp(prefix="coil-test-run-triton-")
        try:
            run = rt.Run("/none", ["c"], metas={"c": _meta(["1", "2", "3"])})
            for g in run.metas["c"]["graphs"]:
                g["graph"] = "graph.coil"
            run.final = {("c", "1"): ("", ""), ("c", "2"): ("rounding", "r"),
                         ("c", "3"): ("rounding", "r")}
            args = types.SimpleNamespace(fusion="on", configs="random", jobs=1, device_name="x")
            report = lambda: rt.write_reports(run, "/none", out, args, 1.0, {})  # noqa: E731
            with contextlib.redirect_stdout(io.StringIO()) as text:
                self.assertEqual(report(), 0)
            self.assertIn("rounding       2", text.getvalue())
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual((summary["passed"], summary["rounding"], summary["wrong"]), (1, 2, 0))
            with open(os.path.join(out, "failures.tsv")) as f:
                rows = [r.split("\t") for r in f.read().splitlines()[1:]]
            self.assertEqual([(r[0], r[1]) for r in rows], [("2", "rounding"), ("3", "rounding")])
            run.final[("c", "1")] = ("wrong", "w")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(report(), 1)
            with open(os.path.join(out, "failures.tsv")) as f:
                self.assertEqual(f.read().splitlines()[1].split("\t")[:2], ["1", "wrong"])
        finally:
            shutil.rmtree(out, ignore_errors=True)


# y = x / (a @ b), with (a @ b)[0, 0] = 1e-6 nearly cancelling: the GPU's matmul off by 1e-6 at
# that element (within its rounding bound, 8 u K max|a| max|b|) doubles y[0, 0].
HAND_GRAPH = """input a: f32[2, 3]
input b: f32[3, 2]
input x: f32[2, 2]
m = matmul(a, b)
y = div(x, m)
output y
"""


def hand_values(d, perturb=None, drop=None):
    """A check_values.h directory of HAND_GRAPH with node values as a GPU could compute them;
    `perturb`: (node name, index, delta) added to that value, `drop`: a node left out."""
    os.makedirs(os.path.join(d, "values"))
    with open(os.path.join(d, "graph.coil"), "w") as f:
        f.write(HAND_GRAPH)
    a = np.array([[1, 1, 1], [0.5, -0.25, 1]], np.float32)
    b = np.array([[1, 0.5], [-1, 0.25], [1e-6, 1]], np.float32)
    x = np.ones((2, 2), np.float32)
    m = (a.astype(np.float64) @ b).astype(np.float32)
    m[0, 0] += np.float32(1e-6)
    values = {"a": a, "b": b, "x": x, "m": m, "y": None}
    if perturb and perturb[0] == "m":
        m[perturb[1]] += np.float32(perturb[2])
    values["y"] = x / m
    if perturb and perturb[0] == "y":
        values["y"][perturb[1]] += np.float32(perturb[2])
    nodes = []
    for i, (name, v) in enumerate(values.items()):
        if name == drop:
            continue
        np.save(os.path.join(d, "values", f"{i}.npy"), v)
        nodes.append({"node": i, "name": name})
    rt.write_values_json(d, nodes)
    reference = x / (a.astype(np.float64) @ b)
    return values["y"], reference


class CheckValues(unittest.TestCase):
    """coil_fuzz --check-values (--coil-fuzz BIN) on hand-made node values, through
    run_triton.py's check_values and local_verdict."""

    def setUp(self):
        if COIL_FUZZ is None:
            self.skipTest("no --coil-fuzz BIN")
        self.tmp = tempfile.mkdtemp(prefix="coil-test-check-values-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, **kw):
        d = os.path.join(self.tmp, f"d{len(os.listdir(self.tmp))}")
        got, reference = hand_values(d, **kw)
        return rt.check_values(COIL_FUZZ, d), got, reference

    def test_amplified_rounding_is_explained(self):
        v, got, reference = self.check()
        # the output is far from the reference ...
        self.assertFalse(rt.compare_output(got.astype(np.float64), reference, None, 1e-4,
                                           1e-5)[0])
        # ... and every node is right on its operands' values
        self.assertEqual(v["verdict"], "explained", v)
        self.assertEqual(rt.local_verdict("y differs", v)[0], "rounding")

    def test_wrong_div_is_named(self):
        v, _, _ = self.check(perturb=("y", (1, 0), 1e-2))
        self.assertEqual((v["verdict"], v["name"], v["op"]), ("node-differs", "y", "div"), v)
        self.assertIn("linear index 2", v["message"])
        cls, msg = rt.local_verdict("y differs", v)
        self.assertEqual(cls, "wrong")
        self.assertIn("local check: node y (div f32) differs", msg)

    def test_wrong_matmul_is_named(self):
        # beyond m's rounding bound (8 * 2^-24 * 3 * 1 * 1 + f32's tolerance); y = x / m is then
        # right on the wrong m: the first node that differs is the bug
        v, _, _ = self.check(perturb=("m", (1, 1), 1e-3))
        self.assertEqual((v["verdict"], v["node"], v["name"], v["op"]),
                         ("node-differs", 3, "m", "matmul"), v)

    def test_missing_value_is_inconclusive(self):
        v, _, _ = self.check(drop="m")
        self.assertEqual(v["verdict"], "inconclusive")
        self.assertIn("no value of node m", v["message"])

    def test_worker_side(self):
        """run_local_check with the instrumented module's run replaced by hand-made tensors:
        the values it saves (coil_runtime's write_npy) check as the hand-made files do. Needs
        torch (CPU) and python/coil_runtime."""
        try:
            import torch
            sys.path.insert(0, rt.PYTHON_DIR)
            importlib.import_module("coil_runtime.runtime")  # (save_node_values needs it)
        except ImportError as e:
            self.skipTest(f"no torch or coil_runtime: {e}")
        hand = os.path.join(self.tmp, "hand")
        hand_values(hand)
        case = os.path.join(self.tmp, "case")
        os.makedirs(os.path.join(case, "ref"))
        shutil.copyfile(os.path.join(hand, "graph.coil"), os.path.join(case, "graph.coil"))
        with open(os.path.join(hand, "values.json")) as f:
            v = {n["name"]: np.load(os.path.join(hand, n["file"])) for n in json.load(f)["nodes"]}
        reference = v["x"] / (v["a"].astype(np.float64) @ v["b"])
        np.save(os.path.join(case, "ref", "0.npy"), reference.astype(np.float32))
        node = lambda i, name: {"node": i, "name": name, "dtype": "f32"}  # noqa: E731
        g = {"key": "7", "graph": "graph.coil", "inputs": [0, 1, 2],
             "outputs": [{"position": 0, "name": "y", "op": "div", "dtype": "f32",
                          "ref": "ref/0.npy", "wide": None, "rtol": 1e-4, "atol": 1e-5}],
             "local": {"module": "module_local.py", "error": None, "graph_outputs": 1,
                       "inputs": [node(0, "a"), node(1, "b"), node(2, "x")],
                       "nodes": [node(3, "m"), node(4, "y")]}}
        inputs = [torch.from_numpy(v[k]) for k in "abx"]
        outs = {0: torch.from_numpy(v["y"]), 1: torch.from_numpy(v["m"]),
                2: torch.from_numpy(v["y"])}
        saved = rt._run_with_fallback
        try:
            rt._run_with_fallback = lambda *args, **kw: (dict(outs), False)
            local = rt.run_local_check(case, g, inputs, "random", [0], COIL_FUZZ)
            self.assertEqual(local["verdict"], "explained", local)
            self.assertEqual(local["dir"], "local-000000007")
            self.assertTrue(os.path.isfile(os.path.join(case, "local-000000007", "values",
                                                        "4.npy")))
            self.assertEqual(rt.local_verdict("y differs", local)[0], "rounding")
            outs[2] = outs[2].clone()
            outs[2][1, 0] += 0.01
            local = rt.run_local_check(case, g, inputs, "random", [0], COIL_FUZZ)
            self.assertEqual((local["verdict"], local["name"]), ("node-differs", "y"), local)
            outs[0] = torch.from_numpy(reference.astype(np.float32))  # passes when stored
            local = rt.run_local_check(case, g, inputs, "random", [0], COIL_FUZZ)
            self.assertEqual(local["verdict"], "gone-when-stored", local)
        finally:
            rt._run_with_fallback = saved


def round_bf16(a):
    """float32 -> nearest-even bf16, as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


class CheckPlacement(unittest.TestCase):
    """coil_fuzz --check-placement (--coil-fuzz BIN) through run_triton.py's save_fused_outputs
    and check_placement: seed 17 (t3 = t0 * (in1 - t0) rounded once to bf16 where compiled code
    stores it for the matmul) with its fused output emulated in numpy, as the GPU computes it."""

    def setUp(self):
        if COIL_FUZZ is None:
            self.skipTest("no --coil-fuzz BIN")
        try:
            import torch  # noqa: F401  (save_fused_outputs writes the inputs through torch)
            sys.path.insert(0, rt.PYTHON_DIR)
            importlib.import_module("coil_runtime.runtime")
        except ImportError as e:
            self.skipTest(f"no torch or coil_runtime: {e}")
        self.tmp = tempfile.mkdtemp(prefix="coil-test-check-placement-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_fused_rounding_is_a_placement_and_a_wrong_value_is_not(self):
        import subprocess
        from coil_runtime import runtime
        seed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds",
                            "17_bf16_rounding_placement_matmul.coil")
        subprocess.run([COIL_FUZZ, "--emit-cuda", self.tmp, "--graphs-dir", seed, "--batch",
                        "1", "-q"], check=True, capture_output=True)
        case = os.path.join(self.tmp, "case-17_bf16_rounding_placement_matmul")
        meta = rt.read_case(case)
        g = meta["graphs"][0]
        inputs = [runtime.read_npy(os.path.join(case, i["file"])) for i in meta["inputs"]]
        v = {i["name"]: t.float().numpy() for i, t in zip(meta["inputs"], inputs)}
        t3 = round_bf16(v["t0"] * (v["in1"] - v["t0"]))  # f32 arithmetic, one rounding
        fused = round_bf16((t3.astype(np.float64) @ v["in3"]).astype(np.float32))
        got = {0: ("bf16", fused.astype(np.float64))}
        self.assertTrue(rt.check_graph(case, g, got), "the emulated output must differ")
        d = rt.save_fused_outputs(case, g, inputs, got)
        verdict = rt.check_placement(COIL_FUZZ, d)
        self.assertEqual(verdict["verdict"], "explained", verdict)
        self.assertIn("(t3)", verdict["message"])
        wrong = fused.copy()
        wrong[0, 3] += 0.5
        d = rt.save_fused_outputs(case, g, inputs, {0: ("bf16", wrong.astype(np.float64))})
        self.assertEqual(rt.check_placement(COIL_FUZZ, d)["verdict"], "no-placement")


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
                # the local check's instrumented module: every other node an output, after the
                # graph's own
                local = g["local"]
                self.assertIsNone(local["error"], f"{name} graph {g['key']}")
                files.append(local["module"])
                self.assertEqual(local["graph_outputs"], len(g["outputs"]))
                self.assertEqual(len(local["inputs"]), len(g["inputs"]))
                ids = [n["node"] for n in local["inputs"] + local["nodes"]]
                self.assertEqual(sorted(ids), list(range(len(ids))), f"{name} graph {g['key']}")
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
    global CASES_DIR, COIL_FUZZ
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default=None, help="a directory coil_fuzz --emit-cuda wrote")
    p.add_argument("--coil-fuzz", default=None, help="coil_fuzz, for the --check-values tests")
    args, rest = p.parse_known_args()
    CASES_DIR = args.cases
    COIL_FUZZ = args.coil_fuzz
    if CASES_DIR is not None:
        with open(os.path.join(CASES_DIR, "emit", "summary.json")) as f:
            summary = json.load(f)
        print(f"{CASES_DIR}: {summary['graphs']} graphs in {summary['cases']} cases, "
              f"{summary['counts']}")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1)


if __name__ == "__main__":
    main()

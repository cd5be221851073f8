"""OpInfo sweep, as Inductor tests itself (test_torchinductor_opinfo.py): torch's own sample
inputs (torch.testing._internal.common_methods_invocations.op_db), float32, CPU, each sample
traced with make_fx (coil.torch's decompositions) and run through coil against eager.

Every sample gets one status:
  pass      the whole graph ran in coil and matched eager (rtol 1e-4, atol 1e-5, NaNs equal,
            same dtype and shape);
  fallback  some op stays in eager (no row, a row refused its arguments, or make_fx cannot
            trace the op): what the backend would do, so the program still runs;
  error     coil raised an error (a clear one, naming the op);
  wrong     coil ran and gave a different answer: always a failure of this test;
  skip      not a test of coil: eager itself fails on the sample, or the op is random.
The per-op report goes to $OPINFO_REPORT (default: opinfo_report.txt in the build
directory, else the system's temp directory); tests/torch/opinfo_expected.txt is the allowlist:
the samples of each op that pass, each of which must still pass (a regression fails), and the
figures of the run that wrote it. OPINFO_UPDATE=1 rewrites it from this run; OPINFO_OPS=name,name runs only those ops
(checked against their lines), e.g. to debug one.

Runtime is bounded: at most SAMPLES_PER_OP samples per op (OPINFO_SAMPLES, default 4;
the first ones, as op_db orders them), samples with more than MAX_NUMEL elements in an input
are left out, and the samples that coil can take whole compile BATCH at a time as one coil
graph (one C++ compile for dozens of ops; a batch that fails is split until the culprit runs
alone, so every status is that of the sample by itself).
"""

import math
import os
import random
import sys
import tempfile
import time

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from coil.torch import fx_compile, lowering

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPECTED = os.path.join(HERE, "opinfo_expected.txt")
SAMPLES_PER_OP = int(os.environ.get("OPINFO_SAMPLES", "4"))
MAX_NUMEL = 4096
OPTIONS = {"autotune": False}
BATCH = 48  # samples compiled as one coil graph
RTOL, ATOL = 1e-4, 1e-5


def _op_db():
    try:
        import expecttest  # noqa: F401
    except ImportError:  # Debian has no expecttest: a stand-in (tests/torch/support)
        sys.path.append(os.path.join(HERE, "support"))
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def _report_path():
    if os.environ.get("OPINFO_REPORT"):
        return os.environ["OPINFO_REPORT"]
    build = os.path.join(ROOT, "build")
    return os.path.join(build if os.path.isdir(build) else tempfile.gettempdir(),
                        "opinfo_report.txt")


def _op_id(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


class _Sample:
    def __init__(self, op, sample):
        self.op = op
        flat, self.spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
        self.flat = flat
        self.tensor_pos = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        self.status, self.reason = None, ""
        self.gm = None

    def inputs(self):
        return [self.flat[i].clone() for i in self.tensor_pos]

    def fn(self):
        flat, pos, spec, op = list(self.flat), self.tensor_pos, self.spec, self.op

        def f(*tensors):
            args = list(flat)
            for i, t in zip(pos, tensors):
                args[i] = t
            inp, a, kw = tree_unflatten(args, spec)
            return op(inp, *a, **kw)
        return f

    def set(self, status, reason=""):
        self.status, self.reason = status, reason.strip().splitlines()[0][:300] if reason else ""


def _flat_out(out):
    flat, _ = tree_flatten(out)
    return flat


def _compare(got, want):
    """None when equal, else what differs."""
    g, w = _flat_out(got), _flat_out(want)
    if len(g) != len(w):
        return f"{len(g)} outputs, eager has {len(w)}"
    for i, (a, b) in enumerate(zip(g, w)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i} is {type(a).__name__}, eager's a tensor"
            if a.dtype != b.dtype or a.shape != b.shape:
                return f"output {i}: {a.dtype}{list(a.shape)} vs eager's {b.dtype}{list(b.shape)}"
            try:
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, equal_nan=True,
                                           check_stride=False)
            except AssertionError as e:
                return f"output {i}: " + " ".join(str(e).split())[:240]
        elif a != b and not (isinstance(b, float) and math.isnan(b) and math.isnan(a)):
            return f"output {i}: {a!r} vs eager's {b!r}"
    return None


def _coil_ready(gm):
    """None when every node of `gm` has a row and static shapes, else the first that does not."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and not fx_compile._supported(n):
            return f"{n.target} stays in eager"
        if n.op not in ("placeholder", "call_function", "output", "get_attr"):
            return f"FX node kind {n.op}"
    return None


def _functional(f):
    """f with in-place ops made functional (as AOTAutograd does on torch 2.x), where this torch
    can: functorch.experimental.functionalize on 1.13, torch.func.functionalize on 2.x."""
    try:
        from torch.func import functionalize
    except ImportError:
        try:
            from functorch.experimental import functionalize
        except ImportError:
            return f
    return functionalize(f)


# Ops whose result is uninitialized memory (eager's is whatever was there).
UNDEFINED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided"}


def _trace(s):
    from torch.fx.experimental.proxy_tensor import make_fx
    if s.op.name in UNDEFINED:
        s.set("skip", "the result is uninitialized memory")
        return None
    f = s.fn()
    torch.manual_seed(0)
    try:
        want = f(*s.inputs())
    except Exception as e:
        s.set("skip", f"eager fails: {type(e).__name__}: {e}")
        return None
    if not [t for t in _flat_out(want) if isinstance(t, torch.Tensor)]:
        s.set("skip", "no tensor output")
        return None
    torch.manual_seed(1)
    try:
        again = f(*s.inputs())
        if _compare(again, want) is not None:
            s.set("skip", "random (eager differs between seeds)")
            return None
    except Exception as e:
        s.set("skip", f"eager fails: {e}")
        return None
    try:
        s.gm = make_fx(_functional(f), decomposition_table=lowering.DECOMPOSITIONS)(*s.inputs())
        fx_compile._ensure_shapes(s.gm, s.inputs())
    except Exception as e:
        s.set("fallback", f"make_fx cannot trace it: {type(e).__name__}: {e}")
        return None
    torch.manual_seed(1)
    try:
        traced = s.gm(*s.inputs())
        if _compare(traced, want) is not None:
            s.set("skip", "the traced graph differs from eager in eager (random, or make_fx "
                  "lost something)")
            return None
    except Exception as e:
        s.set("skip", f"the traced graph fails in eager: {type(e).__name__}: {e}")
        return None
    for n in s.gm.graph.nodes:
        if n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(
                n.target, "tags", ()):
            s.set("skip", f"random ({n.target}; op_db seeds eager, not the graph)")
            return None
    s.want = want
    return want


def _run_one(s):
    """Compiles and runs one traced sample through compile_fx (partitioning included)."""
    fallbacks = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: fallbacks.append(f"{what}: {why}")
    try:
        compiled = fx_compile.compile_fx(s.gm, s.inputs(), OPTIONS)
        got = compiled(*s.inputs())
    except Exception as e:
        s.set("error", f"{type(e).__name__}: {e}")
        return
    finally:
        fx_compile._log_fallback = real
    bad = _compare(got, s.want)
    if bad:
        s.set("wrong", bad)
    elif fallbacks:
        s.set("fallback", fallbacks[0])
    else:
        s.set("pass")


def _run_batch(samples):
    """The samples that coil takes whole, compiled as one graph; True when it worked."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gms = [s.gm for s in samples]
    counts = [len(s.tensor_pos) for s in samples]

    def all_of(*tensors):
        outs, k = [], 0
        for gm, c in zip(gms, counts):
            outs.append(gm(*tensors[k:k + c]))
            k += c
        return outs
    inputs = [t for s in samples for t in s.inputs()]
    try:
        big = make_fx(all_of)(*inputs)
        fx_compile._ensure_shapes(big, inputs)
        if _coil_ready(big) is not None:
            return False
        compiled = fx_compile.CoilGraphCallable(big, OPTIONS)
        got = compiled(*[t for s in samples for t in s.inputs()])
    except Exception:
        return False
    for s, g in zip(samples, got):
        bad = _compare(g, s.want)
        s.set("wrong", bad) if bad else s.set("pass")
    return True


def _samples_of(op):
    random.seed(0)
    torch.manual_seed(0)
    samples = []
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
        if any(isinstance(t, torch.Tensor) and t.numel() > MAX_NUMEL for t in flat):
            continue
        samples.append(_Sample(op, sample))
        if len(samples) >= SAMPLES_PER_OP:
            break
    return samples


def _run_ready(group):
    """Runs samples coil takes whole: as one graph, else halves of it, else one by one."""
    if not group:
        return
    if len(group) > 1 and _run_batch(group):
        return
    if len(group) > 2:
        half = len(group) // 2
        _run_ready(group[:half])
        _run_ready(group[half:])
        return
    for s in group:
        _run_one(s)


def _sweep():
    only = set(filter(None, os.environ.get("OPINFO_OPS", "").split(",")))
    ops = [op for op in _op_db() if torch.float32 in op.supported_dtypes("cpu") and
           (not only or _op_id(op) in only)]
    results = {}
    ready = []
    for op in ops:
        try:
            samples = _samples_of(op)
        except Exception as e:
            results[_op_id(op)] = ([], f"sample_inputs fails: {e}")
            continue
        for s in samples:
            if _trace(s) is None:
                continue
            why = _coil_ready(s.gm)
            if why is None:
                ready.append(s)
            else:
                _run_one(s)  # partitioned: fallback (or wrong, or an error)
        results[_op_id(op)] = (samples, "")
    # The samples coil takes whole compile BATCH at a time as one graph (one C++ compile for
    # many ops); a batch that fails is split until the failing samples run alone.
    for i in range(0, len(ready), BATCH):
        _run_ready(ready[i:i + BATCH])
    for s in ready:  # a wrong answer in a batch: confirmed alone
        if s.status == "wrong":
            _run_one(s)
    return results


def _figures(results):
    c = {"pass": 0, "fallback": 0, "error": 0, "wrong": 0, "skip": 0}
    for samples, _ in results.values():
        for s in samples:
            c[s.status] += 1
    tried = c["pass"] + c["fallback"] + c["error"] + c["wrong"]
    ops_tried = sum(1 for samples, _ in results.values()
                    if any(s.status != "skip" for s in samples))
    ops_all = sum(1 for samples, _ in results.values()
                  if samples and all(s.status == "pass" for s in samples if s.status != "skip")
                  and any(s.status == "pass" for s in samples))
    return c, tried, ops_tried, ops_all


def _write_report(results, seconds):
    c, tried, ops_tried, ops_all = _figures(results)
    path = _report_path()
    with open(path, "w") as f:
        f.write(f"# coil OpInfo sweep, torch {torch.__version__}, float32, CPU, "
                f"<= {SAMPLES_PER_OP} samples per op, {seconds:.0f} s\n")
        f.write(f"# ops {len(results)}, ops with samples tried {ops_tried}, ops passing every "
                f"sample {ops_all}; samples tried {tried}: pass {c['pass']} "
                f"({100.0 * c['pass'] / max(tried, 1):.1f}%), fallback {c['fallback']}, "
                f"error {c['error']}, wrong {c['wrong']}; skipped {c['skip']}\n")
        for name in sorted(results):
            samples, why = results[name]
            if why:
                f.write(f"{name}: no samples ({why})\n")
                continue
            counts = {k: sum(1 for s in samples if s.status == k) for k in c}
            f.write(f"{name}: " + " ".join(f"{k}={v}" for k, v in counts.items() if v) + "\n")
            for i, s in enumerate(samples):
                if s.status != "pass":
                    f.write(f"    sample {i}: {s.status}: {s.reason}\n")
    return path


def _read_expected():
    """(torch version, {op: set of passing sample indices}) of the allowlist."""
    expected = {}
    if not os.path.exists(EXPECTED):
        return None, expected
    version = None
    for line in open(EXPECTED):
        line = line.strip()
        if line.startswith("# torch "):
            version = line.split()[2]
        if not line or line.startswith("#"):
            continue
        name, passes = line.split()
        expected[name] = set() if passes == "-" else {int(i) for i in passes.split(",")}
    return version, expected


def _write_expected(results, figures_line):
    with open(EXPECTED, "w") as f:
        f.write(f"# torch {torch.__version__}\n")
        f.write("# The OpInfo sweep's allowlist (tests/torch/test_opinfo.py): per op, the samples "
                "(indices among\n# the first ones op_db gives, as the test picks them) that pass "
                "in coil; '-': none. One that\n# no longer passes fails the test. "
                "OPINFO_UPDATE=1 rewrites this file from a run\n"
                f"# (this one: {SAMPLES_PER_OP} samples per op).\n")
        f.write(f"# {figures_line}\n")
        for name in sorted(results):
            samples, _ = results[name]
            idx = [str(i) for i, s in enumerate(samples) if s.status == "pass"]
            f.write(f"{name} {','.join(idx) if idx else '-'}\n")


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    old = os.environ.get("COIL_CACHE_DIR")
    os.environ["COIL_CACHE_DIR"] = str(tmp_path_factory.mktemp("coil-cache-opinfo"))
    yield
    if old is None:
        os.environ.pop("COIL_CACHE_DIR", None)
    else:
        os.environ["COIL_CACHE_DIR"] = old


def test_opinfo_sweep(private_cache):
    start = time.time()
    results = _sweep()
    seconds = time.time() - start
    path = _write_report(results, seconds)
    c, tried, ops_tried, ops_all = _figures(results)
    line = (f"samples tried {tried}, pass {c['pass']} ({100.0 * c['pass'] / max(tried, 1):.1f}%), "
            f"fallback {c['fallback']}, error {c['error']}, wrong {c['wrong']}; "
            f"ops {len(results)}, tried {ops_tried}, passing every sample {ops_all}")
    print(f"\nOpInfo: {line}; report: {path}")
    wrong = [f"{n} sample {i}: {s.reason}" for n, (samples, _) in results.items()
             for i, s in enumerate(samples) if s.status == "wrong"]
    if os.environ.get("OPINFO_UPDATE") == "1" and not os.environ.get("OPINFO_OPS"):
        _write_expected(results, line)
    version, expected = _read_expected()
    regressions = []
    if version == torch.__version__:  # op_db and its samples are those of one torch
        for name, want in expected.items():
            if os.environ.get("OPINFO_OPS") and name not in results:
                continue
            samples, _ = results.get(name, ([], ""))
            lost = [i for i in sorted(want) if i < SAMPLES_PER_OP and
                    (i >= len(samples) or samples[i].status != "pass")]
            if lost:
                why = "; ".join(f"sample {i}: " + (f"{samples[i].status}: {samples[i].reason}"
                                                   if i < len(samples) else "not tried")
                                for i in lost)[:400]
                regressions.append(f"{name}: {why}")
    assert not wrong, "coil gives wrong results:\n" + "\n".join(wrong)
    assert not regressions, "OpInfo regressions (see {}):\n{}".format(path,
                                                                     "\n".join(regressions))

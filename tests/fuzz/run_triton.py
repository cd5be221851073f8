#!/usr/bin/env python3
"""The Triton mode's second stage (tests/fuzz/README.md, "Triton"): runs the case directories
that `coil_fuzz --emit-cuda DIR` wrote on a CUDA GPU and compares every output with the
reference interpreter's.

    python3 tests/fuzz/run_triton.py DIR [--jobs N] [--time-limit S] [--fusion on|off|both]
                                         [--configs random|first|autotune] [--out OUT]
    python3 tests/fuzz/run_triton.py DIR --case case-000000120 [--graph 123]   # one case again

Each case (one graph, or a batch of graphs compiled as one module) is loaded with
python/coil_runtime and called once per module (fusion on, and with --fusion both also off) on
its saved inputs, outputs poisoned with NaN first so that an element no kernel writes differs.
Every output is compared as the CPU mode compares it (element_matches below), and accepted when
it matches the widened reference where the case has one (within_either). Cases run in N worker
processes (default: one per core; Triton's JIT compile is what takes the time). A batch member
whose output differs, and every member of a batch whose call raised or whose worker died, runs
again alone (its own module, emitted beside the batch's): its verdict is that of the run alone;
a wrong output only the batch gives stays the member's failure, and an error only the batch
gives goes to its first member, each as "only in its batch" (the CPU mode's run_batched).

The local check (tests/fuzz/local_check.h, as the CPU mode runs it): a graph run alone whose
fusion-on output differs runs its instrumented module (every node an output, emitted beside
it); if the difference still shows, every node's value is saved to CASE/local-KEY/ and
`coil_fuzz --check-values` (--coil-fuzz; tests/fuzz/check_values.h) checks each node against
the reference on its operands' values. "explained" makes the graph "rounding" (counted and
listed, not a failure); otherwise it stays "wrong" with what the check found.

--configs: which launch config each kernel runs with. `random` (default): one of the configs
the autotuner could pick (Inductor's lists, COIL_TRITON_AUTOTUNE=1), chosen by a hash of the
kernel's source (the same in a batch, alone and on every run), so that one compile per kernel
covers every block size and mask path over many graphs. `first`: the first config of each
list (COIL_TRITON_AUTOTUNE=0). `autotune`: the runtime's autotuning (compiles every config).

Writes OUT (default DIR/triton)/summary.txt, summary.json and failures.tsv (the failures, then
the rounding differences): graph, class, message, graph file, the CPU command (`coil_fuzz
--seed S --index I`) and the command that runs the case again on the GPU. Exit status: 0 when
no graph failed here or in the emit stage (DIR/emit/summary.json), 1 when one did, 2 on a usage
error or without a CUDA device. Graphs the time limit left unrun are counted, not failures.

Imports only the standard library and numpy at module level: torch, triton and coil_runtime are
imported by the workers, so the comparison functions are tested without a GPU
(tests/fuzz/test_run_triton.py).
"""

import argparse
import collections
import inspect
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PYTHON_DIR = os.path.join(ROOT, "python")

# CUDA errors that leave the process's context unusable (as tests/gpu/test_ops.py lists them).
STICKY = ("CUDA error", "illegal memory access", "unspecified launch failure",
          "device-side assert", "misaligned address", "an illegal instruction")
FAILURES = ("wrong", "error", "crash", "timeout")
# A differing output the local check explained: listed in failures.tsv, counted, not a failure.
EXPLAINED = "rounding"

# ---------------------------------------------------------------------------------------------
# Comparison: what coil_fuzz's CPU mode does (src/runtime/compare.cpp compare_tensors and
# tests/fuzz/evaluate.cpp element_matches / within_either).


def element_matches(got, exp, rtol, atol):
    """compare.cpp's rule per element (float64 arrays): NaN matches NaN only, an infinity the
    same infinity only, else |got - exp| <= atol + rtol * |exp|."""
    got = np.asarray(got, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    nan = np.isnan(got) | np.isnan(exp)
    inf = ~nan & (np.isinf(got) | np.isinf(exp))
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(got - exp) <= atol + rtol * np.abs(exp)
    return np.where(nan, np.isnan(got) & np.isnan(exp), np.where(inf, got == exp, close))


def _matches(got, exp, rtol, atol):
    """Integers and bools (int64 arrays) at tolerance 0 compare exactly (compare.cpp compares
    them as doubles, which is the same below 2^53); floats by element_matches."""
    if got.dtype.kind in "iub" and exp.dtype.kind in "iub" and rtol == 0 and atol == 0:
        return got.astype(np.int64) == exp.astype(np.int64)
    return element_matches(got, exp, rtol, atol)


def compare_output(got, exp, wide=None, rtol=0.0, atol=0.0):
    """(ok, message) for one output: `got` against the reference `exp`, or, where the graph has
    f16/bf16 values, within tolerance of either `exp` or the widened reference `wide`, or between
    them (evaluate.cpp's within_either). Arrays as canonical() returns them; shapes must agree."""
    got, exp = np.asarray(got), np.asarray(exp)
    if got.shape != exp.shape or (wide is not None and np.shape(wide) != exp.shape):
        return False, f"shape {list(got.shape)}, expected {list(exp.shape)}"
    if got.dtype.kind != exp.dtype.kind and "f" in (got.dtype.kind, exp.dtype.kind):
        return False, f"values of kind {got.dtype.kind}, expected {exp.dtype.kind}"
    ok = _matches(got, exp, rtol, atol)
    if wide is not None:
        wide = np.asarray(wide)
        ok = ok | _matches(got, wide, rtol, atol)
        if exp.dtype.kind == "f":
            lo, hi = np.minimum(exp, wide), np.maximum(exp, wide)
            with np.errstate(invalid="ignore"):
                ok = ok | (np.isfinite(exp) & np.isfinite(wide) & (got >= lo) & (got <= hi))
        else:
            ok = ok | ((got >= np.minimum(exp, wide)) & (got <= np.maximum(exp, wide)))
    ok = np.asarray(ok, dtype=bool)
    bad = int(ok.size - np.count_nonzero(ok))
    if bad == 0:
        return True, ""
    g, e = got.reshape(-1), exp.reshape(-1)
    flat_bad = np.flatnonzero(~ok.reshape(-1))
    if e.dtype.kind == "f":
        with np.errstate(invalid="ignore", over="ignore"):
            excess = np.abs(g[flat_bad].astype(np.float64) - e[flat_bad]) - (
                atol + rtol * np.abs(e[flat_bad]))
        excess = np.where(np.isnan(excess), np.inf, excess)
        worst = int(flat_bad[int(np.argmax(excess))])
    else:
        worst = int(flat_bad[0])
    msg = (f"{bad} of {ok.size} elements differ; worst at linear index {worst}: got "
           f"{g[worst]!r}, expected {e[worst]!r}")
    if wide is not None:
        msg += f" (widened reference {np.asarray(wide).reshape(-1)[worst]!r})"
    return False, msg + f" (rtol {rtol:g}, atol {atol:g})"


def canonical(a, dtype):
    """A numpy array of coil dtype `dtype` (as .npy gives it: bf16 as raw '|V2') as float64 for
    floating dtypes, int64 for integers and bool: the values compare_output compares."""
    a = np.asarray(a)
    if dtype == "bf16":
        bits = a.reshape(-1).copy().view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(a.shape)
    if dtype in ("f16", "f32", "f64"):
        return a.astype(np.float64)
    return a.astype(np.int64)


_NUMPY_OF = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8,
             "u8": np.uint8, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


def write_canonical_npy(path, dtype, a):
    """Writes a canonical array (canonical()) back as .npy of coil dtype `dtype` (bf16 as
    '|V2'); exact, since the values came from that dtype."""
    a = np.asarray(a)
    if dtype == "bf16":
        bits = (a.astype(np.float32).reshape(-1).view(np.uint32) >> 16).astype(np.uint16)
        a = bits.view(np.dtype("V2")).reshape(a.shape)
    else:
        a = a.astype(_NUMPY_OF[dtype])
    np.save(path, a, allow_pickle=False)


def load_npy(path, dtype):
    return canonical(np.load(path, allow_pickle=False), dtype)


def check_graph(case_dir, graph, outputs):
    """Compares one graph of a case. `outputs` maps an output position to (coil dtype name,
    canonical array) of what the module returned. Returns the problems (empty when it passes)."""
    problems = []
    for o in graph["outputs"]:
        pos = o["position"]
        if pos not in outputs:
            problems.append(f"output {o['name']}: the module returned no output {pos}")
            continue
        dtype, got = outputs[pos]
        if dtype != o["dtype"]:
            problems.append(f"output {o['name']} ({o['op']} {o['dtype']}): got dtype {dtype}")
            continue
        exp = load_npy(os.path.join(case_dir, o["ref"]), o["dtype"])
        wide = load_npy(os.path.join(case_dir, o["wide"]), o["dtype"]) if o.get("wide") else None
        ok, msg = compare_output(got, exp, wide, o["rtol"], o["atol"])
        if not ok:
            problems.append(f"output {o['name']} ({o['op']} {o['dtype']}) differs: {msg}")
    return problems


def read_case(case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# The local check (tests/fuzz/local_check.h): is a differing output a bug, or rounding that the
# graph amplified? The worker runs the graph's instrumented module (every node an output) and
# saves every node's value; `coil_fuzz --check-values` compares each node with the reference
# interpreter applied to the GPU's values of its operands (check_nodes).


def file_stem(key):
    """cuda_case.cpp's cuda_file_stem: "000000120" for key "120", "NAME" for "NAME.coil"."""
    if key.isdigit():
        return key.rjust(9, "0")
    name = key[:-5] if key.endswith(".coil") else key
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in name)


def local_dir_name(key):
    """The directory of a graph's saved node values in its case directory."""
    return "local-" + file_stem(key)


def write_values_json(d, nodes):
    """values.json of check_values.h: `nodes` are {"node", "name", ...} with a value each in
    d/values/NODE.npy."""
    with open(os.path.join(d, "values.json"), "w") as f:
        json.dump({"nodes": [{"node": n["node"], "name": n["name"],
                              "file": f"values/{n['node']}.npy"} for n in nodes]}, f, indent=1)


def check_values(coil_fuzz, d, timeout=300):
    """Runs `coil_fuzz --check-values d` and returns its verdict.json ({"verdict": "explained",
    "node-differs" or "inconclusive", "node", "name", "op", "message"}); "not-run" without a
    coil_fuzz, "inconclusive" when it could not read the values."""
    if not coil_fuzz:
        return {"verdict": "not-run", "message": f"node values saved in {d}; no coil_fuzz to "
                                                 f"check them (--coil-fuzz)"}
    verdict_file = os.path.join(d, "verdict.json")
    if os.path.exists(verdict_file):
        os.remove(verdict_file)
    try:
        p = subprocess.run([coil_fuzz, "--check-values", d], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"verdict": "not-run", "message": f"coil_fuzz --check-values: {_first_line(e)}"}
    if p.returncode not in (0, 1) or not os.path.isfile(verdict_file):
        err = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
        return {"verdict": "inconclusive",
                "message": f"coil_fuzz --check-values failed: {err[-1][:400] if err else ''}"}
    with open(verdict_file) as f:
        return json.load(f)


def local_verdict(wrong, local):
    """(class, message) of a graph whose output differs (`wrong`: what differs) once the local
    check said `local` (run_local_check's dict; None: not run): "rounding" when every node
    matched on its operands' GPU values (not a failure, as on the CPU), else "wrong" with what
    the local check found (the node that differs, "gone when stored", or why it could not
    tell)."""
    if local is None:
        return "wrong", wrong
    v = local.get("verdict")
    where = f" (node values: {local['dir']})" if local.get("dir") else ""
    if v == "explained":
        return EXPLAINED, f"{wrong} | local check: {local.get('message', '')}{where}"
    what = {"node-differs": "", "gone-when-stored": "", "inconclusive": "inconclusive: ",
            "not-run": "not run: "}.get(v, f"{v}: ")
    return "wrong", f"{wrong} | local check: {what}{local.get('message', '')}{where}"


# ---------------------------------------------------------------------------------------------
# Workers (torch, triton and coil_runtime live here)

_TORCH_TO_COIL = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
                  "int32": "i32", "int64": "i64", "int8": "i8", "uint8": "u8", "bool": "bool"}


def _to_numpy(t):
    """(coil dtype name, canonical array) of a returned tensor."""
    import torch
    name = _TORCH_TO_COIL.get(str(t.dtype).replace("torch.", ""), str(t.dtype))
    t = t.detach().cpu()
    if t.dtype.is_floating_point:
        return name, t.to(torch.float64).numpy()
    return name, t.to(torch.int64).numpy()


def _kernel_seed(tuner):
    """The seed of a kernel's random config: a hash of its @triton.jit source with its own name
    left out, so that the kernel gets the same config in its batch, alone, in another case and
    on every run (a config-dependent failure reproduces)."""
    try:
        fn = tuner.fn
        src = getattr(fn, "src", None) or inspect.getsource(getattr(fn, "fn", fn))
    except (OSError, TypeError):
        src = tuner.name
    src = src[src.find("def "):] if "def " in src else src
    return zlib.crc32(src.replace(tuner.name, "KERNEL").encode())


def _run_module(path, inputs, configs, counter, chosen, raw=False):
    """Loads and calls one module; returns {position: (dtype, array)} of its outputs (with
    `raw`, the returned tensors themselves). With --configs random, forces each kernel's config
    first and appends them to `chosen`."""
    import random

    import torch
    from coil_runtime import heuristics, runtime
    counter[0] += 1
    name = f"coil_fuzz_case_{os.getpid()}_{counter[0]}"
    try:
        mod = runtime.load_module(path, name=name)
    except Exception as e:
        raise RuntimeError(f"loading {os.path.basename(path)}: {type(e).__name__}: {e}") from e
    try:
        if configs == "random":
            for t in heuristics.autotuners_of(mod):
                if len(t.configs) > 1:
                    i = random.Random(_kernel_seed(t)).randrange(len(t.configs))
                    t.select(i)
                    chosen.append(f"{t.name}=#{i} {t.forced}")
        outs = mod.call(list(inputs))
        torch.cuda.synchronize()
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        return {i: t if raw else _to_numpy(t) for i, t in enumerate(outs)}
    finally:
        sys.modules.pop(name, None)


def _first_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:600] if text else type(e).__name__


def _run_with_fallback(path, inputs, configs, counter, chosen, raw=False):
    """_run_module, and once more autotuned when a forced random config is out of resources (a
    config the kernel cannot have: the autotuner skips those, so the module runs as the runtime
    would run it). Returns (outputs, whether it fell back); `chosen` says what ran."""
    try:
        return _run_module(path, inputs, configs, counter, chosen, raw), False
    except Exception as e:
        if configs != "random" or "OutOfResources" not in _first_line(e):
            raise
        chosen[:] = [f"autotuned after {_first_line(e)[:200]}"]
        return _run_module(path, inputs, "autotune", counter, [], raw), True


def _outputs_of(g, outs, own):
    """{position: output} of graph `g` from a module's outputs: those of its own module (or
    instrumented module) in order, else those of the case's module by position."""
    if own:
        return {o["position"]: outs[j] for j, o in enumerate(g["outputs"]) if j in outs}
    return {o["position"]: outs[o["position"]] for o in g["outputs"] if o["position"] in outs}


def run_local_check(case_dir, g, inputs, configs, counter, coil_fuzz, fused=None):
    """The local check of graph `g`, whose output differs (the Triton side of local_check.h):
    runs its instrumented module (every node an output) on `inputs`, and when the difference
    still shows there, saves every node's value (save_node_values) and has coil_fuzz
    --check-values check them (check_values). When it is gone there, the fusion-on outputs
    `fused` ({position: tensor}) that differ go to coil_fuzz --check-placement (the rounding
    placements of f16/bf16 intermediates, as the CPU mode tries them). Returns the verdict
    dict local_verdict reads, with "sticky" when the run hit a sticky CUDA error."""
    local = g.get("local")
    if not local:
        return {"verdict": "not-run", "message": "the case has no instrumented module"}
    if not local.get("module"):
        return {"verdict": "inconclusive",
                "message": f"the instrumented module was not generated: {local.get('error')}"}
    chosen = []
    try:
        outs, _ = _run_with_fallback(os.path.join(case_dir, local["module"]), inputs, configs,
                                     counter, chosen, raw=True)
    except Exception as e:
        return {"verdict": "inconclusive", "sticky": any(s in str(e) for s in STICKY),
                "message": f"the graph with every node as an output failed: {_first_line(e)}"}
    still = check_graph(case_dir, g, {p: _to_numpy(t)
                                      for p, t in _outputs_of(g, outs, True).items()})
    if not still:
        gone = {"verdict": "gone-when-stored",
                "message": "with every node as an output the difference is gone"}
        if not fused:
            return gone
        v = check_placement(coil_fuzz, save_fused_outputs(case_dir, g, inputs, fused))
        if v.get("verdict") == "explained":
            return v
        gone["message"] += f" ({v.get('verdict')}: {v.get('message', '')})"
        return gone
    d = save_node_values(case_dir, g, inputs, outs)
    v = check_values(coil_fuzz, d)
    v["dir"] = os.path.relpath(d, case_dir)
    return v


def save_node_values(case_dir, g, inputs, outs):
    """Writes CASE/local-KEY/ for coil_fuzz --check-values (tests/fuzz/check_values.h): the
    graph, every input and every node's value from the instrumented module's outputs `outs`
    (tensors; node k of g["local"]["nodes"] is output graph_outputs + k), and values.json."""
    from coil_runtime import runtime
    local = g["local"]
    d = os.path.join(case_dir, local_dir_name(g["key"]))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "values"))
    shutil.copyfile(os.path.join(case_dir, g["graph"]), os.path.join(d, "graph.coil"))
    first = local["graph_outputs"]
    pairs = list(zip(local["inputs"], inputs))
    pairs += [(n, outs[first + k]) for k, n in enumerate(local["nodes"]) if first + k in outs]
    for n, t in pairs:
        runtime.write_npy(os.path.join(d, "values", f"{n['node']}.npy"), t)
    write_values_json(d, [n for n, _ in pairs])
    return d


def save_fused_outputs(case_dir, g, inputs, fused):
    """Writes CASE/placement-KEY/ for coil_fuzz --check-placement (tests/fuzz/check_values.h):
    the graph, its inputs and those of its fusion-on outputs `fused` ({position: tensor}) that
    differ from the references."""
    from coil_runtime import runtime
    d = os.path.join(case_dir, "placement-" + file_stem(g["key"]))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "values"))
    shutil.copyfile(os.path.join(case_dir, g["graph"]), os.path.join(d, "graph.coil"))
    ins, outs = [], []
    for k, (n, t) in enumerate(zip(g["local"]["inputs"], inputs)):
        runtime.write_npy(os.path.join(d, "values", f"in{k}.npy"), t)
        ins.append({"name": n["name"], "file": f"values/in{k}.npy"})
    for index, o in enumerate(g["outputs"]):
        got = fused.get(o["position"])
        if got is None or not check_graph(case_dir, dict(g, outputs=[o]), {o["position"]: got}):
            continue
        write_canonical_npy(os.path.join(d, "values", f"out{index}.npy"), *got)
        outs.append({"index": index, "file": f"values/out{index}.npy"})
    with open(os.path.join(d, "values.json"), "w") as f:
        json.dump({"inputs": ins, "outputs": outs}, f, indent=1)
    return d


def check_placement(coil_fuzz, d, timeout=300):
    """Runs `coil_fuzz --check-placement d`; its verdict.json ({"verdict": "explained" or
    "no-placement", "message"}), or "inconclusive" when it could not run."""
    verdict_file = os.path.join(d, "verdict.json")
    try:
        p = subprocess.run([coil_fuzz, "--check-placement", d], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"verdict": "inconclusive", "message": f"--check-placement: {_first_line(e)}"}
    if p.returncode not in (0, 1) or not os.path.isfile(verdict_file):
        err = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
        return {"verdict": "inconclusive",
                "message": f"--check-placement failed: {err[-1][:400] if err else ''}"}
    with open(verdict_file) as f:
        v = json.load(f)
    v["dir"] = os.path.relpath(d, os.path.dirname(d))
    return v


def run_task(case_dir, only, fusions, configs, counter, coil_fuzz=None):
    """Runs a case, or one member of it alone (`only`: its key). Returns {"graphs": {key:
    (class, message)}, "sticky": bool, "fallbacks": modules autotuned because a random config
    was out of resources}: class "" passed, "wrong", "error" (the call raised), or "rounding"
    (an output differs and the local check explained it: not a failure). The local check runs
    for a graph run alone (its own module, or a case of one graph), fusion on, with
    `coil_fuzz` to check the node values (None: no local check)."""
    import torch
    from coil_runtime import runtime
    meta = read_case(case_dir)
    graphs = [g for g in meta["graphs"] if only is None or g["key"] == only]
    if not graphs:
        raise ValueError(f"{case_dir}: no graph {only}")
    all_inputs = [runtime.read_npy(os.path.join(case_dir, i["file"])).cuda()
                  for i in meta["inputs"]]
    # A member alone runs its own module (batches only): its inputs, its outputs in order.
    own = only is not None and "modules" in graphs[0]
    inputs = [all_inputs[p] for p in graphs[0]["inputs"]] if own else all_inputs
    alone = own or len(meta["graphs"]) == 1
    verdict = {g["key"]: ("", "") for g in graphs}
    sticky, fallbacks = False, 0
    for fusion in fusions:
        where = f"fusion={fusion}"
        module = graphs[0]["modules"][fusion] if own else meta["modules"][fusion]
        chosen = []
        try:
            outs, fell_back = _run_with_fallback(os.path.join(case_dir, module), inputs, configs,
                                                 counter, chosen)
            fallbacks += fell_back
        except Exception as e:
            cfg = f"; configs: {', '.join(chosen)}" if chosen else ""
            sticky = any(s in str(e) for s in STICKY)
            for k, v in verdict.items():
                if v[0] in ("", EXPLAINED):
                    verdict[k] = ("error", f"{where}: {_first_line(e)}{cfg}")
            break
        for g in graphs:
            # (a difference explained as rounding does not hide a failure of the next module)
            if verdict[g["key"]][0] not in ("", EXPLAINED):
                continue
            problems = check_graph(case_dir, g, _outputs_of(g, outs, own))
            if not problems:
                continue
            cfg = f"; configs: {', '.join(chosen)}" if chosen else ""
            wrong = f"{where}: " + " | ".join(problems[:3]) + cfg
            local = None
            if coil_fuzz is not None and alone and fusion == "on" and not sticky:
                local = run_local_check(case_dir, g, inputs, configs, counter, coil_fuzz,
                                        fused=_outputs_of(g, outs, own))
                sticky = sticky or local.get("sticky", False)
            elif coil_fuzz is not None and alone:
                local = {"verdict": "not-run",
                         "message": "the instrumented module is fusion on, this run fusion off"}
            verdict[g["key"]] = local_verdict(wrong, local)
        del outs
        if sticky:
            break
    del all_inputs, inputs
    torch.cuda.empty_cache()
    return {"graphs": verdict, "sticky": sticky, "fallbacks": fallbacks}


def _worker_main(conn, env, fusions, configs, max_tasks, coil_fuzz=None):
    os.environ.update(env)
    sys.path.insert(0, PYTHON_DIR)
    try:
        import torch
        from coil_runtime import runtime
        if not torch.cuda.is_available():
            conn.send(("fatal", f"no CUDA device (torch {torch.__version__}, CUDA "
                                f"{torch.version.cuda})"))
            return
        torch.cuda.init()
        runtime.set_poison(True)
        device = torch.cuda.get_device_name()
    except Exception as e:  # torch or coil_runtime missing
        conn.send(("fatal", _first_line(e)))
        return
    conn.send(("ready", device))
    counter = [0]
    for n in range(max_tasks):
        task = conn.recv()
        if task is None:
            return
        case_dir, only = task
        try:
            result = run_task(case_dir, only, fusions, configs, counter, coil_fuzz)
        except Exception as e:  # a broken case directory
            result = {"graphs": None, "sticky": any(s in str(e) for s in STICKY),
                      "error": _first_line(e)}
        # A worker ends after a sticky CUDA error, and after max_tasks (its memory): it says so.
        result["retire"] = result["sticky"] or n + 1 == max_tasks
        conn.send(("done", result))
        if result["retire"]:
            return


class Worker:
    def __init__(self, ctx, env, fusions, configs, max_tasks, coil_fuzz=None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, env, fusions, configs,
                                                           max_tasks, coil_fuzz), daemon=True)
        self.proc.start()
        child.close()
        self.task = None
        self.started = None
        self.ready = False

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


# ---------------------------------------------------------------------------------------------
# The parent: a queue of tasks (case, member or None), verdicts per graph


class Run:
    """The tasks still to run (case, member key or None for the whole case) and the verdict of
    each graph. A batch member that failed in its batch runs again alone (queued first); its
    verdict is settled when every such member of the case has."""

    def __init__(self, root, cases, graph=None, metas=None):
        self.root = root
        self.metas = metas or {c: read_case(os.path.join(root, c)) for c in cases}
        self.queue = collections.deque((c, graph) for c in cases)
        self.final = {}  # (case, key) -> (class, message)
        self.batch = {}  # case -> {key: failing verdict in the batch run}
        self.alone = {}  # case -> {key: verdict alone, None when it was not run}
        self.fallbacks = 0  # modules autotuned after a random config was out of resources

    def graphs_of(self, case, only):
        return [g for g in self.metas[case]["graphs"] if only is None or g["key"] == only]

    def finish(self, case, only, verdicts):
        """verdicts: {key: (class, message)} of one task (a crash gives each of its graphs one)."""
        if only is None and len(self.metas[case]["graphs"]) > 1:
            failed = {k: v for k, v in verdicts.items() if v[0]}
            for k, v in verdicts.items():
                if not v[0]:
                    self.final[(case, k)] = v
            if failed:
                self.batch[case], self.alone[case] = failed, {}
                for k in reversed(list(failed)):
                    self.queue.appendleft((case, k))
            return
        if only is not None and only in self.batch.get(case, {}):
            self.alone[case][only] = verdicts[only]
            if len(self.alone[case]) == len(self.batch[case]):
                self._settle(case)
            return
        for k, v in verdicts.items():
            self.final[(case, k)] = v

    def _settle(self, case):
        """As the CPU mode's run_batched: a failure alone is the member's; a wrong output that
        only the batch gives is the member's too ("only in its batch"); an error that stopped the
        whole call is explained by a member failing alone, else it goes to the first member. A
        wrong output that differs alone too, explained there as rounding, is rounding."""
        batch, alone = self.batch.pop(case), self.alone.pop(case)
        call = [k for k, v in batch.items() if v[0] != "wrong"]
        explained = any(alone[k] and alone[k][0] in FAILURES for k in call)
        for k, b in batch.items():
            a = alone[k]
            if a is None:
                v = b if b[0] == "wrong" else ("not-run", f"the time limit (in its batch: {b[1]})")
            elif a[0] in FAILURES:
                v = a
            elif (b[0] == "wrong" and not a[0]) or (b[0] != "wrong" and not explained and
                                                    k == call[0]):
                v = (b[0], "only in its batch: " + b[1])
            else:
                v = a if a[0] else ("", "")
            self.final[(case, k)] = v

    def not_run(self, case, only):
        if only is not None and only in self.batch.get(case, {}):
            self.alone[case][only] = None
            if len(self.alone[case]) == len(self.batch[case]):
                self._settle(case)
            return
        for g in self.graphs_of(case, only):
            self.final.setdefault((case, g["key"]), ("not-run", "the time limit"))


def _env(args, caches):
    env = {"COIL_CACHE_DIR": caches["coil"], "TRITON_CACHE_DIR": caches["triton"],
           "PYTHONUNBUFFERED": "1", "COIL_TRITON_AUTOTUNE": "0" if args.configs == "first" else "1",
           "PYTHONPATH": PYTHON_DIR + (os.pathsep + os.environ["PYTHONPATH"]
                                       if os.environ.get("PYTHONPATH") else "")}
    return env


def run_all(run, args, caches):
    """Dispatches tasks to args.jobs workers until the queue is empty or the time limit."""
    ctx = multiprocessing.get_context("spawn")
    fusions = ["on", "off"] if args.fusion == "both" else [args.fusion]
    env = _env(args, caches)
    workers = []
    t0 = time.time()
    deadline = t0 + args.time_limit if args.time_limit else None
    hard_deadline = deadline + args.grace if deadline else None
    fatal = None
    unready_deaths = 0
    last_progress = t0
    try:
        while True:
            now = time.time()
            accepting = deadline is None or now < deadline
            if not accepting:
                while run.queue:
                    run.not_run(*run.queue.popleft())
            busy = [w for w in workers if w.task is not None]
            if not run.queue and not busy:
                break
            want = min(args.jobs, len(busy) + len(run.queue))
            while len(workers) < want and fatal is None:
                workers.append(Worker(ctx, env, fusions, args.configs, args.max_tasks_per_worker,
                                      args.coil_fuzz))
            for w in workers:
                if w.ready and w.task is None and run.queue and accepting:
                    w.task = run.queue.popleft()
                    w.started = time.time()
                    w.conn.send((os.path.join(run.root, w.task[0]), w.task[1]))
            conns = [w.conn for w in workers]
            ready = multiprocessing.connection.wait(conns, timeout=1.0) if conns else []
            for w in list(workers):
                msg = None
                if w.conn in ready:
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = ("died", None)
                elif w.task is not None and time.time() - w.started > args.case_timeout:
                    msg = ("timeout", None)
                elif w.task is not None and hard_deadline and time.time() > hard_deadline:
                    msg = ("deadline", None)
                elif not w.proc.is_alive() and not w.conn.poll():
                    msg = ("died", None)
                if msg is None:
                    continue
                kind, payload = msg
                if kind == "ready":
                    w.ready = True
                    args.device_name = payload
                    continue
                if kind == "fatal":
                    fatal = payload
                    w.kill()
                    workers.remove(w)
                    continue
                if kind == "done":
                    verdicts = payload["graphs"]
                    if verdicts is None:  # the case directory could not be read
                        verdicts = {g["key"]: ("error", payload["error"])
                                    for g in run.graphs_of(*w.task)}
                    run.finish(*w.task, verdicts)
                    run.fallbacks += payload.get("fallbacks", 0)
                    w.task = None
                    if payload["retire"]:
                        w.kill()
                        workers.remove(w)
                    continue
                # the worker is gone (or must go): its task, if any, gets a verdict
                task = w.task
                w.kill()
                workers.remove(w)
                if not w.ready:
                    unready_deaths += 1
                    if unready_deaths > 2 * args.jobs:
                        fatal = f"{unready_deaths} workers died while starting (torch import?)"
                if task is None:
                    continue
                if kind == "deadline":
                    run.not_run(*task)
                    continue
                if kind == "timeout":
                    cls, what = "timeout", f"no result within {args.case_timeout} s"
                else:
                    cls, what = "crash", f"the worker died (exit code {w.proc.exitcode})"
                run.finish(*task, {g["key"]: (cls, what) for g in run.graphs_of(*task)})
            if fatal is not None and not any(w.task for w in workers):
                break
            if not args.quiet and time.time() - last_progress > 30:
                last_progress = time.time()
                done = sum(1 for v in run.final.values() if v[0] != "not-run")
                print(f"run_triton: {done} graphs done, {len(run.queue)} tasks queued, "
                      f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:  # also on SIGTERM (main turns it into SystemExit): no worker outlives the run
        for w in workers:
            if w.task is None:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        for w in workers:
            w.proc.join(10 if w.task is None else 0)
            w.kill()
    return fatal, time.time() - t0


# ---------------------------------------------------------------------------------------------
# Reports


def _tsv(text):
    return " ".join(str(text).replace("\t", " ").split())


def write_reports(run, root, out, args, seconds, emit):
    counts = collections.Counter(v[0] or "passed" for v in run.final.values())
    failures = [(c, k, v) for (c, k), v in sorted(run.final.items()) if v[0] in FAILURES]
    # Explained differences are listed too (as the CPU mode lists them), after the failures.
    listed = failures + [(c, k, v) for (c, k), v in sorted(run.final.items())
                         if v[0] == EXPLAINED]
    script = os.path.relpath(os.path.abspath(__file__), os.getcwd())
    opts = f"--fusion {args.fusion} --configs {args.configs}"
    with open(os.path.join(out, "failures.tsv"), "w") as f:
        f.write("graph\tclass\tmessage\tgraph file\tcpu command\tgpu command\n")
        for case, key, (cls, msg) in listed:
            meta = run.metas[case]
            g = next(g for g in meta["graphs"] if g["key"] == key)
            rerun = f"python3 {script} {root} --case {case}"
            if len(meta["graphs"]) > 1:
                rerun += f" --graph {key}"
            f.write("\t".join([key, cls, _tsv(msg), os.path.join(root, case, g["graph"]),
                               g["origin"], f"{rerun} {opts}"]) + "\n")
    # Cases run in index order: the next run of the same seed can start at the first left over.
    left = [int(k) for (_, k), v in run.final.items() if v[0] == "not-run" and k.isdigit()]
    first_not_run = min(left) if left else None
    emit_counts = emit.get("counts", {})
    emit_failures = len(emit.get("failures", []))
    summary = {
        "dir": root, "cases": len(run.metas), "graphs": len(run.final),
        "passed": counts.get("passed", 0), "wrong": counts.get("wrong", 0),
        "rounding": counts.get(EXPLAINED, 0),
        "errors": sum(counts.get(c, 0) for c in ("error", "crash", "timeout")),
        "crash": counts.get("crash", 0), "timeout": counts.get("timeout", 0),
        "not_run": counts.get("not-run", 0), "first_not_run": first_not_run,
        "unsupported": emit_counts.get("unsupported", 0),
        "rejected": emit_counts.get("rejected", 0), "emit_failures": emit_failures,
        "config_fallbacks": run.fallbacks, "seconds": round(seconds, 1), "jobs": args.jobs,
        "fusion": args.fusion, "configs": args.configs, "device": args.device_name,
    }
    lines = [f"run_triton: {summary['cases']} cases, {summary['graphs']} graphs in "
             f"{seconds:.1f} s ({args.jobs} workers, fusion {args.fusion}, configs "
             f"{args.configs}) on {args.device_name}"]
    for k in ("passed", "wrong", "rounding", "errors", "not_run", "unsupported", "rejected",
              "emit_failures"):
        lines.append(f"  {k:<14} {summary[k]}")
    if summary["rounding"]:
        lines.append("    (rounding: an output differs, and the local check found every node "
                     "right on its operands' GPU values: not a failure)")
    if run.fallbacks:
        lines.append(f"    ({run.fallbacks} module runs autotuned: a random config was out of "
                     f"resources)")
    if first_not_run is not None:
        lines.append(f"    (the first graph not run: {first_not_run}; go on from there with "
                     f"coil_fuzz --start {first_not_run})")
    if summary["errors"]:
        lines.append(f"    (errors: {counts.get('error', 0)} raised, {summary['crash']} crashed, "
                     f"{summary['timeout']} timed out)")
    for case, key, (cls, msg) in failures[:40]:
        lines.append(f"  FAIL {case} graph {key}: {cls}: {msg[:300]}")
    lines.append(f"  failures: {len(failures)} ({os.path.join(out, 'failures.tsv')})" +
                 (f"; emit-stage failures: {emit_failures} ({root}/emit/failures.tsv)"
                  if emit_failures else ""))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(text, end="")
    return len(failures) + emit_failures


def resolve_coil_fuzz(args):
    """The coil_fuzz for the local check: None with --no-local-check, "" when there is none (the
    node values are saved all the same)."""
    if args.no_local_check:
        return None
    path = args.coil_fuzz or os.path.join(ROOT, "build", "bin", "coil_fuzz")
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return os.path.abspath(path)
    if args.coil_fuzz:
        print(f"run_triton: warning: {args.coil_fuzz} is not an executable; node values are saved "
              f"but not checked", file=sys.stderr)
    return ""


def main(argv=None):
    p = argparse.ArgumentParser(prog="run_triton.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="what coil_fuzz --emit-cuda wrote")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument("--time-limit", type=float, default=0, metavar="S",
                   help="start no task after S seconds (0: none); running ones get --grace more")
    p.add_argument("--grace", type=float, default=40, metavar="S",
                   help="after the time limit, seconds for running tasks before they are killed")
    p.add_argument("--case-timeout", type=float, default=300, metavar="S",
                   help="a task still running after S seconds is a timeout")
    p.add_argument("--fusion", choices=("on", "off", "both"), default="on")
    p.add_argument("--configs", choices=("random", "first", "autotune"), default="random")
    p.add_argument("--case", action="append", default=None, metavar="NAME",
                   help="only this case directory (repeatable)")
    p.add_argument("--graph", default=None, metavar="KEY",
                   help="with one --case: only this member, run alone (its own module)")
    p.add_argument("--out", default=None, help="reports (default DIR/triton)")
    p.add_argument("--max-tasks-per-worker", type=int, default=200,
                   help="a worker is replaced after this many tasks (bounds its memory)")
    p.add_argument("--coil-fuzz", default=None, metavar="PATH",
                   help="the coil_fuzz that checks a differing graph's node values "
                        "(--check-values; default: build/bin/coil_fuzz when it exists); without "
                        "one the values are saved and the output stays wrong")
    p.add_argument("--no-local-check", action="store_true",
                   help="no local check: a differing output is wrong")
    p.add_argument("--keep-caches", action="store_true",
                   help="keep the fresh Triton and coil caches (printed) instead of deleting them")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    root = os.path.abspath(args.dir)
    if args.graph is not None and (not args.case or len(args.case) != 1):
        print("error: --graph needs exactly one --case", file=sys.stderr)
        return 2
    cases = args.case or sorted(d for d in os.listdir(root) if d.startswith("case-") and
                                os.path.isfile(os.path.join(root, d, "case.json")))
    missing = [c for c in cases if not os.path.isfile(os.path.join(root, c, "case.json"))]
    if missing or not cases:
        print(f"error: no case directories in {root}" if not cases else
              f"error: not a case: {missing[0]}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or os.path.join(root, "triton"))
    os.makedirs(out, exist_ok=True)
    emit = {}
    emit_summary = os.path.join(root, "emit", "summary.json")
    if os.path.isfile(emit_summary) and not args.case:
        with open(emit_summary) as f:
            emit = json.load(f)
    args.jobs = max(1, args.jobs)
    args.device_name = "?"
    args.coil_fuzz = resolve_coil_fuzz(args)
    run = Run(root, cases, args.graph)
    caches = {"coil": tempfile.mkdtemp(prefix="coil-fuzz-triton-coil-"),
              "triton": tempfile.mkdtemp(prefix="coil-fuzz-triton-cache-")}
    try:
        fatal, seconds = run_all(run, args, caches)
    finally:
        if args.keep_caches:
            print(f"run_triton: caches kept: {caches}", file=sys.stderr)
        else:
            for d in caches.values():
                shutil.rmtree(d, ignore_errors=True)
    if fatal is not None:
        print(f"error: {fatal}", file=sys.stderr)
        return 2
    failed = write_reports(run, root, out, args, seconds, emit)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

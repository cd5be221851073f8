"""Writes the attention GPU cases (tests/gpu/test_attention.py runs them), on the build machine.

Each group is one .coil graph of several attention nodes, each over its own q, k, v (and mask)
inputs, compiled once with `coil compile --device cuda` into tests/gpu/generated/attn_<group>/
(module.py, graph_in.coil, and attention.json: per output the attention's parameters; not
case.json, which tests/gpu/test_ops.py runs). One module per group lets the runtime compile the
group's kernels in parallel. Inputs and the float64 reference are
made on the GPU (test_attention.py), so nothing else is stored.

Groups (the issue's grid, as tests/correctness/attention_test.cpp walks it on the CPU):
  grid_f32_d{16,64,80,128}  all 25 (Tq, Tk) of {1, 7, 64, 127, 1000}; causal on every other
                            pair, grouped-query (4 query heads on 2 or 1 kv heads) on every third
  grid_bf16_d{64,128}       the same pairs in bf16, causal on the other half
  grid_f16_d64              a few pairs in f16
  masks                     bool and additive masks of broadcast shapes, with and without causal,
                            rows with every key masked (NaN), Tk = 0 (zeros), Dv != D, odd D
  edges                     causal with Tq > Tk (NaN rows), D = 256 and D = 300 (written out)
  decode                    decoding shapes (Tq 1 to 5 against 7 to 32768 keys, GQA, bf16,
                            f16 and f32, causal, masks): the split-K path (a partial and a combine
                            kernel: triton_attention_decode.h); Tk = 1000 stays one kernel. Most
                            are grouped-query shapes whose kv head's query heads are packed into
                            one tile's rows (G 2 to 8, a mask per head, B = 8 split since packed)
  backward                  training steps (attention, attention_lse, attention_grad wrt q, k
                            and v: the backward templates), checked against torch autograd in
                            float64: f32/bf16/f16, causal with Tq < Tk and Tq > Tk, GQA 2:1 and
                            4:1, odd lengths, Dv != D, masks with rows masked whole, Tk = 0,
                            Tq = 0, D = 256, D = 300 (written out)

    python3 tests/gpu/prepare_attention.py [--coil build/bin/coil] [--only GROUP ...]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")
LENGTHS = (1, 7, 64, 127, 1000)


def case(tq, tk, d, dtype="f32", causal=False, b=2, h=4, hkv=None, dv=None, mask=None,
         scale=None):
    """One attention node's parameters. mask: None or (dtype 'bool'/'f32', shape, fill) with
    fill 'random' or 'rows_masked' (bool: every key of some rows false)."""
    return {"tq": tq, "tk": tk, "d": d, "dv": dv or d, "dtype": dtype, "causal": causal,
            "b": b, "h": h, "hkv": hkv or h, "mask": mask, "scale": scale}


def groups():
    out = {}
    for d in (16, 64, 80, 128):
        cases = []
        for i, (tq, tk) in enumerate((a, c) for a in LENGTHS for c in LENGTHS):
            hkv = (2, 1)[i // 3 % 2] if i % 3 == 0 else None
            cases.append(case(tq, tk, d, "f32", causal=i % 2 == 1, hkv=hkv))
        out[f"grid_f32_d{d}"] = cases
    for d in (64, 128):
        cases = []
        for i, (tq, tk) in enumerate((a, c) for a in LENGTHS for c in LENGTHS):
            hkv = 1 if i % 3 == 1 else None
            cases.append(case(tq, tk, d, "bf16", causal=i % 2 == 0, hkv=hkv))
        out[f"grid_bf16_d{d}"] = cases
    out["grid_f16_d64"] = [case(tq, tk, 64, "f16", causal=c)
                           for tq, tk, c in ((64, 64, True), (127, 1000, False), (1000, 127, True),
                                             (7, 1, False))]
    out["masks"] = [
        case(64, 127, 64, mask=("bool", [64, 127], "random")),
        case(127, 127, 64, causal=True, mask=("f32", [2, 1, 1, 127], "random")),
        case(100, 300, 80, dv=48, hkv=2, mask=("f32", [2, 4, 100, 300], "random")),
        case(127, 64, 128, mask=("bool", [2, 1, 127, 64], "rows_masked")),
        case(64, 1000, 64, "bf16", causal=True, mask=("bool", [1, 4, 64, 1], "random")),
        case(1000, 1000, 64, "bf16", mask=("f32", [1000, 1000], "random")),
        case(7, 0, 64, mask=("f32", [7, 0], "random")),
        case(33, 0, 32, "bf16"),
        case(5, 40, 24, dv=40, scale=0.3),
    ]
    # Few programs (B x H x cdiv(Tq, 16) under 132) and long keys: split into chunks of keys.
    out["decode"] = [
        case(1, 1000, 128, "bf16", b=1, h=32, hkv=8),      # below 1024 keys: one kernel
        case(1, 1024, 128, "bf16", b=1, h=32, hkv=8),      # 4 chunks of 256 keys
        case(1, 4097, 128, "bf16", b=1, h=32, hkv=8, causal=True),
        case(4, 8192, 128, "bf16", b=2, h=32, hkv=8, causal=True),
        case(1, 32768, 128, "bf16", b=1, h=32, hkv=8),
        case(4, 16384, 64, "f16", b=1, h=16, hkv=4, causal=True,
             mask=("bool", [1, 1, 4, 16384], "random")),
        case(1, 32768, 64, "f32", b=1, h=8, hkv=1),
        case(4, 5000, 80, "f32", b=1, h=4, hkv=2, causal=True,
             mask=("f32", [1, 4, 4, 5000], "random")),
        case(16, 2000, 128, "bf16", b=1, h=8, causal=True,
             mask=("bool", [1, 1, 16, 2000], "rows_masked")),
        # Grouped-query packing (a program per kv head, Tq * G rows in its tile): G = 8 with 40
        # rows and a mask per head; B = 8 (64 packed programs: split into 4 chunks); a short
        # unsplit packed forward with a mask broadcast over heads.
        case(5, 4097, 128, "bf16", b=1, h=32, hkv=4, causal=True,
             mask=("bool", [1, 32, 5, 4097], "rows_masked")),
        case(1, 16384, 128, "bf16", b=8, h=32, hkv=8),
        case(3, 7, 64, "f32", b=2, h=8, hkv=4, causal=True, mask=("f32", [2, 1, 3, 7], "random")),
    ]
    out["backward"] = [
        case(64, 64, 64, causal=True),
        case(127, 1000, 64, causal=True, hkv=2),
        case(1000, 127, 80, dv=48, causal=True, hkv=1),  # 873 rows see no key
        case(1000, 1000, 128, "bf16", causal=True),
        case(1000, 1000, 64, "bf16", hkv=1, mask=("bool", [2, 1, 1000, 1000], "rows_masked")),
        case(7, 1000, 128, "f16", mask=("f32", [2, 1, 1, 1000], "random")),
        case(100, 300, 80, "bf16", causal=True, h=8, hkv=2, dv=64, scale=0.125),
        case(33, 0, 16),
        case(0, 33, 16, hkv=2),
        case(200, 200, 256, "bf16", causal=True),
        case(64, 64, 300),                                # D > 256: written out
        case(1, 1, 1, b=1, h=1),
    ]
    out["edges"] = [
        case(1000, 7, 64, causal=True),            # the first 993 queries see no key: NaN
        case(127, 64, 64, "bf16", causal=True),    # 63 NaN rows, a partial first block
        case(1, 1000, 128, "bf16", causal=True, hkv=1),  # one decoding step
        case(200, 200, 256, "bf16", causal=True),  # the template's largest head dim
        case(64, 64, 300, causal=False),           # D > 256: written out (matmul, softmax)
        case(1, 1, 1, b=1, h=1),
    ]
    return out


def coil_type(dtype, shape):
    return f"{dtype}[{', '.join(str(s) for s in shape)}]"


def graph_text(cases):
    lines = ["# tests/gpu/prepare_attention.py: one attention per output"]
    body = []
    for i, c in enumerate(cases):
        lines.append(f"input q{i}: {coil_type(c['dtype'], [c['b'], c['h'], c['tq'], c['d']])}")
        lines.append(f"input k{i}: {coil_type(c['dtype'], [c['b'], c['hkv'], c['tk'], c['d']])}")
        lines.append(f"input v{i}: {coil_type(c['dtype'], [c['b'], c['hkv'], c['tk'], c['dv']])}")
        args = [f"q{i}", f"k{i}", f"v{i}"]
        if c["mask"]:
            lines.append(f"input m{i}: {coil_type(c['mask'][0], c['mask'][1])}")
            args.append(f"m{i}")
        attrs = [f"causal={'true' if c['causal'] else 'false'}"]
        if c["scale"] is not None:
            attrs.append(f"scale={c['scale']}")
        body.append(f"y{i} = attention({', '.join(args)}) {{{', '.join(attrs)}}}")
    lines += body + [f"output y{i}" for i in range(len(cases))]
    return "\n".join(lines) + "\n"


def backward_graph_text(cases):
    """A training step per case: y = attention, l = attention_lse, and attention_grad wrt q, k
    and v over a gradient input dy; outputs y, l, dq, dk, dv of each case in order."""
    lines = ["# tests/gpu/prepare_attention.py: attention's forward and backward per case"]
    body, outputs = [], []
    for i, c in enumerate(cases):
        lines.append(f"input q{i}: {coil_type(c['dtype'], [c['b'], c['h'], c['tq'], c['d']])}")
        lines.append(f"input k{i}: {coil_type(c['dtype'], [c['b'], c['hkv'], c['tk'], c['d']])}")
        lines.append(f"input v{i}: {coil_type(c['dtype'], [c['b'], c['hkv'], c['tk'], c['dv']])}")
        mask = ""
        if c["mask"]:
            lines.append(f"input m{i}: {coil_type(c['mask'][0], c['mask'][1])}")
            mask = f", m{i}"
        lines.append(f"input dy{i}: {coil_type(c['dtype'], [c['b'], c['h'], c['tq'], c['dv']])}")
        attrs = [f"causal={'true' if c['causal'] else 'false'}"]
        if c["scale"] is not None:
            attrs.append(f"scale={c['scale']}")
        a = ", ".join(attrs)
        body.append(f"y{i} = attention(q{i}, k{i}, v{i}{mask}) {{{a}}}")
        body.append(f"l{i} = attention_lse(q{i}, k{i}{mask}) {{{a}}}")
        for wrt in "qkv":
            body.append(f"d{wrt}{i} = attention_grad(q{i}, k{i}, v{i}, y{i}, dy{i}, l{i}{mask}) "
                        f"{{wrt=\"{wrt}\", {a}}}")
        outputs += [f"output {n}{i}" for n in ("y", "l", "dq", "dk", "dv")]
    return "\n".join(lines + body + outputs) + "\n"


BACKWARD_GROUPS = ("backward",)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    p.add_argument("--only", nargs="*")
    a = p.parse_args()
    failed = []
    for name, cases in groups().items():
        if a.only and name not in a.only:
            continue
        out_dir = os.path.join(GENERATED, "attn_" + name)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        src = os.path.join(out_dir, "graph_in.coil")
        backward = name in BACKWARD_GROUPS
        with open(src, "w") as f:
            f.write(backward_graph_text(cases) if backward else graph_text(cases))
        r = subprocess.run([a.coil, "compile", src, "--device", "cuda", "-o", out_dir],
                           capture_output=True, text=True, cwd=ROOT)
        status = "ok" if r.returncode == 0 else "compile-failed"
        with open(os.path.join(out_dir, "attention.json"), "w") as f:
            json.dump({"group": name, "status": status, "cases": cases,
                       "kind": "backward" if backward else "forward",
                       "log": (r.stdout + r.stderr)[-2000:]}, f, indent=1)
        kernels = sum(1 for line in r.stdout.splitlines() if "triton_tem_fused_attention" in line)
        print(f"  attn_{name:<18} {status:<15} {len(cases):3d} attentions, "
              f"{kernels} flash kernels")
        if status != "ok":
            failed.append(name)
            print("    " + (r.stdout + r.stderr)[-1500:].replace("\n", "\n    "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

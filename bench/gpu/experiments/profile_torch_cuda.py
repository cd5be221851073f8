"""Where the time of a torch.compile step goes, coil against Inductor, on CUDA (issue 18).

bench/gpu/torch_backend.py measures the step; this script runs one of its models under
torch.profiler for both backends and prints, per backend, the CUDA kernels (time per step,
calls per step) and the host time per step, then copies each backend's generated code to
$OUT/code-<backend>/ so the two can be read side by side.

    python3 bench/gpu/experiments/profile_torch_cuda.py --model mlp --mode infer --batch 256

It re-runs itself once per backend in a child process with the device bundle's library
(the same environment as torch_backend.py's measurements).
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch_backend as tb  # noqa: E402


def profile(model_name, mode, batch, backend, steps):
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile
    from coil_runtime import runtime
    runtime.fp32_precision("highest").__enter__()
    if backend == "coil":
        import coil.torch  # noqa: F401
    make, make_input = tb._models()[model_name]
    model_c = torch.compile(tb._build_model(make, "cuda", mode), backend=backend)
    x = make_input(batch).cuda()

    def step():
        return tb._step(model_c, x, mode)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    host_s = time.perf_counter() - t0  # launch-bound steps show here: host time ~ step time
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - t0
    if os.environ.get("PROFILE_HOST"):  # where the host time goes: cProfile of the steps
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        pr.disable()
        print(f"== {backend}: host profile of {steps} steps (cProfile, by own time)")
        pstats.Stats(pr).sort_stats("tottime").print_stats(30)
        pstats.Stats(pr).sort_stats("cumulative").print_stats(40)
        return
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f"== {backend}: {wall_s / steps * 1e3:.3f} ms a step, host {host_s / steps * 1e3:.3f} "
          f"ms a step (before the synchronize)")
    rows = []
    for e in prof.key_averages():
        cuda_us = getattr(e, "device_time_total", None)
        if cuda_us is None:
            cuda_us = e.cuda_time_total
        if cuda_us > 0 and e.device_type.name == "CUDA":
            rows.append((cuda_us / steps, e.count / steps, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"   GPU kernels: {total:.1f} us a step in {sum(r[1] for r in rows):.0f} launches")
    for us, n, key in rows[:25]:
        print(f"   {us:9.1f} us {n:5.1f}x  {key[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--mode", default="infer")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backends", nargs="*", default=["coil", "inductor"])
    ap.add_argument("--host", action="store_true", help="cProfile the host side instead")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        profile(a.model, a.mode, a.batch, a.child, a.steps)
        return
    env = tb._bundle_env()
    if a.host:
        env["PROFILE_HOST"] = "1"
    out = os.environ.get("OUT", ".")
    for backend in a.backends:
        caches = tempfile.mkdtemp(prefix="coil-profile-")
        env_b = dict(env, COIL_CACHE_DIR=os.path.join(caches, "coil"),
                     TRITON_CACHE_DIR=os.path.join(caches, "triton"),
                     TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"))
        args = [sys.executable, os.path.abspath(__file__), "--model", a.model, "--mode", a.mode,
                "--batch", str(a.batch), "--steps", str(a.steps), "--child", backend]
        r = subprocess.run(args, env=env_b, capture_output=True, text=True, timeout=240)
        print(r.stdout, end="")
        if r.returncode:
            print("\n".join(r.stderr.strip().splitlines()[-5:]))
        dest = os.path.join(out, f"code-{a.model}-{a.mode}-{backend}")
        os.makedirs(dest, exist_ok=True)
        pattern = "coil/torch_cuda/*.py" if backend == "coil" else "inductor/**/*.py"
        for f in glob.glob(os.path.join(caches, pattern), recursive=True):
            shutil.copy(f, dest)
        print(json.dumps({"backend": backend, "code": dest}))


if __name__ == "__main__":
    main()

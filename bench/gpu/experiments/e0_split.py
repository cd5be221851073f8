"""Experiment: how should a column sum (sum over dim 0 of [65536, 1024] f32, workload e0) be
split on this GPU? Times hand-written Triton variants next to torch.sum and torch.compile.

    python3 bench/gpu/experiments/e0_split.py        (on a CUDA machine)

Variants: two-stage (stage 1: a [CHUNK rows x XBLOCK cols] block per program, accumulating an
[RBLOCK, XBLOCK] tile; stage 2: sum of the S partial rows), and one-stage with atomic_add into a
zeroed output. Prints one line per variant, fastest last.
"""
import itertools
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def stage1(x_ptr, part_ptr, N: tl.constexpr, CHUNK: tl.constexpr, XBLOCK: tl.constexpr,
           RBLOCK: tl.constexpr, ATOMIC: tl.constexpr):
    pid_x = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_x * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    rows = tl.arange(0, RBLOCK)[:, None]
    acc = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    base = pid_s * CHUNK
    for r in range(0, CHUNK, RBLOCK):
        acc += tl.load(x_ptr + (base + r + rows) * N + cols, eviction_policy='evict_first')
    s = tl.sum(acc, 0)
    c = pid_x * XBLOCK + tl.arange(0, XBLOCK)
    if ATOMIC:
        tl.atomic_add(part_ptr + c, s, sem='relaxed')
    else:
        tl.store(part_ptr + pid_s * N + c, s)


@triton.jit
def last_block(x_ptr, part_ptr, count_ptr, out_ptr, N: tl.constexpr, S: tl.constexpr,
               CHUNK: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
               SBLOCK: tl.constexpr):
    """One kernel, deterministic: each program stores its partial column sums; the last of the
    S programs of a column block (an atomic ticket) sums the S partials in order."""
    pid_x = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_x * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    rows = tl.arange(0, RBLOCK)[:, None]
    acc = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    base = pid_s * CHUNK
    for r in range(0, CHUNK, RBLOCK):
        acc += tl.load(x_ptr + (base + r + rows) * N + cols, eviction_policy='evict_first')
    c = pid_x * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(part_ptr + pid_s * N + c, tl.sum(acc, 0))
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + pid_x, 1, sem='acq_rel')
    if ticket == S - 1:
        acc2 = tl.zeros([SBLOCK, XBLOCK], tl.float32)
        for s in range(0, S, SBLOCK):
            acc2 += tl.load(part_ptr + (s + tl.arange(0, SBLOCK)[:, None]) * N + cols,
                            cache_modifier='.cg')
        tl.store(out_ptr + c, tl.sum(acc2, 0))
        tl.atomic_xchg(count_ptr + pid_x, 0)


@triton.jit
def stage1_masked(x_ptr, part_ptr, M, N: tl.constexpr, CHUNK: tl.constexpr,
                  XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """Any number of chunks (the last one partial, rows masked), loop unrolled UNROLL times."""
    pid_x = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_x * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    rows = tl.arange(0, RBLOCK)[:, None]
    acc = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    base = pid_s * CHUNK
    for r in tl.range(0, CHUNK, RBLOCK, loop_unroll_factor=UNROLL):
        row = base + r + rows
        acc += tl.load(x_ptr + row * N + cols, mask=(row < M) & (r + rows < CHUNK), other=0.0,
                       eviction_policy='evict_first')
    c = pid_x * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(part_ptr + pid_s * N + c, tl.sum(acc, 0))


@triton.jit
def stage2_masked(part_ptr, out_ptr, S, N: tl.constexpr, XBLOCK: tl.constexpr,
                  SBLOCK: tl.constexpr):
    cols = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    acc = tl.zeros([SBLOCK, XBLOCK], tl.float32)
    for s in range(0, S, SBLOCK):
        srow = s + tl.arange(0, SBLOCK)[:, None]
        acc += tl.load(part_ptr + srow * N + cols, mask=srow < S, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK), tl.sum(acc, 0))


@triton.jit
def row_sum(x_ptr, out_ptr, N: tl.constexpr):
    """e1's pattern (one row per program), to see the read floor in the same process."""
    row = tl.program_id(0)
    v = tl.load(x_ptr + row * N + tl.arange(0, N), eviction_policy='evict_first')
    tl.store(out_ptr + row, tl.sum(v, 0))


@triton.jit
def stage1_interleaved(x_ptr, part_ptr, N: tl.constexpr, S: tl.constexpr, CHUNK: tl.constexpr,
                       XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """Chunk s holds rows s, s+S, s+2S, ...: at any moment all programs read a narrow window of
    rows (as a row reduction does), instead of S streams spread over the whole input."""
    pid_x = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_x * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    rows = tl.arange(0, RBLOCK)[:, None]
    acc = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    for r in range(0, CHUNK, RBLOCK):
        acc += tl.load(x_ptr + ((r + rows) * S + pid_s) * N + cols, eviction_policy='evict_first')
    c = pid_x * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(part_ptr + pid_s * N + c, tl.sum(acc, 0))


@triton.jit
def stage2(part_ptr, out_ptr, S: tl.constexpr, N: tl.constexpr, XBLOCK: tl.constexpr,
           SBLOCK: tl.constexpr):
    cols = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    acc = tl.zeros([SBLOCK, XBLOCK], tl.float32)
    for s in range(0, S, SBLOCK):
        acc += tl.load(part_ptr + (s + tl.arange(0, SBLOCK)[:, None]) * N + cols)
    tl.store(out_ptr + tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK), tl.sum(acc, 0))


def sm_multiples(x, out, ref, bench, results, M, N):
    """Grids of a multiple of the SM count, masked chunks, unrolled loops; and the e1 floor."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows_out = torch.empty(M, device='cuda')
    compiled_e1 = torch.compile(lambda t: t.sum(-1))
    for _ in range(2):
        ms = do_bench(lambda: row_sum[(M,)](x, rows_out, N, num_warps=1), warmup=25, rep=100)
        print(f"{ms * 1e3:8.2f} us  row_sum (e1 pattern, 1 warp/row)")
        ms = do_bench(lambda: compiled_e1(x), warmup=25, rep=100)
        print(f"{ms * 1e3:8.2f} us  torch.compile sum(-1)")
    for XB, k, RB, W, U in itertools.product([64, 128, 256], [4, 8, 16], [8, 16], [4, 8],
                                             [1, 2, 4]):
        S = sms * k * XB // N
        if S < 2 or XB * RB > 4096:
            continue
        CH = -(-M // S)
        part = torch.empty(S, N, device='cuda')

        def two(S=S, XB=XB, RB=RB, W=W, CH=CH, part=part, U=U):
            stage1_masked[(N // XB, S)](x, part, M, N, CH, XB, RB, U, num_warps=W)
            stage2_masked[(N // 64,)](part, out, S, N, 64, 64, num_warps=4)
        bench(f"sm-multiple S={S} ({(N // XB) * S} programs) XBLOCK={XB} RBLOCK={RB} "
              f"warps={W} unroll={U}", two)
    results.sort(reverse=True)
    print("\nfastest 12:")
    for ms, name in results[-12:]:
        print(f"{ms * 1e3:8.2f} us  {256 * 2**20 / (ms * 1e-3) / 1e9:7.0f} GB/s  {name}")
    return 0


def main():
    M, N = 65536, 1024
    x = torch.randn(M, N, device='cuda')
    ref = x.double().sum(0).float()
    out = torch.empty(N, device='cuda')
    results = []

    def bench(name, fn):
        r = fn()
        torch.cuda.synchronize()
        got = r if isinstance(r, torch.Tensor) and r.shape == out.shape else out
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        if err > 1e-4:
            print(f"{name}: WRONG (rel err {err:.2e})")
            return
        ms = do_bench(fn, warmup=25, rep=100)
        results.append((ms, name))
        print(f"{ms * 1e3:8.2f} us  {name}", flush=True)

    def torch_sum():
        torch.sum(x, 0, out=out)
    bench("torch.sum", torch_sum)
    compiled = torch.compile(lambda t: t.sum(0))

    bench("torch.compile", lambda: compiled(x))

    import os
    if os.environ.get("E0_SM"):
        return sm_multiples(x, out, ref, bench, results, M, N)
    grid = [[64, 128, 256], [64, 128, 256], [8, 16, 32], [4, 8]]
    if os.environ.get("E0_QUICK"):
        grid = [[128, 256], [64, 128], [8, 16], [4, 8]]
    if os.environ.get("E0_GRID"):  # "S,S;XBLOCK,..;RBLOCK,..;warps,.."
        grid = [[int(v) for v in part.split(",")] for part in os.environ["E0_GRID"].split(";")]
    for S, XB, RB, W in itertools.product(*grid):
        CH = M // S
        if RB > CH or XB * RB > 16384 or XB * RB < 128:
            continue
        part = torch.empty(S, N, device='cuda')
        SB = min(S, 8192 // XB)

        def two(S=S, XB=XB, RB=RB, W=W, CH=CH, part=part, SB=SB):
            stage1[(N // XB, S)](x, part, N, CH, XB, RB, False, num_warps=W)
            stage2[(N // 64,)](part, out, S, N, 64, SB, num_warps=4)
            return None
        bench(f"two-stage S={S} XBLOCK={XB} RBLOCK={RB} warps={W}", two)

        def inter(S=S, XB=XB, RB=RB, W=W, CH=CH, part=part, SB=SB):
            stage1_interleaved[(N // XB, S)](x, part, N, S, CH, XB, RB, num_warps=W)
            stage2[(N // 64,)](part, out, S, N, 64, SB, num_warps=4)
            return None
        bench(f"interleaved S={S} XBLOCK={XB} RBLOCK={RB} warps={W}", inter)
        if os.environ.get("E0_ONLY_INTERLEAVED"):
            continue

        counts = torch.zeros(N // XB, dtype=torch.int32, device='cuda')

        def last(S=S, XB=XB, RB=RB, W=W, CH=CH, part=part, SB=SB, counts=counts):
            last_block[(N // XB, S)](x, part, counts, out, N, S, CH, XB, RB, SB, num_warps=W)
        bench(f"last-block S={S} XBLOCK={XB} RBLOCK={RB} warps={W}", last)
        ok = bool((counts == 0).all())
        if not ok:
            print("  counters not reset!")

        def one(S=S, XB=XB, RB=RB, W=W, CH=CH):
            out.zero_()
            stage1[(N // XB, S)](x, out, N, CH, XB, RB, True, num_warps=W)
        bench(f"atomic S={S} XBLOCK={XB} RBLOCK={RB} warps={W}", one)

    results.sort(reverse=True)
    print("\nfastest 15, then the best of each kind:")
    best = {}
    for ms, name in results:
        best[name.split()[0]] = (ms, name)
    for ms, name in results[-15:] + sorted(best.values(), reverse=True):
        print(f"{ms * 1e3:8.2f} us  {256 * 2**20 / (ms * 1e-3) / 1e9:7.0f} GB/s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# A hand-written module in the shape `coil compile MODEL --device cuda` prints (the contract in
# python/coil_runtime/heuristics.py). The unit tests load it with a fake triton to check the
# runtime's import, config and launch paths; tests/gpu/test_ops.py runs it for real on the GPU
# (case `runtime_sample`) as a check of the runtime that does not depend on the code generator.
#
# Graph: x f32[4096,1024], s f32[4096,1000], a f32[1024,768], b f32[768,1024]
#   out0 = x * 0.5 + 1            pointwise 1-D, no masks (2 configs: autotuned)
#   out1 = softmax(s, -1)         persistent reduction, INNER, masked rows of 1000
#   out2 = a.t() + b              2-D tile (6 configs: autotuned)
#   out3 = s.sum(0)               looped reduction, DEFAULT hint (6 configs: autotuned)
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice  # noqa: F401  (generated modules import it)

from coil_runtime import heuristics, runtime

INPUT_NAMES = ("x", "s", "a", "b")
OUTPUT_NAMES = ("out0", "out1", "out2", "out3")


@heuristics.pointwise(size_hints={'x': 4194304}, name='triton_poi_fused_add_mul_0',
                      kernel_hash='sample-poi-0')
@triton.jit
def triton_poi_fused_add_mul_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 4194304
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None)
    tmp1 = 0.5
    tmp2 = tmp0 * tmp1
    tmp3 = 1.0
    tmp4 = tmp2 + tmp3
    tl.store(out_ptr0 + (x0), tmp4, None)


@heuristics.persistent_reduction(size_hints={'x': 4096, 'r0_': 1024}, reduction_hint='INNER',
                                 name='triton_per_fused__softmax_1', kernel_hash='sample-per-1')
@triton.jit
def triton_per_fused__softmax_1(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr,
                                R0_BLOCK: tl.constexpr):
    xnumel = 4096
    r0_numel = 1000
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_mask = r0_index < r0_numel
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 1000 * x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.where(r0_mask & xmask, tmp0, float("-inf"))
    tmp2 = tl.max(tmp1, 1)[:, None]
    tmp3 = tl.exp(tmp0 - tmp2)
    tmp4 = tl.where(r0_mask & xmask, tmp3, 0.0)
    tmp5 = tl.sum(tmp4, 1)[:, None]
    tmp6 = tmp3 / tmp5
    tl.store(out_ptr0 + (r0_1 + 1000 * x0), tmp6, r0_mask & xmask)


@heuristics.pointwise(size_hints={'y': 1024, 'x': 1024}, tile_hint='TILE',
                      name='triton_poi_fused_add_t_2', kernel_hash='sample-poi-2')
@triton.jit
def triton_poi_fused_add_t_2(in_ptr0, in_ptr1, out_ptr0, ynumel, xnumel, YBLOCK: tl.constexpr,
                             XBLOCK: tl.constexpr):
    # out[i, j] = a[j, i] + b[i, j], out [768, 1024]: y walks i (a's contiguous dim), x walks j.
    ynumel = 768
    xnumel = 1024
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[None, :]
    ymask = yindex < ynumel
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    y0 = yindex
    x1 = xindex
    tmp0 = tl.load(in_ptr0 + (y0 + 768 * x1), xmask & ymask)
    tmp1 = tl.load(in_ptr1 + (x1 + 1024 * y0), xmask & ymask)
    tmp2 = tmp0 + tmp1
    tl.store(out_ptr0 + (x1 + 1024 * y0), tmp2, xmask & ymask)


@heuristics.reduction(size_hints={'x': 1024, 'r0_': 4096}, reduction_hint='DEFAULT',
                      name='triton_red_fused_sum_3', kernel_hash='sample-red-3')
@triton.jit
def triton_red_fused_sum_3(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr,
                           R0_BLOCK: tl.constexpr):
    xnumel = 1000
    r0_numel = 4096
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (x0 + 1000 * r0_1), r0_mask & xmask,
                       eviction_policy='evict_first', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = _tmp2 + tmp1
        _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
    tmp2 = tl.sum(_tmp2, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp2, xmask)


def call(args):
    arg0_1, arg1_1, arg2_1, arg3_1 = args
    args.clear()
    runtime.check_input(arg0_1, 'x', (4096, 1024), (1024, 1), torch.float32)
    runtime.check_input(arg1_1, 's', (4096, 1000), (1000, 1), torch.float32)
    runtime.check_input(arg2_1, 'a', (1024, 768), (768, 1), torch.float32)
    runtime.check_input(arg3_1, 'b', (768, 1024), (1024, 1), torch.float32)
    buf0 = runtime.empty_strided((4096, 1024), (1024, 1), torch.float32)
    triton_poi_fused_add_mul_0.run(arg0_1, buf0, 4194304)
    buf1 = runtime.empty_strided((4096, 1000), (1000, 1), torch.float32)
    triton_per_fused__softmax_1.run(arg1_1, buf1, 4096, 1000)
    buf2 = runtime.empty_strided((768, 1024), (1024, 1), torch.float32)
    triton_poi_fused_add_t_2.run(arg2_1, arg3_1, buf2, 768, 1024)
    buf3 = runtime.empty_strided((1000,), (1,), torch.float32)
    triton_red_fused_sum_3.run(arg1_1, buf3, 1000, 4096)
    return (buf0, buf1, buf2, buf3)


def reference(x, s, a, b):
    """What call() computes, in torch (float64): the GPU smoke test compares with it."""
    x, s, a, b = (t.double() for t in (x, s, a, b))
    return ((x * 0.5 + 1).float(), torch.softmax(s, -1).float(), (a.t() + b).float(),
            s.sum(0).float())


def get_args():
    device = 'cuda' if torch.cuda.is_available() else 'cpu'  # cpu: the unit tests' dry run
    g = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(shape, device=device, generator=g)
            for shape in ((4096, 1024), (4096, 1000), (1024, 768), (768, 1024))]


def benchmark_compiled_module(times=10, repeat=10):
    from triton.testing import do_bench
    args = get_args()
    call(list(args))  # compile and autotune first
    ms = do_bench(lambda: call(list(args)), return_mode="median")
    print(f"{ms:.4f} ms")
    return ms


if __name__ == "__main__":
    benchmark_compiled_module()

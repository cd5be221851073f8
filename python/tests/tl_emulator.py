"""Runs a generated flash-attention kernel's @triton.jit body on the CPU, with torch tensors for
Triton's blocks: enough of triton.language for what triton_attention.cpp and
triton_attention_backward.cpp print (no Triton, no GPU here). Pointers are (flat tensor, offsets); a load or store outside the tensor where its
mask is not false is an error, so a missing bounds mask fails. Dots compute in f32 from the
operands' values (bf16/f16 products are exact in f32, as on the tensor cores; f32 'ieee').

    fn = kernel_function(module_source, name)      # the def, decorators dropped
    launch(fn, grid, [q, k, v, (mask,) out], {'BLOCK_M': 64, 'BLOCK_N': 32})
"""

import ast
import types

import torch


class Ptr:
    def __init__(self, base, off):
        self.base, self.off = base, off

    def __add__(self, x):
        return Ptr(self.base, self.off + x)

    __radd__ = __add__


def _t(x):
    return x if isinstance(x, torch.Tensor) else torch.tensor(x)


_pid = [0, 0, 0]


def _gather(p, mask, other):
    off = _t(p.off).to(torch.int64)
    if mask is not None:
        off, mask = torch.broadcast_tensors(off, _t(mask))
        safe = torch.where(mask, off, torch.zeros_like(off))
    else:
        mask, safe = None, off
    live = safe if mask is None else safe[mask]
    n = p.base.numel()
    if live.numel() and (int(live.min()) < 0 or int(live.max()) >= n):
        raise IndexError(f"load outside the tensor (offsets {int(live.min())}..{int(live.max())}"
                         f" of {n} elements) where the mask lets it through")
    val = p.base[safe.clamp(0, max(n - 1, 0))] if n else torch.zeros(safe.shape,
                                                                      dtype=p.base.dtype)
    if mask is not None:
        fill = torch.full_like(val, other if other is not None else 0)
        val = torch.where(mask, val, fill)
    return val


def _store(p, value, mask=None):
    off = _t(p.off).to(torch.int64)
    value = _t(value)
    if mask is not None:
        off, value, mask = torch.broadcast_tensors(off, value, _t(mask))
        off, value = off[mask], value[mask]
    else:
        off, value = torch.broadcast_tensors(off, value)
        off, value = off.reshape(-1), value.reshape(-1)
    n = p.base.numel()
    if off.numel() and (int(off.min()) < 0 or int(off.max()) >= n):
        raise IndexError(f"store outside the tensor (offsets {int(off.min())}..{int(off.max())} "
                         f"of {n} elements)")
    p.base[off] = value.to(p.base.dtype)


def _dot(a, b, acc=None, input_precision=None):
    out = a.float() @ b.float()
    return out if acc is None else acc + out


def _where(c, a, b):
    a, b = _t(a), _t(b)
    dt = torch.promote_types(a.dtype, b.dtype)
    return torch.where(_t(c), a.to(dt), b.to(dt))


def _reduce(x, axis, combine):
    """tl.reduce: `combine` folded over the slices along `axis` (the module's own helper)."""
    x = _t(x)
    acc = x.select(axis, 0)
    for i in range(1, x.shape[axis]):
        acc = combine(acc, x.select(axis, i))
    return acc


tl = types.SimpleNamespace(
    constexpr=type("constexpr", (), {}),
    float32=torch.float32, bfloat16=torch.bfloat16, float16=torch.float16,
    int32=torch.int32, int64=torch.int64, int1=torch.bool,
    program_id=lambda axis: torch.tensor(_pid[axis], dtype=torch.int32),
    arange=lambda start, end: torch.arange(start, end, dtype=torch.int32),
    full=lambda shape, value, dtype: torch.full(tuple(shape), value, dtype=dtype),
    zeros=lambda shape, dtype: torch.zeros(tuple(shape), dtype=dtype),
    load=lambda p, mask=None, other=None, eviction_policy=None: _gather(p, mask, other),
    store=lambda p, value, mask=None, **kw: _store(p, value, mask),
    dot=_dot,
    trans=lambda x: x.transpose(0, 1),
    where=_where,
    # torch's maximum/minimum propagate NaN, as tl's with propagate_nan=ALL
    maximum=lambda a, b, propagate_nan=None: torch.maximum(_t(a), _t(b)),
    minimum=lambda a, b, propagate_nan=None: torch.minimum(_t(a), _t(b)),
    PropagateNan=types.SimpleNamespace(ALL="all", NONE="none"),
    max=lambda x, axis: x.max(axis).values,
    sum=lambda x, axis: x.sum(axis),
    reduce=_reduce,
    broadcast_to=lambda x, shape: _t(x).expand(tuple(shape)),
    exp=lambda x: torch.exp(_t(x)),
    div_rn=lambda a, b: _t(a) / _t(b),
    math=types.SimpleNamespace(exp2=torch.exp2, log2=torch.log2),
)

# What pointwise and reduction kernels call from libdevice (extend as kernels need).
libdevice = types.SimpleNamespace(
    erf=lambda x: torch.erf(_t(x)),
    rsqrt=lambda x: torch.rsqrt(_t(x)),
    sqrt=lambda x: torch.sqrt(_t(x)),
    tanh=lambda x: torch.tanh(_t(x)),
)


def kernel_function(source, name):
    """The kernel `name` of a generated module's source, as a Python function over `tl` (and
    libdevice), with the module's @triton.jit helpers (_coil_maximum, ...) it may call."""
    tree = ast.parse(source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and
           (n.name == name or n.name.startswith("_coil_"))]
    for fn in fns:
        fn.decorator_list = []
    scope = {"tl": tl, "libdevice": libdevice}
    exec(compile(ast.Module(body=fns, type_ignores=[]), f"<{name}>", "exec"), scope)
    return scope[name]


def launch(fn, grid, tensors, consts):
    """Runs every program of `grid` in order; `tensors` are the pointer arguments (and the
    integers a size-generic kernel takes, ks0, ..., passed as they are)."""
    ptrs = [t if not isinstance(t, torch.Tensor) else
            Ptr(t.reshape(-1) if t.is_contiguous() else t.view(-1), 0) for t in tensors]
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                _pid[:] = [x, y, z]
                fn(*ptrs, **consts)


def emulate_kernels(fake, mod, source, kinds=None):
    """Has this emulator run the kernels of loaded module `mod` (its `source`), those of the
    autotuner kinds in `kinds` (all when None), on each launch's grid and constants through the
    fake triton (fake_triton.EMULATORS)."""
    from coil_runtime import heuristics
    for t in heuristics.autotuners_of(mod):
        if kinds is not None and t.kind not in kinds:
            continue
        fn = kernel_function(source, t.name)

        def run(*args, fn=fn):
            _, grid, _, _, consts, _ = fake.LAUNCHES[-1]
            launch(fn, grid, args, consts)
        fake.EMULATORS[t.name] = run


def emulate_module(fake, path, name, kinds=None):
    """The generated module at `path`, loaded as `name`, with emulate_kernels' kernels."""
    from coil_runtime import runtime
    mod = runtime.load_module(path, name=name)
    emulate_kernels(fake, mod, open(path).read(), kinds)
    return mod

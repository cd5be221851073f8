"""New CPU tensors for coil's outputs (the torch bridge and coil.Model).

An output of at least HUGE_OUTPUT_BYTES is an anonymous mapping of its own, advised to use
2 MiB pages (what coil's Tensor::empty does in C++), wrapped by torch.frombuffer; the tensor's
storage holds the mapping, which is unmapped when the last view of it goes. torch.empty maps
such a size afresh at every call in 4 KiB pages, and writing it costs a page fault per page:
a 64 MB output took 16,384 faults, 225 ms to fill here against 5.4 ms on huge pages
(docs/torch.md, "CPU outputs"). Smaller outputs come from torch.empty (its cached blocks).
"""
import mmap

import torch

HUGE_OUTPUT_BYTES = 4 << 20


def new_output(shape, dtype):
    """An uninitialized, contiguous CPU tensor of this shape and dtype."""
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes < HUGE_OUTPUT_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(buf, dtype=dtype, count=numel).view(shape)

"""New CPU tensors for coil's outputs (the torch bridge and coil.Model).

An output of at least HUGE_OUTPUT_BYTES (32 MiB) is an anonymous mapping of its own, advised
to use 2 MiB pages (what coil's Tensor::empty does in C++), wrapped by torch.frombuffer; the
tensor's storage holds the mapping, which is unmapped when the last view of it goes.
torch.empty maps such a size afresh at every call in 4 KiB pages, and writing it costs a page
fault per page: a 64 MB output took 16,384 faults, 190 ms to allocate and fill here against
5.2 ms on huge pages (docs/torch.md, "CPU outputs"). Smaller outputs come from torch.empty.
"""
import mmap

import torch

# glibc maps every block of 32 MiB or more afresh (its mmap threshold stops growing there), so
# from that size on torch.empty's memory faults page by page at every call; below it, torch.empty
# reuses heap memory, which is faster than a new mapping (16 MiB: 0.23 ms to allocate and fill
# against 0.87 ms mapped; 64 MiB: 167 ms against 4.6 ms; this machine).
HUGE_OUTPUT_BYTES = 32 << 20
HUGE_PAGE = 2 << 20


def new_output(shape, dtype):
    """An uninitialized, contiguous CPU tensor of this shape and dtype."""
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes < HUGE_OUTPUT_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    # A whole number of 2 MiB pages: the kernel then places the mapping on a 2 MiB boundary.
    size = (nbytes + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(buf, dtype=dtype, count=numel).view(shape)

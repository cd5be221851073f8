"""coil_runtime: runs the Triton modules that `coil compile MODEL --device cuda` writes.

A generated module imports two submodules:

- `heuristics`: the kernel decorators (`pointwise`, `persistent_reduction`, `reduction`). Each
  turns an `@triton.jit` function into an autotuner (`heuristics.CoilAutotuner`) whose
  `.run(*args)` picks a launch config (Inductor's tables, benchmarked once per size bucket and
  cached on disk), derives the grid from the numels and launches on the current CUDA stream.
- `runtime`: input checks, output allocation, module loading and .npy helpers.

Nothing here imports triton (or torch) at import time, so the config logic and its unit tests run
on machines without a GPU. `python -m coil_runtime.run MODULE.py --inputs ...` runs a module on
.npy files.
"""

__all__ = ["configs", "heuristics", "autotune", "precompile", "runtime", "testing", "logs"]

"""The Triton gather at run-time indices on a real GPU (issue 18's embedding): the golden module
tests/golden/triton/embedding_gather.py against torch at in-range ids (negative ones wrap),
then an id out of range, read back synchronously (COIL_SYNC_INDEX_CHECKS=1): an IndexError
naming the gather, the index and the size. The CPU runs the same module through tl_emulator.py
(python/tests/test_gather_emulated.py). Usage, from the repository root on the GPU machine:

    PYTHONPATH=python python3 tests/gpu/check_gather.py
"""

import os
import sys

os.environ["COIL_SYNC_INDEX_CHECKS"] = "1"  # before coil_runtime reads it

import torch  # noqa: E402

from coil_runtime import runtime  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    mod = runtime.load_module(os.path.join(ROOT, "tests", "golden", "triton",
                                           "embedding_gather.py"), name="embedding_gather")
    torch.manual_seed(0)
    w, pos = torch.randn(1000, 64, device="cuda"), torch.randn(37, 64, device="cuda")
    failures = 0
    for seed in range(3):
        ids = torch.randint(-1000, 1000, (4, 37), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(seed))
        (y,) = mod.call([w, ids, pos])
        ref = w[torch.where(ids < 0, ids + 1000, ids)] + pos
        err = (y - ref).abs().max().item()
        print(f"ids seed {seed}: max abs error {err:g}")
        failures += err != 0
    ids = torch.zeros(4, 37, dtype=torch.int64, device="cuda")
    ids[1, 2] = 1234
    try:
        mod.call([w, ids, pos])
        print("an id out of range raised nothing")
        failures += 1
    except IndexError as e:
        print(f"an id out of range: IndexError: {e}")
        failures += "index 1234 is out of range for a dim of size 1000" not in str(e)
    (y,) = mod.call([w, torch.ones_like(ids), pos])  # the flag is clear again
    failures += (y - (w[1] + pos)).abs().max().item() != 0
    print("PASS" if failures == 0 else f"FAIL ({failures})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

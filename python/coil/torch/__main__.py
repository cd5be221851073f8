"""python -m coil.torch --ops: the aten/prims overloads coil lowers, and the decomposed ones."""

import argparse
import sys


def main():
    p = argparse.ArgumentParser(prog="python -m coil.torch", description=__doc__)
    p.add_argument("--ops", action="store_true", help="list the supported op overloads")
    a = p.parse_args()
    if not a.ops:
        p.print_help()
        return 2
    from . import lowering
    print("# lowered by coil (python/coil/torch/lowering*.py)")
    for name in lowering.supported_ops():
        print(name)
    print("# in place, as their functional form plus a write into the first argument "
          "(python/coil/torch/mutation.py), in graphs coil compiles whole")
    for name in lowering.supported_inplace_ops():
        print(name)
    print("# decomposed by torch._decomp before lowering (what they become may still fall back)")
    for op in sorted({str(k) for k in lowering.DECOMPOSITIONS}):
        print(op)
    return 0


if __name__ == "__main__":
    sys.exit(main())

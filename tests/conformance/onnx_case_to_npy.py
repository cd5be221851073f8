"""Writes ONNX backend test cases as `coil check` runs them: for each TEST (a path relative to the
test data, e.g. node/test_maxpool_3d_default), OUT/<name>/ gets model.onnx, in<k>.npy and
out<k>.npy from test_data_set_0, and `args`, the `--input NAME=in<k>.npy --expect
NAME=out<k>.npy` arguments. For running node tests where the conformance runner is not built
(the GPU host: `coil check model.onnx $(cat args) --device cuda`).

  /usr/bin/python3 tests/conformance/onnx_case_to_npy.py OUT TEST [TEST ...]
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.environ.get("COIL_ONNX_TESTDATA", "/usr/share/libonnx-testdata/data")


def main():
    out, tests = sys.argv[1], sys.argv[2:]
    for test in tests:
        src = os.path.join(ROOT, test)
        dst = os.path.join(out, os.path.basename(test))
        os.makedirs(dst, exist_ok=True)
        model = onnx.load(os.path.join(src, "model.onnx"))
        shutil.copy(os.path.join(src, "model.onnx"), dst)
        weights = {t.name for t in model.graph.initializer}
        feeds = [i.name for i in model.graph.input if i.name not in weights]
        args = []
        for kind, names, flag in (("input", feeds, "--input"),
                                  ("output", [o.name for o in model.graph.output], "--expect")):
            for k, name in enumerate(names):
                t = onnx.load_tensor(os.path.join(src, "test_data_set_0", f"{kind}_{k}.pb"))
                file = f"{kind[:3] if kind == 'output' else 'in'}{k}.npy"
                np.save(os.path.join(dst, file), numpy_helper.to_array(t))
                args.append(f"{flag} {name}={file}")
        with open(os.path.join(dst, "args"), "w") as f:
            f.write(" ".join(args) + "\n")


if __name__ == "__main__":
    main()

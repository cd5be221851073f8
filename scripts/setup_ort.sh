#!/usr/bin/env bash
# Installs ONNX Runtime for Node (onnxruntime-node, pinned in bench/ort/package.json and
# package-lock.json) into bench/ort/node_modules: the benchmark anchor of
# `bench/model_bench.py --ort` (docs/benchmarks.md, "Against ONNX Runtime"). Debian has no ONNX
# Runtime package, so it comes from npm (docs/dependencies.md). Benchmarks only: neither the
# tests nor CI need it. Its CPU binaries are in the npm package; ONNXRUNTIME_NODE_INSTALL=skip
# stops its install script from fetching the CUDA ones from nuget.org.
#
#   bash scripts/setup_ort.sh
set -euo pipefail
cd "$(dirname "$0")/../bench/ort"
command -v npm >/dev/null || { echo "setup_ort: npm is missing (apt-get install npm)" >&2; exit 1; }
ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund
node -e "console.log('onnxruntime-node', require('onnxruntime-node/package.json').version)"

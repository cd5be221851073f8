#!/usr/bin/env bash
# Installs every Debian package coil needs, then configures and builds it.
# Idempotent: a second run only rebuilds what changed.
#   scripts/setup.sh            install packages + build (Release)
#   COIL_SKIP_APT=1 scripts/setup.sh   skip the package step (already installed)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  # toolchain
  g++ clang-14 clang-format-14 cmake ninja-build pkg-config libomp-14-dev
  # C++ libraries (see docs/dependencies.md for why each one)
  libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libsleef-dev
  # the remote cache: hiredis (Redis client), OpenSSL's libcrypto (HMAC), and redis-server for
  # its tests (tests/remote_cache/)
  libhiredis-dev libssl-dev redis-server
  libgtest-dev libgmock-dev libbenchmark-dev
  # Eigen: only src/kernels/vmath/ (libcoil_vmath, vector erf for generated kernels)
  libeigen3-dev
  # extern kernels (library GEMM and convolution calls from generated code): oneDNN, and
  # OpenBLAS's OpenMP build (not the pthread one; see docs/dependencies.md)
  libdnnl-dev libopenblas-openmp-dev
  # Python used by tests and benchmarks: Debian's /usr/bin/python3 with torch/numpy, and
  # torchvision for the real-model tests (tests/models/export_models.py: resnet18, mobilenet_v2)
  python3 python3-numpy python3-torch python3-pytest python3-torchvision
  # ONNX frontend: protobuf classes, and the backend test data for the conformance suite
  # (/usr/share/libonnx-testdata/data; see docs/onnx.md)
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata python3-onnx
  # Plots of benchmark runs (bench/roofline.py)
  python3-matplotlib
)

if [ "${COIL_SKIP_APT:-0}" != "1" ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

BUILD_DIR="${COIL_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${COIL_BUILD_TYPE:-Release}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

#!/usr/bin/env bash
# Sets everything up (Debian packages, build) and runs coil's main job: `coil demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec ./build/bin/coil demo "$@"

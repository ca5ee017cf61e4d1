#!/usr/bin/env bash
# Sets up (packages + build) and runs the whole test suite. Usage: scripts/test.sh [ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests build with warnings as errors (the main jobs' build keeps the same cache).
APIARY_CMAKE_ARGS="-DAPIARY_WERROR=ON ${APIARY_CMAKE_ARGS:-}" scripts/setup.sh build
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only, always
ctest --test-dir build --output-on-failure -j "${APIARY_JOBS:-2}" "$@"

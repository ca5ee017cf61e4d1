#!/usr/bin/env bash
# Sets up (packages + build) and runs the whole test suite. Usage: scripts/test.sh [ctest args]
#   scripts/test.sh --sanitize [ctest args]: builds build-sanitize/ with ASan + UBSan (no
#   Python module, no CUDA) and runs the unit, actor, integration and sim tests there; the
#   first memory error, leak or undefined behaviour fails its test, saying where (known
#   undefined behaviour inside third-party headers: scripts/ubsan.supp).
set -euo pipefail
cd "$(dirname "$0")/.."
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only, always
if [ "${1:-}" = "--sanitize" ]; then
  shift
  APIARY_CMAKE_ARGS="-DAPIARY_WERROR=ON -DAPIARY_SANITIZE=ON -DAPIARY_PYTHON=OFF -DAPIARY_ENABLE_CUDA=OFF \
    ${APIARY_CMAKE_ARGS:-}" scripts/setup.sh build-sanitize
  # UCX's own malloc and mmap hooks would fight ASan's interceptors; UCX finds its
  # memory without them. halt_on_error keeps one report per failing test.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/ubsan.supp:${UBSAN_OPTIONS:-}"
  ctest --test-dir build-sanitize --output-on-failure -j "${APIARY_JOBS:-2}" -L 'unit|actor|integration|sim' "$@"
  exit
fi
# The tests build with warnings as errors (the main jobs' build keeps the same cache).
APIARY_CMAKE_ARGS="-DAPIARY_WERROR=ON ${APIARY_CMAKE_ARGS:-}" scripts/setup.sh build
ctest --test-dir build --output-on-failure -j "${APIARY_JOBS:-2}" "$@"

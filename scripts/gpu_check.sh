#!/usr/bin/env bash
# The one check to run on a lent GPU machine. It builds cuda/ as a project of its own
# (only a C++ compiler, CMake, ninja and the CUDA toolkit are needed there: no CAF, UCX,
# protobuf, fmt or Catch2), runs the gpu and unit tests, fails if the gpu tests were
# skipped (a GPU machine must run them), then runs the kernel benchmark.
# Usage: scripts/gpu_check.sh [build dir]   (default /tmp/apiary-gpu-check)
# Env:   NCCL_ROOT (prefix holding include/nccl.h and lib/libnccl.so*; found otherwise
#        in the CUDA toolkit or the python3 nvidia-nccl wheel), BENCH_ELEMENTS
#        (default 2^26: 256 MiB per float array, well past an H200's 60 MB of L2).
set -eu
set -o pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-/tmp/apiary-gpu-check}
elements=${BENCH_ELEMENTS:-67108864}
export PATH="$PATH:/usr/local/cuda/bin"

started=$SECONDS
step() { printf '\n== %s (at %d s)\n' "$1" $((SECONDS - started)); }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
  echo "nvidia-smi: not available"
if ! command -v nvcc >/dev/null; then
  echo "FAIL: nvcc not found on PATH or in /usr/local/cuda/bin; expected the CUDA toolkit" >&2
  exit 1
fi
nvcc --version | tail -n 1
cmake --version | head -n 1
echo "ninja $(ninja --version)"

step "configure (cuda/ standalone, sm_90)"
cmake -S "$repo/cuda" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DAPIARY_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90

step "build"
cmake --build "$build" -j "$(nproc)"

step "tests (labels gpu and unit)"
ctest --test-dir "$build" -L 'gpu|unit' -V --timeout 300 2>&1 |
  tee "$build/ctest.log"
if grep -q "Skipped" "$build/ctest.log"; then
  echo "FAIL: the gpu tests were skipped on a machine meant to have a GPU (see above)" >&2
  exit 1
fi

step "benchmark: $elements elements"
"$build/cuda_gpu_bench" "$elements" 0.3

step "done"

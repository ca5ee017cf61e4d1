#!/usr/bin/env bash
# Installs every Debian 12 package apiary needs (idempotent) and builds it.
# Usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}

PACKAGES=(
  cmake ninja-build g++ pkg-config ccache
  libcaf-dev libprotobuf-dev protobuf-compiler
  libucx-dev ucx-utils
  libfmt-dev libspdlog-dev libcli11-dev catch2 libssl-dev libmsgpack-cxx-dev libgoogle-perftools-dev libabsl-dev
  libopendht-dev
  libgloo-dev openmpi-bin libopenmpi-dev
  iproute2 iptables util-linux
  python3-dev python3-pybind11 python3-numpy python3-torch python3-msgpack python3-pytest
  python3-sklearn python3-tqdm python3-protobuf python3-pydantic python3-matplotlib
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ccache keys on paths relative to the checkout and ignores the working directory, so a
# fresh clone in another folder (CI) reuses what any earlier build compiled.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# CUDA kernels are built when nvcc is present (/usr/local/cuda); everything works without.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache ${APIARY_CMAKE_ARGS:-}
cmake --build "$BUILD" -j "${APIARY_JOBS:-2}"

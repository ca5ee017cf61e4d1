#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, ASan and UBSan in build-fuzz/ and runs
# each for SECONDS (default 60) from its seed corpus (fuzz/corpus/<target>/; what a run
# finds goes to build-fuzz/corpus/<target>/, the seeds stay as they are). Prints each
# target's executions and exits non-zero when one crashed, leaked or hit undefined
# behaviour (the reproducer is written to build-fuzz/crashes/).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default: 60 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
scripts/setup.sh build >/dev/null   # the Debian packages (and the main build)
for p in clang llvm; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends clang llvm
  }
done
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DAPIARY_FUZZ=ON -DAPIARY_BUILD_TESTS=OFF -DAPIARY_PYTHON=OFF \
  -DAPIARY_ENABLE_CUDA=OFF >/dev/null
TARGETS=("$@")
if [ ${#TARGETS[@]} -gt 0 ]; then   # only the targets asked for are built
  cmake --build build-fuzz -j "${APIARY_JOBS:-2}" --target "${TARGETS[@]}"
else
  cmake --build build-fuzz -j "${APIARY_JOBS:-2}" --target fuzz_all
  TARGETS=($(ls fuzz/fuzz_*.cpp | xargs -n1 basename | sed 's/\.cpp$//'))
fi
mkdir -p build-fuzz/crashes
# ASan keeps freed memory in a quarantine (256 MB by default) before reusing it, and a size
# class's pages stay mapped once used: over millions of inputs of varied allocation sizes
# (fuzz_files) that alone grew a process past the 2 GB RSS limit with a live heap of tens
# of MB. A 64 MB quarantine kept fuzz_files under 600 MB through 5 million executions.
export ASAN_OPTIONS="quarantine_size_mb=64:${ASAN_OPTIONS:-}"
failed=0
for t in "${TARGETS[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/$t.log"
  if build-fuzz/bin/"$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -rss_limit_mb=2048 \
      -artifact_prefix="build-fuzz/crashes/$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    status=ok
  else
    status="FAILED (see $log and build-fuzz/crashes/)"
    failed=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  printf '%-16s %12s executions in %s s: %s\n' "$t" "$execs" "$SECONDS_EACH" "$status"
done
exit $failed

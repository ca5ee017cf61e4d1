#!/usr/bin/env bash
# apiary's Python API beside the real hivemind, same machine, same run: each workload
# runs through `import apiary` (Debian's /usr/bin/python3) and through `import hivemind`
# (its virtual environment), one after the other; the table shows both and the ratio.
# Usage: bench/python/run.sh [compression] [dht] [averaging] [step] [optimizer] [moe] [experts]   (default: all)
# `experts` is the C++ `apiary bench experts` (MoE server throughput beside hivemind's
# Server, bench/README.md); its own table is printed after the others.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh build >/dev/null
bench/python/setup_hivemind.sh >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
APIARY_PY=/usr/bin/python3
HIVEMIND_PY=build/hivemind-venv/bin/python
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
WORKLOADS=("$@")
[ ${#WORKLOADS[@]} -gt 0 ] || WORKLOADS=(compression dht averaging step optimizer moe experts)
both() {  # name, script and flags: runs the workload through each implementation
  local name=$1; shift
  for impl in apiary hivemind; do
    local py=$APIARY_PY
    [ "$impl" = hivemind ] && py=$HIVEMIND_PY
    echo "== $name: $impl" >&2
    if [ "$impl" = apiary ]; then
      PYTHONPATH="$PWD/build/python" timeout 900 "$py" "bench/python/$1" --impl "$impl" "${@:2}" >"$OUT/$name.$impl" 2>&1 || true
    else
      timeout 900 "$py" "bench/python/$1" --impl "$impl" "${@:2}" >"$OUT/$name.$impl" 2>&1 || true
    fi
    grep -q '^RESULT ' "$OUT/$name.$impl" || { echo "   no result; last lines:" >&2; tail -5 "$OUT/$name.$impl" >&2; }
  done
}
for w in "${WORKLOADS[@]}"; do
  case $w in
    compression) both compression bench_compression.py ;;
    dht) both dht16 bench_dht.py --peers 16; both dht64 bench_dht.py --peers 64 ;;
    averaging) both averaging bench_averaging.py --workload swarm ;;
    step) for p in 2 4; do for m in 16 64; do
            both "step${p}x${m}" bench_averaging.py --workload step --peers $p --mib $m --rounds 10
            echo "== step${p}x${m}: apiary C++" >&2  # the same swarm through api::Averager, no Python
            timeout 900 build/bin/apiary_averager_step_bench --peers $p --mib $m --rounds 10 >"$OUT/step${p}x${m}.cpp" 2>&1 || true
          done; done ;;
    optimizer) for s in 0 1 2 3 4; do  # 8 peer processes, up to 240 s of training each; a run per seed (time to
                 both "optimizer_s$s" bench_optimizer.py --seed "$s"; done ;;  # a target depends on the batches drawn)
    moe) for p in minimalistic ffn_small_batch default; do  # the same torch module served and called through
           both "moe_$p" bench_moe.py --preset $p; done ;;      # apiary.moe and hivemind.moe (Python both)
    experts) echo "== experts: apiary and hivemind (apiary bench experts)" >&2  # ~8 min, 3 presets
             timeout 1800 build/bin/apiary bench experts >"$OUT/experts.txt" 2>&1 || true ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 bench/python/report.py "$OUT"
[ ! -f "$OUT/experts.txt" ] || cat "$OUT/experts.txt"

#!/usr/bin/env bash
# The second main job: a torch model (an MLP with a sparse embedding feature, on
# scikit-learn's digits: python/examples/autodist_digits.py) trained by four trainer
# processes with apiary.autodist, once per strategy builder: PSLoadBalancing (two PS
# processes, the strategy's PS devices dealt out between them), AllReduce and Parallax (the embedding on a PS,
# served by the chief; the dense layers all-reduced). The chief prints loss, held-out accuracy and step time, then the
# accuracy of single-process training on the same samples beside its own.
# Usage: scripts/ps_demo.sh [STEPS=120] [BUILDER...]   (default: PSLoadBalancing AllReduce Parallax)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-120}
shift || true
BUILDERS=("$@")
[ ${#BUILDERS[@]} -gt 0 ] || BUILDERS=(PSLoadBalancing AllReduce Parallax)
scripts/setup.sh build >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
export PYTHONPATH="$PWD/build/python" OMP_NUM_THREADS=1
OUT=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT
PORT=${PORT:-15000}
for builder in "${BUILDERS[@]}"; do
  EXAMPLE=(/usr/bin/python3 python/examples/autodist_digits.py --builder "$builder" --steps "$STEPS" --port "$PORT")
  servers=()
  if [ "$builder" = PSLoadBalancing ]; then  # PS processes of their own
    EXAMPLE+=(--ps-processes)
    mapfile -t devices < <("${EXAMPLE[@]}" --print-ps-devices)
    groups=("" "")  # two PS processes: devices 0, 2, ... and 1, 3, ...
    for i in "${!devices[@]}"; do
      g=$((i % 2)); groups[$g]="${groups[$g]:+${groups[$g]},}${devices[$i]}"
    done
    for g in "${groups[@]}"; do
      [ -n "$g" ] || continue
      "${EXAMPLE[@]}" --serve "$g" >"$OUT/$builder.ps.${g//[:,]/_}.log" 2>&1 &
      servers+=($!)
      pids+=($!)
    done
    echo "== $builder: ${#servers[@]} PS processes serving ${#devices[@]} PS devices (${groups[*]}), 4 trainer processes"
  else
    echo "== $builder: 4 trainer processes"
  fi
  trainers=()
  for r in 1 2 3; do
    RANK=$r WORLD_SIZE=4 "${EXAMPLE[@]}" >"$OUT/$builder.$r.log" 2>&1 &
    trainers+=($!)
    pids+=($!)
  done
  status=0
  RANK=0 WORLD_SIZE=4 "${EXAMPLE[@]}" || status=$?
  for i in "${!trainers[@]}"; do
    if ! wait "${trainers[$i]}"; then
      echo "trainer $((i + 1)) failed:"; tail -5 "$OUT/$builder.$((i + 1)).log"; status=1
    fi
  done
  for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null || true; wait "$s" 2>/dev/null || true; done
  pids=()
  [ "$status" = 0 ] || exit "$status"
  PORT=$((PORT + 100))
done

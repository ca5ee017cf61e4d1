#!/usr/bin/env bash
# The main job: sets up, then runs a local swarm of N Python peers on 127.0.0.1 that
# train one PyTorch MLP on scikit-learn's digits (python/examples/swarm_digits.py): each
# peer trains on its own shard and, every few steps, finds a group through apiary's DHT
# and averages its parameters with it (apiary.DecentralizedAverager, butterfly
# all-reduce over UCX). A last process trains alone on peer 0's shard for comparison.
# Shows a progress bar per peer, then each peer's rounds (group size, loss, held-out
# accuracy) and the swarm's accuracy beside the lone peer's.
# Usage: scripts/swarm.sh [PEERS=6] [STEPS=300] [AVERAGE_EVERY=25]
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${1:-6}
STEPS=${2:-300}
EVERY=${3:-25}
scripts/setup.sh build >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
PY=/usr/bin/python3   # Debian's interpreter: it sees Debian's torch and scikit-learn
PEER=python/examples/swarm_digits.py
OUT=$(mktemp -d)
pids=()
TAILPID=
cleanup() {
  for p in "${pids[@]}" $TAILPID; do kill -TERM "$p" 2>/dev/null || true; done
  rm -rf "$OUT"
}
trap cleanup EXIT
COMMON=(--peers "$PEERS" --steps "$STEPS" --average-every "$EVERY")

"$PY" "$PEER" "${COMMON[@]}" --rank 0 >"$OUT/peer0.log" 2>"$OUT/peer0.err" &
pids+=($!)
# Peer 0 prints its address once its DHT node listens (seconds; a cold start of torch
# and scikit-learn on a busy machine takes longer): wait for it, or for it to die.
for _ in $(seq 1200); do
  grep -q '^listening ' "$OUT/peer0.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
BOOT=$(sed -n 's/^listening //p' "$OUT/peer0.log")
[ -n "$BOOT" ] || { echo "peer 0 did not start:"; cat "$OUT/peer0.log" "$OUT/peer0.err"; exit 1; }
tail -f "$OUT/peer0.err" >&2 &   # its progress bar, as the other peers show theirs
TAILPID=$!
echo "peer 0 listening on $BOOT; $PEERS peers training ($STEPS steps, averaging every $EVERY steps, groups of up to 4)"
for i in $(seq 1 $((PEERS - 1))); do
  "$PY" "$PEER" "${COMMON[@]}" --rank "$i" --initial-peers "$BOOT" >"$OUT/peer$i.log" &
  pids+=($!)
done
"$PY" "$PEER" "${COMMON[@]}" --rank 0 --solo >"$OUT/solo.log" &
pids+=($!)
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
kill "$TAILPID" 2>/dev/null || true
for i in $(seq 0 $((PEERS - 1))); do
  echo
  echo "== peer $i"
  grep -v '^listening' "$OUT/peer$i.log"
done
echo
echo "== summary"
grep -h 'final:' "$OUT"/peer*.log
"$PY" - "$OUT" <<'PYEOF'
import glob, re, sys
def acc(path):
    m = re.search(r"held-out accuracy ([0-9.]+)", open(path).read().split("final:")[-1])
    return float(m.group(1)) if m else None
swarm = [a for a in (acc(p) for p in sorted(glob.glob(sys.argv[1] + "/peer*.log"))) if a is not None]
solo = acc(sys.argv[1] + "/solo.log")
if swarm and solo is not None:
    print(f"swarm: mean held-out accuracy {sum(swarm) / len(swarm):.4f} over {len(swarm)} peers; "
          f"one peer alone on its shard, same steps: {solo:.4f}")
PYEOF
exit $status

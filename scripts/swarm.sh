#!/usr/bin/env bash
# The main job: sets up, then runs a local swarm of N `apiary train` processes on
# 127.0.0.1 that train one logistic regression collaboratively: each peer takes local
# SGD steps on its own batches, and every few steps finds a group through the DHT and
# averages the model with it (butterfly all-reduce over UCX). Prints each peer's rounds
# (group size, loss of the averaged model, bytes moved) and a summary.
# Usage: scripts/swarm.sh [PEERS=6] [STEPS=200] [AVERAGE_EVERY=20]
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${1:-6}
STEPS=${2:-200}
EVERY=${3:-20}
scripts/setup.sh build >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
APIARY=build/bin/apiary
OUT=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT
COMMON=(train --peers "$PEERS" --steps "$STEPS" --average-every "$EVERY" --target-group-size 4
        --min-group-size 2 --min-matchmaking-time 0.5 --every 2 --features 64 --samples 4096 --batch 32)

"$APIARY" "${COMMON[@]}" --rank 0 >"$OUT/peer0.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening ' "$OUT/peer0.log" && break; sleep 0.1; done
BOOT=$(sed -n 's/^listening //p' "$OUT/peer0.log")
[ -n "$BOOT" ] || { echo "peer 0 did not start:"; cat "$OUT/peer0.log"; exit 1; }
echo "peer 0 listening on $BOOT"
for i in $(seq 1 $((PEERS - 1))); do
  "$APIARY" "${COMMON[@]}" --rank "$i" --initial-peers "$BOOT" >"$OUT/peer$i.log" 2>&1 &
  pids+=($!)
done
echo "$PEERS peers training ($STEPS local steps, averaging every $EVERY steps, groups of up to 4)"
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
pids=()
for i in $(seq 0 $((PEERS - 1))); do
  echo
  echo "== peer $i"
  grep -v '^listening' "$OUT/peer$i.log"
done
echo
echo "== summary"
grep -h 'final loss' "$OUT"/peer*.log
exit $status

#!/usr/bin/env bash
# The main job: sets up, then runs a local swarm of N `apiary node` processes on
# 127.0.0.1 that find each other from one bootstrap address and ping each other over
# UCX, and prints each node's table of round-trip times.
# Usage: scripts/swarm.sh [NODES=4] [SECONDS=5] [MODE=tcp|shm]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-4}
SECS=${2:-5}
MODE=${3:-tcp}
scripts/setup.sh build >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
APIARY=build/bin/apiary
OUT=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

"$APIARY" node --listen /ip4/127.0.0.1/tcp/0 --mode "$MODE" --ping-interval 500 >"$OUT/node1.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening ' "$OUT/node1.log" && break; sleep 0.1; done
BOOT=$(sed -n 's/^listening //p' "$OUT/node1.log")
[ -n "$BOOT" ] || { echo "node 1 did not start:"; cat "$OUT/node1.log"; exit 1; }
echo "node 1 listening on $BOOT"
for i in $(seq 2 "$NODES"); do
  "$APIARY" node --listen /ip4/127.0.0.1/tcp/0 --mode "$MODE" --ping-interval 500 --bootstrap "$BOOT" \
    >"$OUT/node$i.log" 2>&1 &
  pids+=($!)
done
echo "$NODES nodes running ($MODE); letting them ping for ${SECS}s"
sleep "$SECS"
for p in "${pids[@]}"; do kill -INT "$p"; done
for p in "${pids[@]}"; do wait "$p" || true; done
pids=()
for i in $(seq 1 "$NODES"); do
  echo
  echo "== node $i"
  cat "$OUT/node$i.log"
done
rm -rf "$OUT"

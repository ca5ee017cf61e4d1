#!/usr/bin/env bash
# Parameter-server training on one machine: builds a PSLoadBalancing strategy for the
# logistic-regression model of `apiary ps` (examples/ps/), starts one PS process per PS
# device of the strategy (two) and four replica processes (one chief, three workers),
# all on 127.0.0.1, and prints the chief's loss and step time per step. The processes find
# each other through a DHT: the first PS process bootstraps it and prints its multiaddr,
# every other process joins it with --initial-peers (no --peers lists to pass around).
# Usage: scripts/ps_cpp_demo.sh [STEPS=30] [STALENESS=0] [BUILDER=PSLoadBalancing]
# Env: APIARY (default: set up and build with scripts/setup.sh, then build/bin/apiary),
# STRAGGLER_MS (extra time per step of the last worker, default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-30}
STALENESS=${2:-0}
BUILDER=${3:-PSLoadBalancing}
if [ -z "${APIARY:-}" ]; then
  scripts/setup.sh build >/dev/null
  APIARY=build/bin/apiary
fi
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
[ -x "$APIARY" ] || { echo "no $APIARY; build first (scripts/setup.sh) or set APIARY"; exit 1; }
OUT=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$OUT"; }
trap cleanup EXIT

SPEC=examples/ps/resource_spec.yml
"$APIARY" strategy build --builder "$BUILDER" --staleness "$STALENESS" --graph examples/ps/graph_item.json \
  --resource-spec "$SPEC" --out "$OUT/strategy"
COMMON=(--strategy "$OUT/strategy" --resource-spec "$SPEC" --features 16 --steps "$STEPS" --batch 32)

# One PS process per PS device the strategy uses.
DEVICES=$("$APIARY" strategy build --builder "$BUILDER" --staleness "$STALENESS" --graph examples/ps/graph_item.json \
  --resource-spec "$SPEC" | sed -n 's/.*reduction_destination: "\([^"]*\)".*/\1/p' | sort -u)
COMMON+=(--job "demo$$")
JOIN=()   # --initial-peers of the job's DHT, once the first PS has printed it
i=0
for dev in $DEVICES; do
  "$APIARY" ps --role ps --device "$dev" --listen 127.0.0.1:0 "${COMMON[@]}" "${JOIN[@]}" >"$OUT/ps$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q ' dht /' "$OUT/ps$i.log" && break; sleep 0.1; done
  addr=$(sed -n 's/.* listening \([^ ]*\) .*/\1/p' "$OUT/ps$i.log")
  dht=$(sed -n 's/.* dht \([^ ]*\).*/\1/p' "$OUT/ps$i.log")
  [ -n "$addr" ] && [ -n "$dht" ] || { echo "PS $dev did not start:"; cat "$OUT/ps$i.log"; exit 1; }
  echo "PS $dev at $addr: $(sed -n 's/.* shards //p' "$OUT/ps$i.log")"
  [ ${#JOIN[@]} -gt 0 ] || JOIN=(--initial-peers "$dht")
  i=$((i + 1))
done

# Four replicas: the chief (replica 0) and three workers; each finds the PS devices in the DHT.
rpids=()
"$APIARY" ps --role chief "${COMMON[@]}" "${JOIN[@]}" >"$OUT/replica0.log" 2>&1 &
rpids+=($!)
for r in 1 2 3; do
  extra=()
  [ "$r" = 3 ] && [ -n "${STRAGGLER_MS:-}" ] && extra=(--step-delay-ms "$STRAGGLER_MS")
  "$APIARY" ps --role worker --replica "$r" "${COMMON[@]}" "${JOIN[@]}" "${extra[@]}" \
    >"$OUT/replica$r.log" 2>&1 &
  rpids+=($!)
done
rc=0
for p in "${rpids[@]}"; do wait "$p" || rc=1; done
echo "== chief (replica 0)"
cat "$OUT/replica0.log"
for r in 1 2 3; do echo "== replica $r (last 2 lines)"; tail -n 2 "$OUT/replica$r.log"; done
exit $rc

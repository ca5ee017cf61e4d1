#!/usr/bin/env bash
# The main job: sets up, then runs a local swarm of PEERS Python peers on 127.0.0.1 that
# train one PyTorch MLP on scikit-learn's digits with apiary.Optimizer (hivemind's
# collaborative Optimizer, python/examples/swarm_optimizer.py): peers of different
# speeds, each on its own shard, the last one in client mode, take one optimizer step
# together per TARGET samples of the whole swarm (an epoch: gradients averaged over
# apiary's DHT and butterfly all-reduce on UCX). A last process trains alone on peer 0's
# shard with the same samples per epoch, for comparison. Shows a progress bar per peer,
# prints each peer's epochs (swarm samples/s, loss, held-out accuracy), and writes the
# logs and a picture of the run (swarm.png) to build/swarm/.
#   --churn   kills a random peer every CHURN_EVERY seconds (default 8) and starts a fresh
#             one, which loads the swarm's state and catches up
#   --diloco  trains with DiLoCo instead (apiary.optim.DiLoCo: local Adam steps, 8-bit
#             pseudo-gradients averaged every 20 steps, outer Nesterov SGD)
# Usage: scripts/swarm.sh [--churn] [--diloco] [PEERS=6] [EPOCHS=30] [TARGET=1024]
set -euo pipefail
cd "$(dirname "$0")/.."
CHURN=0
MODE=()
POS=()
for a in "$@"; do
  case "$a" in
    --churn) CHURN=1 ;;
    --diloco) MODE=(--diloco) ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) POS+=("$a") ;;
  esac
done
PEERS=${POS[0]:-6}
EPOCHS=${POS[1]:-30}
TARGET=${POS[2]:-1024}
CHURN_EVERY=${CHURN_EVERY:-8}
scripts/setup.sh build >/dev/null
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n   # loopback only
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
PY=/usr/bin/python3   # Debian's interpreter: it sees Debian's torch and scikit-learn
PEER=python/examples/swarm_optimizer.py
OUT=build/swarm
rm -rf "$OUT" && mkdir -p "$OUT"
LOG="$OUT/swarm.jsonl"
declare -A pids=()
TAILPID=
cleanup() {
  for p in "${pids[@]}" $TAILPID; do kill -TERM "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
COMMON=(--peers "$PEERS" --epochs "$EPOCHS" --target-batch-size "$TARGET" --log "$LOG" "${MODE[@]}")

# Peer i: a shard, a speed (extra seconds per step), the last one in client mode.
start_peer() {
  local i=$1 shard=$(( $1 % PEERS )) extra=()
  [ "$shard" -eq $((PEERS - 1)) ] && [ "$PEERS" -gt 1 ] && extra=(--client-mode)
  "$PY" "$PEER" "${COMMON[@]}" --rank "$i" --step-time "0.0$(( 2 + 2 * (i % 3) ))" \
    --initial-peers "$BOOT" "${extra[@]}" >"$OUT/peer$i.log" 2>"$OUT/peer$i.err" &
  pids[$i]=$!
}

"$PY" "$PEER" "${COMMON[@]}" --rank 0 --step-time 0.02 >"$OUT/peer0.log" 2>"$OUT/peer0.err" &
pids[0]=$!
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
what="apiary.Optimizer, $TARGET samples per epoch"
[ ${#MODE[@]} -gt 0 ] && what="DiLoCo"
echo "peer 0 listening on $BOOT; $PEERS peers training $EPOCHS epochs ($what)"
for i in $(seq 1 $((PEERS - 1))); do start_peer "$i"; done
if [ ${#MODE[@]} -eq 0 ]; then
  "$PY" "$PEER" "${COMMON[@]}" --rank 0 --solo >"$OUT/solo.log" 2>/dev/null &
  pids[solo]=$!
fi

if [ "$CHURN" -eq 1 ] && [ "$PEERS" -gt 2 ]; then
  next=$PEERS
  while kill -0 "${pids[0]}" 2>/dev/null; do
    sleep "$CHURN_EVERY"
    kill -0 "${pids[0]}" 2>/dev/null || break
    victims=()
    for k in "${!pids[@]}"; do
      [ "$k" = 0 ] || [ "$k" = solo ] && continue
      kill -0 "${pids[$k]}" 2>/dev/null && victims+=("$k")
    done
    [ ${#victims[@]} -gt 0 ] || continue
    v=${victims[$((RANDOM % ${#victims[@]}))]}
    kill -KILL "${pids[$v]}" 2>/dev/null || true
    wait "${pids[$v]}" 2>/dev/null || true
    unset "pids[$v]"
    printf '{"rank": "peer %s", "time": %s, "event": "death"}\n' "$v" "$(date +%s.%N)" >>"$LOG"
    echo "churn: killed peer $v, starting peer $next"
    start_peer "$next"
    next=$((next + 1))
  done
fi
status=0
for k in "${!pids[@]}"; do wait "${pids[$k]}" || status=1; done
pids=()
kill "$TAILPID" 2>/dev/null || true
for f in "$OUT"/peer*.log; do
  echo
  echo "== $(basename "$f" .log)"
  grep -v '^listening' "$f" | tail -n 6 || true
done
echo
echo "== summary"
grep -h 'final:' "$OUT"/*.log || true
"$PY" - "$OUT" <<'PYEOF'
import glob, re, sys
def acc(path):
    text = open(path).read()
    m = re.search(r"held-out accuracy ([0-9.]+)", text.split("final:")[-1]) if "final:" in text else None
    return float(m.group(1)) if m else None
swarm = [a for a in (acc(p) for p in sorted(glob.glob(sys.argv[1] + "/peer*.log"))) if a is not None]
solo = glob.glob(sys.argv[1] + "/solo.log")
line = f"swarm: mean held-out accuracy {sum(swarm) / len(swarm):.4f} over {len(swarm)} peers" if swarm else "swarm: no peer finished"
if solo and acc(solo[0]) is not None:
    line += f"; one peer alone on its shard, same samples per epoch: {acc(solo[0]):.4f}"
print(line)
PYEOF
"$PY" scripts/swarm_plot.py "$LOG" "$OUT/swarm.png" || true
echo "logs: $OUT"
exit $status

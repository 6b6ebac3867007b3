#!/usr/bin/env bash
# capacity.sh: the measurements behind docs/capacity.md, one run at a time,
# each against server processes started for it and stopped after it:
#
#   1. base     SYSTEMS=ellipsis peers.sh, 2,000 conns / 400 rooms, 1 state change/s: the idle cost of every process
#   2. L1       the same, 500 state changes/s (rooms of 5: 4 frames per change)
#   3. L2       10,000 conns / 2,000 rooms, 2,000 state changes/s
#   4. fanout   2,000 conns / 40 rooms of 50, 10 % typing, 200 state changes/s (49 frames per change)
#   5. L2-2gw   L2 against two gateways, every room on both: each event read from Pub/Sub twice
#   6. idle     run.sh idle: 10,000 idle joined conns, the gateway's RSS per connection
#   7. pubsub   pubsub-cost.sh: Redis CPU per Pub/Sub delivery
#
# Summaries (JSON), the Ellipsis Redis's INFO commandstats and the console
# output go to $OUT_DIR (default bin/capacity). Ports: loopback, chosen away
# from peers.sh's and run.sh's defaults (set CAP_PORT_BASE to move them all).
#
#   tools/loadgen/capacity.sh            # ~8 minutes on 2 vCPUs
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
cd "$(dirname "$0")/../.."

OUT_DIR=${OUT_DIR:-bin/capacity}
BIN=${BIN:-bin}
DURATION=${DURATION:-20s}
P=${CAP_PORT_BASE:-17700}
mkdir -p "$OUT_DIR" "$BIN"
if [ -z "${NOBUILD:-}" ]; then
	go build -o "$BIN/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker \
		./tools/cmd/ellipsis-dev ./tools/cmd/ellipsis-loadgen
fi
export NOBUILD=1 BIN OUT_DIR SYSTEMS=ellipsis DURATION
export EL_HTTP=127.0.0.1:$((P + 0)) EL_GW_ADMIN=127.0.0.1:$((P + 1)) EL_WK_ADMIN=127.0.0.1:$((P + 2)) NATS_PORT=$((P + 3))
export EL_REDIS_PORT=$((P + 4)) CF_PORT=$((P + 5)) CF_REDIS_PORT=$((P + 6))

peers() { # name conns rooms rate share
	echo "== $1: $2 conns, $3 rooms, $4 state changes/s, typing share $5"
	LOAD=$1 CONNS=$2 ROOMS=$3 RATE=$4 SHARE=$5 tools/loadgen/peers.sh | tee "$OUT_DIR/ellipsis-$1.txt"
}
peers base 2000 400 1 0.5
peers L1 2000 400 500 0.5
peers L2 10000 2000 2000 0.5
peers fanout 2000 40 200 0.1

echo "== L2-2gw: L2 against two gateways"
redis=$(command -v redis-server)
nats=$(command -v nats-server)
pids=()
stop_all() {
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	pids=()
}
trap stop_all EXIT
"$redis" --bind 127.0.0.1 --port "$EL_REDIS_PORT" --save '' --appendonly no --maxclients 20000 >/dev/null 2>&1 &
pids+=($!)
r=$!
"$nats" -a 127.0.0.1 -p "$NATS_PORT" >/dev/null 2>&1 &
pids+=($!)
n=$!
sleep 0.5
env=(ELLIPSIS_REDIS_URL="redis://127.0.0.1:$EL_REDIS_PORT" ELLIPSIS_NATS_URL="nats://127.0.0.1:$NATS_PORT"
	ELLIPSIS_KEY_PREFIX="cap$$:" ELLIPSIS_SUBJECT_PREFIX="cap$$" ELLIPSIS_LOG_LEVEL=warn ELLIPSIS_AUTH=none ELLIPSIS_DEMO_PAGE=false)
env "${env[@]}" ELLIPSIS_ADMIN_ADDR="$EL_WK_ADMIN" "$BIN/presence-worker" >"$OUT_DIR/2gw-worker.log" 2>&1 &
pids+=($!)
w=$!
env "${env[@]}" ELLIPSIS_HTTP_ADDR="$EL_HTTP" ELLIPSIS_ADMIN_ADDR="$EL_GW_ADMIN" ELLIPSIS_MAX_CONNS=20000 "$BIN/gateway" >"$OUT_DIR/2gw-g1.log" 2>&1 &
pids+=($!)
g1=$!
env "${env[@]}" ELLIPSIS_HTTP_ADDR="127.0.0.1:$((P + 7))" ELLIPSIS_ADMIN_ADDR="127.0.0.1:$((P + 8))" ELLIPSIS_MAX_CONNS=20000 "$BIN/gateway" >"$OUT_DIR/2gw-g2.log" 2>&1 &
pids+=($!)
g2=$!
for _ in $(seq 100); do
	curl -fsS "http://$EL_GW_ADMIN/readyz" >/dev/null 2>&1 && curl -fsS "http://127.0.0.1:$((P + 8))/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
"$BIN/ellipsis-loadgen" -url "ws://$EL_HTTP/v1/ws,ws://127.0.0.1:$((P + 7))/v1/ws" -mode rate -conns 10000 -rooms 2000 -rate 2000 \
	-typing-share 0.5 -duration "$DURATION" -cpu-pids "$g1,$g2,$w,$n,$r" -json "$OUT_DIR/ellipsis-L2-2gw.json" -q | tee "$OUT_DIR/ellipsis-L2-2gw.txt"
stop_all

echo "== idle: 10,000 idle joined connections"
HTTP_ADDR=$EL_HTTP GW_ADMIN=$EL_GW_ADMIN WK_ADMIN=$EL_WK_ADMIN REDIS_PORT=$EL_REDIS_PORT OUT="$OUT_DIR/idle-10000.json" \
	tools/loadgen/run.sh idle 2>&1 | grep -v '"level":"warn"' | tee "$OUT_DIR/idle-10000.txt"

echo "== pubsub: Redis CPU per Pub/Sub delivery"
PORT=$EL_REDIS_PORT tools/loadgen/pubsub-cost.sh | tee "$OUT_DIR/pubsub-cost.txt"

#!/usr/bin/env bash
# sweep.sh: latency against load, for the README's plots (`make plots-sweep`,
# then `make plots`). Runs tools/loadgen/run.sh rate (the dev stack,
# ellipsis-dev, and a private redis-server, started and stopped per point)
# once per point, one run at a time, and keeps each summary JSON:
#
#   $OUT_DIR/rate-<R>.json     offered load: $RATE_CONNS connections in rooms
#                              of 10, all typing, R state changes/s in all
#                              (R in $RATES; at most 1 per user per second)
#   $OUT_DIR/conns-<C>.json    connections: C connections in rooms of 5, half
#                              of them typing at 0.5 state changes/s each
#                              (C/4 per second in all; C in $CONNS_LIST)
#
#   tools/loadgen/sweep.sh                          # both sweeps, 10 s per point (~5 to 10 minutes)
#   RATES="500 1000" CONNS_LIST= tools/loadgen/sweep.sh
#
# Run from the repository root. OUT_DIR defaults to docs/data/loadgen-sweep
# (committed, so `make plots` redraws without a new sweep); DURATION (10s)
# is the driven time per point. Extra arguments go to every ellipsis-loadgen run.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
cd "$(dirname "$0")/../.."

OUT_DIR=${OUT_DIR:-docs/data/loadgen-sweep}
RATES=${RATES-250 500 1000 1500 2000 3000 4000}
RATE_CONNS=${RATE_CONNS:-4000}
CONNS_LIST=${CONNS_LIST-1000 2000 5000 10000 15000}
DURATION=${DURATION:-10s}
BIN=${BIN:-bin}
export BIN

mkdir -p "$OUT_DIR" "$BIN"
if [ -z "${NOBUILD:-}" ]; then
	go build -o "$BIN/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker \
		./tools/cmd/ellipsis-dev ./tools/cmd/ellipsis-loadgen
fi
for r in $RATES; do
	echo "== sweep: $RATE_CONNS connections, $r state changes/s"
	OUT="$OUT_DIR/rate-$r.json" NOBUILD=1 tools/loadgen/run.sh rate -q -conns "$RATE_CONNS" -rooms $((RATE_CONNS / 10)) \
		-rate "$r" -duration "$DURATION" "$@"
done
for c in $CONNS_LIST; do
	echo "== sweep: $c connections, $((c / 4)) state changes/s"
	OUT="$OUT_DIR/conns-$c.json" NOBUILD=1 tools/loadgen/run.sh rate -q -conns "$c" -rooms $((c / 5)) -typing-share 0.5 \
		-rate $((c / 4)) -duration "$DURATION" "$@"
done

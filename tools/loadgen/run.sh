#!/usr/bin/env bash
# run.sh: the load generator's standard measurements, each against stack
# processes started here and stopped at the end (docs/benchmarks-loadgen.md).
#
#   tools/loadgen/run.sh rate     # 1,000 conns, 100 rooms, 2,000 state changes/s, 20 s, against ellipsis-dev
#   tools/loadgen/run.sh replay   # 1,000 conns, 100 rooms, real keystrokes, 60 s, against ellipsis-dev
#   tools/loadgen/run.sh fanout   # 1,000 conns in 1 room, 50 typing, 100 state changes/s: ~100,000 frames/s
#   tools/loadgen/run.sh idle     # 10,000 idle joined conns; the gateway (own process) RSS per connection
#   tools/loadgen/run.sh rate -duration 60s -rate 4000    # extra flags go to ellipsis-loadgen (the last wins)
#
# Run from the repository root. Binaries are built into $BIN (default bin/;
# NOBUILD=1 skips the build). The stack processes listen on loopback ports
# ($HTTP_ADDR, $GW_ADMIN, $WK_ADMIN), use a unique ELLIPSIS_KEY_PREFIX and
# ELLIPSIS_SUBJECT_PREFIX, the NATS and Redis of ELLIPSIS_NATS_URL /
# ELLIPSIS_REDIS_URL (ellipsis-dev: embedded NATS unless set), and
# $STACK_ENV (NAME=value words) on top, e.g. STACK_ENV="ELLIPSIS_STORE=keys"
# or "ELLIPSIS_OUTBOUND_QUEUE=16". Unless ELLIPSIS_REDIS_URL is set (or
# PRIVATE_REDIS=0), a private redis-server (no persistence) is started on
# 127.0.0.1:$REDIS_PORT (default 16390) for the run, so other users of a
# shared Redis do not move the figures; without redis-server installed the
# stack uses 127.0.0.1:6379 (or ellipsis-dev's embedded one).
# The summary's JSON goes to $OUT (default bin/loadgen-<mode>.json).
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

mode=${1:-}
case "$mode" in
rate | replay | fanout | idle) shift ;;
*)
	echo "usage: $0 rate|replay|fanout|idle [ellipsis-loadgen flags]" >&2
	exit 2
	;;
esac

BIN=${BIN:-bin}
OUT=${OUT:-$BIN/loadgen-$mode.json}
HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:18180}
GW_ADMIN=${GW_ADMIN:-127.0.0.1:19180}
WK_ADMIN=${WK_ADMIN:-127.0.0.1:19181}
STACK_ENV=${STACK_ENV:-}
CONNS=${CONNS:-10000} # idle only
ROOMS=${ROOMS:-1000}  # idle only

mkdir -p "$BIN" "$(dirname "$OUT")"
if [ -z "${NOBUILD:-}" ]; then
	go build -o "$BIN/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker \
		./tools/cmd/ellipsis-dev ./tools/cmd/ellipsis-loadgen
fi

prefix="lgrun$$"
pids=()
cleanup() { # stack first, Redis last: stop in reverse start order
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
}
trap cleanup EXIT

REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
if [ -z "${ELLIPSIS_REDIS_URL:-}" ] && [ "${PRIVATE_REDIS:-1}" = 1 ] && [ -n "$REDIS_SERVER" ]; then
	REDIS_PORT=${REDIS_PORT:-16390}
	"$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no >/dev/null &
	pids+=($!)
	export ELLIPSIS_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
	for _ in $(seq 50); do
		(echo >"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break
		sleep 0.1
	done
	if ! (echo >"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; then
		echo "$0: the private redis-server on 127.0.0.1:$REDIS_PORT did not start (port in use? set REDIS_PORT, or PRIVATE_REDIS=0)" >&2
		exit 1
	fi
fi
common=(ELLIPSIS_KEY_PREFIX="$prefix:" ELLIPSIS_SUBJECT_PREFIX="$prefix" ELLIPSIS_LOG_LEVEL=warn
	ELLIPSIS_AUTH=none ELLIPSIS_DEMO_PAGE=false ELLIPSIS_HTTP_ADDR="$HTTP_ADDR" ELLIPSIS_ADMIN_ADDR="$GW_ADMIN")

if [ "$mode" = idle ]; then
	# The gateway alone in its process, so its RSS is the gateway's.
	env "${common[@]}" ELLIPSIS_ADMIN_ADDR="$WK_ADMIN" $STACK_ENV "$BIN/presence-worker" &
	pids+=($!)
	env "${common[@]}" ELLIPSIS_MAX_CONNS=$((CONNS + 100)) $STACK_ENV "$BIN/gateway" &
else
	env "${common[@]}" ELLIPSIS_MAX_CONNS=20000 $STACK_ENV "$BIN/ellipsis-dev" >/dev/null &
fi
gw=$!
pids+=("$gw")
for _ in $(seq 100); do
	curl -fsS "http://$GW_ADMIN/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "http://$GW_ADMIN/readyz" >/dev/null

echo "== machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); stack pid $gw ($mode); redis ${ELLIPSIS_REDIS_URL:-default}"
lg=("$BIN/ellipsis-loadgen" -url "ws://$HTTP_ADDR/v1/ws" -json "$OUT" -scrape "http://$GW_ADMIN/metrics")
case "$mode" in
rate) lg+=(-mode rate -conns 1000 -rooms 100 -rate 2000 -duration 20s -rss-pid "$gw") ;;
replay) lg+=(-mode replay -conns 1000 -rooms 100 -duration 60s -rss-pid "$gw") ;;
fanout) lg+=(-mode rate -conns 1000 -rooms 1 -typing-share 0.05 -rate 100 -duration 10s -rss-pid "$gw") ;;
idle) lg+=(-mode idle -conns "$CONNS" -rooms "$ROOMS" -duration 20s -rss-pid "$gw" -q) ;;
esac
"${lg[@]}" "$@"

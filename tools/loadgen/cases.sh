#!/usr/bin/env bash
# cases.sh: the load generator's cases of issue 25, each a side-by-side
# comparison in one run against gateway and worker processes started here
# (docs/BENCHMARKS.md, "Big room, stalled readers, watchers: end to end").
#
#   tools/loadgen/cases.sh bigroom  # 10,000 members in 1 room, 200 typists at 0.5 changes/s:
#                                   # summary mode on (ELLIPSIS_ROOM_SUMMARY_MEMBERS 500), then off (20000)
#   tools/loadgen/cases.sh stall    # 100 of 500 connections stop reading for 25 s while their rooms churn
#                                   # (no stall; stall; stall with ELLIPSIS_WRITE_STALL=5s)
#   tools/loadgen/cases.sh watch    # 2 watchers of 500 rooms each among 5,000 members of 1,000 rooms
#   tools/loadgen/cases.sh bigroom -duration 20s   # extra flags go to every ellipsis-loadgen run (the last wins)
#
# Run from the repository root. The gateway and the worker run as their
# own processes (the gateway's CPU, from /proc, is the gateway's alone),
# with a private redis-server and a private nats-server on loopback ports
# ($REDIS_PORT, default 16391; $NATS_PORT, default 14291) unless
# ELLIPSIS_REDIS_URL / ELLIPSIS_NATS_URL are set, and a unique key and
# subject prefix per run. $STACK_ENV (NAME=value words) is added to both.
# Each run's JSON goes to $OUT_DIR (default bin/loadgen-<case>/), and the
# side-by-side table (ellipsis-loadgen -side) is printed at the end;
# ONLY=<run name> runs only that one. After
# each run the gateway's conflation, close and summary counters are printed.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

case_=${1:-}
case "$case_" in
bigroom | stall | watch) shift ;;
*)
	echo "usage: $0 bigroom|stall|watch [ellipsis-loadgen flags]" >&2
	exit 2
	;;
esac

BIN=${BIN:-bin}
OUT_DIR=${OUT_DIR:-$BIN/loadgen-$case_}
HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:18190}
GW_ADMIN=${GW_ADMIN:-127.0.0.1:19190}
WK_ADMIN=${WK_ADMIN:-127.0.0.1:19191}
STACK_ENV=${STACK_ENV:-}
mkdir -p "$BIN" "$OUT_DIR"
if [ -z "${NOBUILD:-}" ]; then
	go build -o "$BIN/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker ./tools/cmd/ellipsis-loadgen
fi

backends=() # private redis-server, nats-server
stack=()    # worker, gateway of the current run
stop_pids() { # stop_pids PID... (in reverse order)
	local i p=("$@")
	for ((i = ${#p[@]} - 1; i >= 0; i--)); do
		kill "${p[i]}" 2>/dev/null || true
		wait "${p[i]}" 2>/dev/null || true
	done
}
cleanup() {
	stop_pids "${stack[@]}"
	stop_pids "${backends[@]}"
}
trap cleanup EXIT

wait_port() { # wait_port PORT WHAT
	for _ in $(seq 50); do
		(echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "$0: $2 on 127.0.0.1:$1 did not start (port in use? set another)" >&2
	exit 1
}
if [ -z "${ELLIPSIS_REDIS_URL:-}" ] && command -v redis-server >/dev/null; then
	REDIS_PORT=${REDIS_PORT:-16391}
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no >/dev/null &
	backends+=($!)
	wait_port "$REDIS_PORT" redis-server
	export ELLIPSIS_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
fi
if [ -z "${ELLIPSIS_NATS_URL:-}" ] && command -v nats-server >/dev/null; then
	NATS_PORT=${NATS_PORT:-14291}
	nats-server -a 127.0.0.1 -p "$NATS_PORT" >/dev/null 2>&1 &
	backends+=($!)
	wait_port "$NATS_PORT" nats-server
	export ELLIPSIS_NATS_URL="nats://127.0.0.1:$NATS_PORT"
fi

gw=
# start_stack NAME=value...: a worker and a gateway with these settings on
# top of the common ones; sets $gw.
start_stack() {
	local prefix="lgcase$$x${#stack[@]}"
	local common=(ELLIPSIS_KEY_PREFIX="$prefix:" ELLIPSIS_SUBJECT_PREFIX="$prefix" ELLIPSIS_LOG_LEVEL=warn
		ELLIPSIS_AUTH=none ELLIPSIS_DEMO_PAGE=false ELLIPSIS_MAX_CONNS=12000)
	env "${common[@]}" ELLIPSIS_ADMIN_ADDR="$WK_ADMIN" "$@" $STACK_ENV "$BIN/presence-worker" &
	stack+=($!)
	env "${common[@]}" ELLIPSIS_HTTP_ADDR="$HTTP_ADDR" ELLIPSIS_ADMIN_ADDR="$GW_ADMIN" "$@" $STACK_ENV "$BIN/gateway" &
	gw=$!
	stack+=("$gw")
	local a
	for a in "$WK_ADMIN" "$GW_ADMIN"; do # the worker too: a join's snapshot needs it
		for _ in $(seq 100); do
			curl -fsS "http://$a/readyz" >/dev/null 2>&1 && break
			sleep 0.1
		done
		curl -fsS "http://$a/readyz" >/dev/null
	done
}
stop_stack() {
	stop_pids "${stack[@]}"
	stack=()
}
counters() { # the gateway's conflation, close and summary counters
	curl -fsS "http://$GW_ADMIN/metrics" 2>/dev/null | grep -E '^ellipsis_gateway_(conflat|write_stall|slow_consumer|room_summaries|summary_rooms|delivery_delay_seconds_(sum|count))' | sed 's/^/  /' || true
}

names=()
files=()
# run NAME [NAME=value...] -- [ellipsis-loadgen flags]: one run against a fresh stack.
run() {
	local name=$1 env=()
	shift
	while [ "$1" != -- ]; do
		env+=("$1")
		shift
	done
	shift
	if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then
		return 0
	fi
	start_stack "${env[@]}"
	echo "== $case_/$name: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); gateway pid $gw; ${env[*]}"
	"$BIN/ellipsis-loadgen" -url "ws://$HTTP_ADDR/v1/ws" -cpu-pids "$gw" -json "$OUT_DIR/$name.json" -q "$@"
	echo "  gateway counters at the end:"
	counters
	stop_stack
	names+=("$name")
	files+=("$OUT_DIR/$name.json")
}

case "$case_" in
bigroom)
	# ELLIPSIS_SNAPSHOT_MAX=500: a summary lists every typist of the 200
	# (the default 100 would leave the state of the others unseen).
	big=(-mode rate -conns 10000 -rooms 1 -typing-share 0.02 -rate 100 -duration 30s
		-settle 3s -settle-max 20s -state-sample 100 -dial-concurrency 128)
	run summary ELLIPSIS_SNAPSHOT_MAX=500 -- "${big[@]}" "$@"
	run events ELLIPSIS_SNAPSHOT_MAX=500 ELLIPSIS_ROOM_SUMMARY_MEMBERS=20000 -- "${big[@]}" "$@"
	;;
stall)
	# 500 connections in 5 rooms of 100, 50 typists each at 0.8 changes/s
	# (each member reads ~40 events/s): the same load without stalls, with
	# 40 % of the 250 listeners stalled for 25 s (below ELLIPSIS_WRITE_STALL,
	# 30 s: conflated, not closed), and with the write stall at 5 s (the
	# stalled are closed, reconnect and join again).
	st=(-mode rate -conns 500 -rooms 5 -typing-share 0.5 -rate 200 -duration 45s -settle 3s -settle-max 20s)
	stall=(-stall-share 0.4 -stall-at 10s -stall-for 25s)
	run no-stall -- "${st[@]}" "$@"
	run stall -- "${st[@]}" "${stall[@]}" "$@"
	run stall-closed ELLIPSIS_WRITE_STALL=5s -- "${st[@]}" "${stall[@]}" "$@"
	;;
watch)
	# 5,000 members of 1,000 rooms (2 typists each, 0.5 changes/s: 1,000
	# changes/s), then the same load with 2 watchers of 500 rooms from
	# half of the run.
	wa=(-mode rate -conns 5000 -rooms 1000 -typing-share 0.4 -rate 1000 -duration 40s -settle 3s -settle-max 20s)
	run no-watchers -- "${wa[@]}" "$@"
	run watchers -- "${wa[@]}" -watchers 2 -watch-rooms 500 -watch-at 20s "$@"
	;;
esac

echo
echo "== $case_: side by side"
"$BIN/ellipsis-loadgen" -side "$(
	IFS=,
	echo "${files[*]}"
)" -side-names "$(
	IFS=,
	echo "${names[*]}"
)"

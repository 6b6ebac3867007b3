#!/usr/bin/env bash
# peers.sh: the peer benchmark (`make bench-peers`, docs/BENCHMARKS.md,
# "Against Centrifugo"). The same workload, run by ellipsis-loadgen, first
# against Ellipsis (gateway and presence-worker as separate processes, a
# private nats-server, a private redis-server), then against Centrifugo v6
# with its Redis engine on another private redis-server, back to back;
# then one table: p50 / p99 / p99.9, delivered and lost, the server
# processes' CPU per state change, with the ratios Ellipsis / Centrifugo,
# and the RSS growth per connection of the process holding the
# connections (gateway; centrifugo).
#
#   tools/loadgen/peers.sh                 # L1: 2,000 conns / 400 rooms / 500 state changes/s, 15 s each
#   LOAD=L2 tools/loadgen/peers.sh         # L2: 10,000 / 2,000 / 2,000
#   LOAD=L3 DURATION=30s tools/loadgen/peers.sh   # L3: 15,000 / 3,000 / 5,000
#   LOAD=custom CONNS=200 ROOMS=40 RATE=50 DURATION=5s tools/loadgen/peers.sh
#   tools/loadgen/peers.sh -v              # extra flags go to both ellipsis-loadgen runs
#   SYSTEMS=ellipsis LOAD=L2 tools/loadgen/peers.sh   # Ellipsis only (docs/capacity.md): no Centrifugo, no table
#
# Workload (both systems): rooms of 5; half of the connections type (2 or
# 3 per room), the others only listen; each typing connection toggles
# start / stop at RATE / typing state changes per second (L1 0.5/s, L2
# 0.4/s, L3 0.67/s: a person's pace), far below the transition throttle.
# SHARE (default 0.5, above 0 and at most 1: ellipsis-loadgen
# -typing-share) is the share of connections that type. A typist that
# sends more than the transition throttle's burst of 4 plus 1 per second
# over the run has the surplus coalesced by contract (a `throttle`
# verdict), so a sweep that is to find the limit raises SHARE or CONNS.
# Centrifugo: every member subscribes to channel typing:<room> and
# publishes {"type":"typing_start"} / {"type":"typing_stop"} into it
# (namespace "typing", allow_subscribe_for_client and
# allow_publish_for_subscriber: the client-side publish setup of
# Centrifugo's docs). Both systems authenticate with an HS256 JWT per user.
#
# Centrifugo is built once from the Go module proxy at $CENTRIFUGO_VERSION
# into bin/peers/ (git-ignored, never committed) and reused while
# `bin/peers/centrifugo version` reports that version (stamped at build).
# Outputs, under $OUT_DIR (default bin/peers): ellipsis-<load>.json,
# centrifugo-<load>.json (each run's summary), peers-<load>.json (both
# with the ratios), ellipsis-<load>-redis.txt (the Ellipsis Redis's INFO
# commandstats and cpu at the end of the run: Redis time per command), and
# logs of every server process. SYSTEMS=ellipsis runs Ellipsis only.
# The worker runs with GOMAXPROCS=$WORKER_GOMAXPROCS (default 1), as in
# deploy/k8s, where its CPU limit is 1 and Go sets GOMAXPROCS from it;
# nats-server with GOMAXPROCS=$NATS_GOMAXPROCS (default 1), as it sets
# itself from the dev overlay's CPU limit of 1 (nats-server reads the CPU
# quota with automaxprocs; empty: every CPU of this machine); the
# gateway (GATEWAY_GOMAXPROCS, empty by default: its limit is 2) and
# Centrifugo use every CPU.
# WARMUP (default 10s, 30s above 10,000 connections) is how long both systems' connections stay joined
# and idle after connecting before typing is driven and measured
# (ellipsis-loadgen -warmup): without it, Centrifugo's p99 at 15,000
# connections was its connection burst's aftermath, not its steady state
# (docs/BENCHMARKS.md, "Is the harness fair to Centrifugo").
# BATCH_WINDOW is the gateway's ELLIPSIS_BATCH_WINDOW (0..50ms; unset: its
# default, 5ms; 0s: send at once) and WORKER_BATCH_WINDOW the worker's
# ELLIPSIS_WORKER_BATCH_WINDOW (unset: 0s); ELLIPSIS_WORKER_SHARDS in the
# environment reaches the worker (default 1).
# WINDOWS and RATES sweep the window and the rate in one invocation (the
# sweep's rules are below; docs/BENCHMARKS.md, "Batching window"):
#   WINDOWS="0s 1ms 2ms 5ms 10ms" SYSTEMS=ellipsis LOAD=L2 tools/loadgen/peers.sh
#   LOAD=L3 RATES="3000 4000 5000 7000" tools/loadgen/peers.sh   # capacity at p99 <= P99_TARGET (200) ms
# SERVER_CPUS and LOADGEN_CPUS (taskset CPU lists, e.g. 1 and 0, or 2-7
# and 0-1; unset: no pinning) pin every server process of both systems to
# one set of CPUs and the load generator to another, so the load
# generator's own CPU does not decide where either system saturates
# (docs/BENCHMARKS.md, "Third pass"):
#   SERVER_CPUS=1 LOADGEN_CPUS=0 LOAD=custom CONNS=15000 ROOMS=3000 RATES="2000 3000 4000" tools/loadgen/peers.sh
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
cd "$(dirname "$0")/../.."

CENTRIFUGO_VERSION=${CENTRIFUGO_VERSION:-v6.9.1}
LOAD=${LOAD:-L1}
case "$LOAD" in
L1) CONNS=${CONNS:-2000} ROOMS=${ROOMS:-400} RATE=${RATE:-500} ;;
L2) CONNS=${CONNS:-10000} ROOMS=${ROOMS:-2000} RATE=${RATE:-2000} ;;
L3) CONNS=${CONNS:-15000} ROOMS=${ROOMS:-3000} RATE=${RATE:-5000} ;;
*)
	# A sweep's rates stand in for RATE: the first is the single-run rate.
	if [ -z "${RATE:-}" ] && [ -n "${RATES:-}" ]; then
		RATE=${RATES%% *}
	fi
	if [ -z "${CONNS:-}" ] || [ -z "${ROOMS:-}" ] || [ -z "${RATE:-}" ]; then
		echo "$0: LOAD=$LOAD: L1, L2, L3, or CONNS, ROOMS and RATE (or RATES) all set" >&2
		exit 2
	fi
	;;
esac
DURATION=${DURATION:-15s}
# Centrifugo's tail at 15,000 connections settles only after about 30 s
# (docs/BENCHMARKS.md, "Second pass"); 10 s is enough at 10,000 and below.
case "$CONNS" in
'' | *[!0-9]*)
	echo "$0: CONNS=$CONNS: a number of connections" >&2
	exit 2
	;;
esac
if [ -z "${WARMUP:-}" ]; then
	if [ "$CONNS" -gt 10000 ]; then WARMUP=30s; else WARMUP=10s; fi
fi
WORKER_GOMAXPROCS=${WORKER_GOMAXPROCS:-1}
NATS_GOMAXPROCS=${NATS_GOMAXPROCS-1}
GATEWAY_GOMAXPROCS=${GATEWAY_GOMAXPROCS:-}
BATCH_WINDOW=${BATCH_WINDOW:-}
WORKER_BATCH_WINDOW=${WORKER_BATCH_WINDOW:-}
SYSTEMS=${SYSTEMS:-ellipsis,centrifugo}
case "$SYSTEMS" in
ellipsis | ellipsis,centrifugo) ;;
*)
	echo "$0: SYSTEMS=$SYSTEMS: ellipsis,centrifugo (default) or ellipsis" >&2
	exit 2
	;;
esac
# A sweep (WINDOWS and/or RATES, space-separated lists): one Ellipsis run
# per window and rate, one Centrifugo run per rate, then the sweep table
# (ellipsis-loadgen -sweep): each run against p99 <= P99_TARGET ms with
# nothing lost, each system's and window's capacity, the ratios to
# Centrifugo at the same rate. WINDOWS entries are Go durations or
# "default" (unset: BATCH_WINDOW); RATES unset: RATE.
WINDOWS=${WINDOWS:-}
RATES=${RATES:-}
P99_TARGET=${P99_TARGET:-200}
for w in $WINDOWS; do
	if ! [[ $w =~ ^(default|0|[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s))$ ]]; then
		echo "$0: WINDOWS: $w: a Go duration (0s, 500us, 2ms) or default" >&2
		exit 2
	fi
done
for r in $RATES; do
	if ! [[ $r =~ ^[1-9][0-9]*$ ]]; then
		echo "$0: RATES: $r: a whole number of state changes per second" >&2
		exit 2
	fi
done
if ! [[ $P99_TARGET =~ ^[0-9]+(\.[0-9]+)?$ ]] || [[ $P99_TARGET =~ ^0+(\.0+)?$ ]]; then
	echo "$0: P99_TARGET=$P99_TARGET: a positive number of milliseconds" >&2
	exit 2
fi
# on_servers and on_loadgen: the command prefixes that pin (taskset -c
# LIST) or nothing.
SERVER_CPUS=${SERVER_CPUS:-}
LOADGEN_CPUS=${LOADGEN_CPUS:-}
on_servers=()
on_loadgen=()
for v in SERVER_CPUS LOADGEN_CPUS; do
	list=${!v}
	[ -z "$list" ] && continue
	if ! [[ $list =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]]; then
		echo "$0: $v=$list: a CPU list as taskset -c takes it (0, 1-3, 0,2)" >&2
		exit 2
	fi
	if ! command -v taskset >/dev/null; then
		echo "$0: $v needs taskset (Debian: util-linux)" >&2
		exit 1
	fi
	if ! taskset -c "$list" true 2>/dev/null; then
		echo "$0: $v=$list: not CPUs this process may run on (this machine: $(nproc) CPUs, allowed $(taskset -cp $$ | sed 's/.*: //'))" >&2
		exit 2
	fi
	if [ "$v" = SERVER_CPUS ]; then on_servers=(taskset -c "$list"); else on_loadgen=(taskset -c "$list"); fi
done
SHARE=${SHARE:-0.5}
BIN=${BIN:-bin}
PEERS_BIN=${PEERS_BIN:-$BIN/peers}
OUT_DIR=${OUT_DIR:-$BIN/peers}
SECRET=${SECRET:-peers-bench-secret-$$}
# Loopback ports: all must be free (checked before anything starts).
EL_HTTP=${EL_HTTP:-127.0.0.1:18480}
EL_GW_ADMIN=${EL_GW_ADMIN:-127.0.0.1:19480}
EL_WK_ADMIN=${EL_WK_ADMIN:-127.0.0.1:19481}
NATS_PORT=${NATS_PORT:-14482}
EL_REDIS_PORT=${EL_REDIS_PORT:-16483}
CF_PORT=${CF_PORT:-18484}
CF_REDIS_PORT=${CF_REDIS_PORT:-16485}

REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || true)}
for b in "$REDIS_SERVER:redis-server" "$NATS_SERVER:nats-server"; do
	if [ -z "${b%%:*}" ]; then
		echo "$0: ${b#*:} not found: install it (Debian: apt-get install redis-server nats-server) or set ${b#*:}" >&2
		exit 1
	fi
done

# Open files: each server holds one descriptor per connection, the load
# generator one per connection too.
need=$((CONNS + 4096))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
	ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fi
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
	echo "$0: the open-file limit is $(ulimit -n) (hard $(ulimit -Hn)); $CONNS connections need $need: raise it (ulimit -n, /etc/security/limits.conf)" >&2
	exit 1
fi

port_free() { ! (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "${EL_HTTP##*:}" "${EL_GW_ADMIN##*:}" "${EL_WK_ADMIN##*:}" "$NATS_PORT" "$EL_REDIS_PORT" "$CF_PORT" "$CF_REDIS_PORT"; do
	if ! port_free "$p"; then
		echo "$0: 127.0.0.1:$p is in use: another run? set EL_HTTP, EL_GW_ADMIN, EL_WK_ADMIN, NATS_PORT, EL_REDIS_PORT, CF_PORT or CF_REDIS_PORT" >&2
		exit 1
	fi
done

mkdir -p "$BIN" "$PEERS_BIN" "$OUT_DIR"
if [ -z "${NOBUILD:-}" ]; then
	go build -o "$BIN/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker ./tools/cmd/ellipsis-loadgen
fi

# Centrifugo from the module proxy, outside the workspace (GOWORK=off, a
# temporary directory): its own go.mod and go.sum decide its dependencies.
CF="$PEERS_BIN/centrifugo"
if [ "$SYSTEMS" = ellipsis ]; then
	: # no Centrifugo
elif ! "$CF" version 2>/dev/null | grep -q "${CENTRIFUGO_VERSION#v}"; then
	echo "== building Centrifugo $CENTRIFUGO_VERSION into $PEERS_BIN (go install from the module proxy; several minutes the first time)"
	gobin=$(cd "$PEERS_BIN" && pwd)
	tmp=$(mktemp -d)
	# -X stamps the version as Centrifugo's release builds do (it is
	# "0.0.0" otherwise), so `centrifugo version` tells the cache's version.
	(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod GOBIN="$gobin" go install \
		-ldflags "-X github.com/centrifugal/centrifugo/v6/internal/build.Version=${CENTRIFUGO_VERSION#v}" \
		"github.com/centrifugal/centrifugo/v6@$CENTRIFUGO_VERSION")
	rmdir "$tmp"
	"$CF" version | grep -q "${CENTRIFUGO_VERSION#v}" || {
		echo "$0: $CF does not report $CENTRIFUGO_VERSION" >&2
		exit 1
	}
fi

pids=()
stop_all() { # reverse start order
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	pids=()
}
trap stop_all EXIT

wait_port() { # port name
	for _ in $(seq 100); do
		port_free "$1" || return 0
		sleep 0.1
	done
	echo "$0: $2 did not listen on 127.0.0.1:$1 (log: $OUT_DIR)" >&2
	exit 1
}
start_redis() { # port log
	"${on_servers[@]}" "$REDIS_SERVER" --bind 127.0.0.1 --port "$1" --save '' --appendonly no --daemonize no --maxclients 10000 >"$2" 2>&1 &
	pids+=($!)
	wait_port "$1" "redis-server"
}

# lg_common RATE: the load generator's flags for both systems at RATE, in lg.
lg_common() {
	lg=(-mode rate -conns "$CONNS" -rooms "$ROOMS" -rate "$1" -typing-share "$SHARE" -duration "$DURATION" -warmup "$WARMUP" -jwt-secret "$SECRET")
}

# run_ellipsis RATE WINDOW JSON [load generator flags]: Ellipsis (private
# Redis and NATS, worker, gateway) at RATE with the gateway's batch window
# WINDOW ('' or default: its default); the summary to JSON, Redis's INFO
# commandstats and cpu next to it (JSON without .json, then -redis.txt).
run_ellipsis() {
	local rate=$1 window=$2 json=$3
	shift 3
	[ "$window" = default ] && window=
	start_redis "$EL_REDIS_PORT" "$OUT_DIR/ellipsis-redis.log"
	local el_redis=${pids[-1]}
	"${on_servers[@]}" env ${NATS_GOMAXPROCS:+GOMAXPROCS=$NATS_GOMAXPROCS} "$NATS_SERVER" -a 127.0.0.1 -p "$NATS_PORT" >"$OUT_DIR/nats.log" 2>&1 &
	pids+=($!)
	local nats=$!
	wait_port "$NATS_PORT" nats-server
	local el_env=(ELLIPSIS_REDIS_URL="redis://127.0.0.1:$EL_REDIS_PORT" ELLIPSIS_NATS_URL="nats://127.0.0.1:$NATS_PORT"
		ELLIPSIS_KEY_PREFIX="peers$$:" ELLIPSIS_SUBJECT_PREFIX="peers$$" ELLIPSIS_LOG_LEVEL=warn
		ELLIPSIS_AUTH=jwt ELLIPSIS_JWT_SECRET="$SECRET" ELLIPSIS_DEMO_PAGE=false)
	"${on_servers[@]}" env "${el_env[@]}" GOMAXPROCS="$WORKER_GOMAXPROCS" ELLIPSIS_ADMIN_ADDR="$EL_WK_ADMIN" ${WORKER_BATCH_WINDOW:+ELLIPSIS_WORKER_BATCH_WINDOW=$WORKER_BATCH_WINDOW} \
		"$BIN/presence-worker" >"$OUT_DIR/worker.log" 2>&1 &
	pids+=($!)
	local worker=$!
	"${on_servers[@]}" env "${el_env[@]}" ${GATEWAY_GOMAXPROCS:+GOMAXPROCS=$GATEWAY_GOMAXPROCS} ELLIPSIS_HTTP_ADDR="$EL_HTTP" ELLIPSIS_ADMIN_ADDR="$EL_GW_ADMIN" ELLIPSIS_MAX_CONNS=$((CONNS + 100)) \
		${window:+ELLIPSIS_BATCH_WINDOW=$window} \
		"$BIN/gateway" >"$OUT_DIR/gateway.log" 2>&1 &
	pids+=($!)
	local gateway=$!
	for _ in $(seq 100); do
		curl -fsS "http://$EL_GW_ADMIN/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "http://$EL_GW_ADMIN/readyz" >/dev/null || {
		echo "$0: the gateway is not ready (log: $OUT_DIR/gateway.log)" >&2
		exit 1
	}
	echo "== Ellipsis at $rate/s, batch window ${window:-default}: gateway $gateway, worker $worker, nats-server $nats, redis-server $el_redis"
	lg_common "$rate"
	"${on_loadgen[@]}" "$BIN/ellipsis-loadgen" -system ellipsis -url "ws://$EL_HTTP/v1/ws" "${lg[@]}" -label "batch_window=${window:-default}" \
		-cpu-pids "$gateway,$worker,$nats,$el_redis" -rss-pid "$gateway" -json "$json" -q "$@"
	if command -v redis-cli >/dev/null; then
		redis-cli -p "$EL_REDIS_PORT" INFO commandstats >"${json%.json}-redis.txt"
		redis-cli -p "$EL_REDIS_PORT" INFO cpu >>"${json%.json}-redis.txt"
	fi
	stop_all
}

# run_centrifugo RATE JSON [load generator flags]: Centrifugo, its Redis
# engine on another private Redis, at RATE; the summary to JSON.
run_centrifugo() {
	local rate=$1 json=$2
	shift 2
	start_redis "$CF_REDIS_PORT" "$OUT_DIR/centrifugo-redis.log"
	local cf_redis=${pids[-1]}
	cat >"$OUT_DIR/centrifugo.json" <<CONFIG
{
  "http_server": {"address": "127.0.0.1", "port": $CF_PORT},
  "log": {"level": "error"},
  "usage_stats": {"disabled": true},
  "engine": {"type": "redis", "redis": {"address": ["redis://127.0.0.1:$CF_REDIS_PORT"]}},
  "client": {"token": {"hmac_secret_key": "$SECRET"}},
  "channel": {
    "namespaces": [
      {"name": "typing", "allow_subscribe_for_client": true, "allow_publish_for_subscriber": true}
    ]
  }
}
CONFIG
	"${on_servers[@]}" "$CF" --config "$OUT_DIR/centrifugo.json" >"$OUT_DIR/centrifugo.log" 2>&1 &
	pids+=($!)
	local cf=$!
	wait_port "$CF_PORT" centrifugo
	echo "== Centrifugo $CENTRIFUGO_VERSION at $rate/s: centrifugo $cf, redis-server $cf_redis"
	lg_common "$rate"
	"${on_loadgen[@]}" "$BIN/ellipsis-loadgen" -system centrifugo -url "ws://127.0.0.1:$CF_PORT/connection/websocket" "${lg[@]}" \
		-cpu-pids "$cf,$cf_redis" -rss-pid "$cf" -json "$json" -q "$@"
	stop_all
}

if [ -n "$WINDOWS$RATES" ]; then
	# --- A sweep: Ellipsis at every rate and window, Centrifugo at every
	# rate, then the sweep table.
	echo "== peers sweep $LOAD: $CONNS connections, $ROOMS rooms, rates ${RATES:-$RATE}, windows ${WINDOWS:-${BATCH_WINDOW:-default}}, typing share $SHARE, $DURATION each; $(nproc) CPUs${SERVER_CPUS:+, servers on CPUs $SERVER_CPUS}${LOADGEN_CPUS:+, load generator on CPUs $LOADGEN_CPUS}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	dir="$OUT_DIR/sweep-$LOAD"
	mkdir -p "$dir"
	files=()
	for r in ${RATES:-$RATE}; do
		for w in ${WINDOWS:-${BATCH_WINDOW:-default}}; do
			run_ellipsis "$r" "$w" "$dir/ellipsis-w$w-r$r.json" "$@"
			files+=("$dir/ellipsis-w$w-r$r.json")
		done
		if [ "$SYSTEMS" != ellipsis ]; then
			run_centrifugo "$r" "$dir/centrifugo-r$r.json" "$@"
			files+=("$dir/centrifugo-r$r.json")
		fi
	done
	"$BIN/ellipsis-loadgen" -sweep "$(IFS=,; echo "${files[*]}")" -load "$LOAD" -p99-target "$P99_TARGET" -json "$OUT_DIR/sweep-$LOAD.json"
	echo "JSON: $OUT_DIR/sweep-$LOAD.json (each run's: $dir)"
	exit 0
fi

echo "== peers $LOAD: $CONNS connections, $ROOMS rooms, $RATE state changes/s, typing share $SHARE, $DURATION each; $(nproc) CPUs${SERVER_CPUS:+, servers on CPUs $SERVER_CPUS}${LOADGEN_CPUS:+, load generator on CPUs $LOADGEN_CPUS}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
run_ellipsis "$RATE" "$BATCH_WINDOW" "$OUT_DIR/ellipsis-$LOAD.json" "$@"
if [ "$SYSTEMS" = ellipsis ]; then
	echo "JSON: $OUT_DIR/ellipsis-$LOAD.json; Redis INFO: $OUT_DIR/ellipsis-$LOAD-redis.txt"
	exit 0
fi
run_centrifugo "$RATE" "$OUT_DIR/centrifugo-$LOAD.json" "$@"

"$BIN/ellipsis-loadgen" -compare "$OUT_DIR/ellipsis-$LOAD.json,$OUT_DIR/centrifugo-$LOAD.json" -load "$LOAD" -json "$OUT_DIR/peers-$LOAD.json"
echo "JSON: $OUT_DIR/ellipsis-$LOAD.json, $OUT_DIR/centrifugo-$LOAD.json, $OUT_DIR/peers-$LOAD.json"

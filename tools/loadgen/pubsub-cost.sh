#!/usr/bin/env bash
# pubsub-cost.sh: what one Pub/Sub delivery costs Redis (docs/capacity.md).
# Starts a private redis-server (no persistence) on 127.0.0.1:$PORT, and
# for each K in $SUBS attaches K subscriber connections (redis-cli) to one
# channel, PUBLISHes $N messages of a room event's size (140 bytes) with
# redis-benchmark, and prints redis-server's CPU time (user + system, from
# /proc/<pid>/stat) per PUBLISH and Redis's own usec_per_call of PUBLISH
# (INFO commandstats). The growth with K is the cost per delivery.
#
#   tools/loadgen/pubsub-cost.sh                 # SUBS="0 1 5 10 20", N=200000
set -euo pipefail
PORT=${PORT:-16791}
SUBS=${SUBS:-0 1 5 10 20}
N=${N:-200000}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server)}
hz=$(getconf CLK_TCK)

"$REDIS_SERVER" --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --daemonize no >/dev/null &
redis=$!
subs=()
cleanup() {
	for p in "${subs[@]}"; do kill "$p" 2>/dev/null || true; done
	kill "$redis" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.1; done

cpu() { awk '{print $14 + $15}' "/proc/$redis/stat"; } # utime + stime, clock ticks
payload=$(printf '{"type":"typing_start","room":"room-000123","user":{"id":"user-0004567","name":"User 4567"},"seq":123456,"ts_ms":1764590000000,"ttl_ms":5000}' | head -c 140)
echo "subscribers  publishes  redis CPU µs/publish  usec_per_call(PUBLISH)  $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for k in $SUBS; do
	while [ "${#subs[@]}" -lt "$k" ]; do
		redis-cli -p "$PORT" SUBSCRIBE chat:room:r1 >/dev/null &
		subs+=($!)
	done
	for _ in $(seq 50); do
		[ "$(redis-cli -p "$PORT" PUBSUB NUMSUB chat:room:r1 | tail -1)" -ge "$k" ] && break
		sleep 0.1
	done
	redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
	before=$(cpu)
	redis-benchmark -p "$PORT" -c 4 -n "$N" -q PUBLISH chat:room:r1 "$payload" >/dev/null
	after=$(cpu)
	upc=$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_publish:.*usec_per_call=\([0-9.]*\).*/\1/p')
	awk -v k="$k" -v n="$N" -v t=$((after - before)) -v hz="$hz" -v u="$upc" \
		'BEGIN { printf "%11d  %9d  %20.2f  %22s\n", k, n, t / hz * 1e6 / n, u }'
done

#!/usr/bin/env bash
# Runs a command with a private Redis and a private NATS, for `make test`:
#
#   scripts/testenv.sh make unit js
#
# Each server is a child process of this script on a spare loopback port,
# with its data in a temporary directory, stopped when the command ends
# (whatever its outcome). The command gets their URLs in
# ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL, which every test reads,
# so no test depends on anything listening on 6379 or 4222.
#
# redis-server (Redis >= 7) and nats-server (>= 2.9) must be on PATH. When
# one is missing and this runs as root on a machine with apt-get, it
# installs Debian's package (redis-server, nats-server); otherwise, or when
# one is too old (scripts/check-tools.sh), it stops before starting anything
# and says what to install. Set ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL
# yourself to use servers of your own instead: then nothing is started.
set -euo pipefail

die() { echo "testenv: $*" >&2; exit 1; }

apt_updated=
need() { # need BINARY DEBIAN_PACKAGE HOMEBREW_FORMULA
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "testenv: $1 not found; installing Debian's $2" >&2
    if [ -z "$apt_updated" ]; then apt-get update -qq || die "apt-get update failed; install $2 yourself"; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null || die "apt-get install $2 failed; install it yourself"
    command -v "$1" >/dev/null 2>&1 && return 0
    die "Debian's $2 is installed, but $1 is not on PATH (Debian puts nats-server and redis-server in /usr/sbin or /usr/bin): add that directory to PATH"
  fi
  die "$1 is needed by the tests: install it (Debian/Ubuntu: apt-get install $2; macOS: brew install $3) or set ELLIPSIS_TEST_REDIS_URL and ELLIPSIS_TEST_NATS_URL"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# spare_port prints a loopback port that nothing listens on now. A server
# can still lose a race for it; start_on retries with another.
spare_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 30000))
    port_open "$p" || { echo "$p"; return 0; }
  done
  die "no spare loopback port found"
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/ellipsis-testenv.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_on NAME LOG CMD... : starts CMD (with {PORT} replaced) on a spare
# port and waits up to 10 s for it to listen; the port is left in
# started_port. Not to be called in a subshell: the server must stay this
# shell's child, for cleanup.
started_port=
start_on() {
  local name=$1 log=$2 port pid
  shift 2
  for _ in 1 2 3 4 5; do
    port=$(spare_port)
    local args=()
    for a in "$@"; do args+=("${a//\{PORT\}/$port}"); done
    "${args[@]}" >>"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      if port_open "$port"; then pids+=("$pid"); started_port=$port; return 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "testenv: $name did not start; its log ($log):" >&2
  tail -20 "$log" >&2 || true
  exit 1
}

# Both are needed even with servers of your own: the outage, Cluster and
# Sentinel tests start redis-server and nats-server themselves.
need redis-server redis-server redis
need nats-server nats-server nats-server
"$(dirname "$0")/check-tools.sh" redis-server nats-server

if [ -z "${ELLIPSIS_TEST_REDIS_URL:-}" ]; then
  start_on redis-server "$dir/redis.log" redis-server --bind 127.0.0.1 --port '{PORT}' \
    --save '' --appendonly no --dir "$dir" --daemonize no --loglevel warning
  export ELLIPSIS_TEST_REDIS_URL="redis://127.0.0.1:$started_port"
fi
if [ -z "${ELLIPSIS_TEST_NATS_URL:-}" ]; then
  mkdir -p "$dir/nats"
  start_on nats-server "$dir/nats.log" nats-server -a 127.0.0.1 -p '{PORT}' -js -sd "$dir/nats"
  export ELLIPSIS_TEST_NATS_URL="nats://127.0.0.1:$started_port"
fi
echo "testenv: Redis $ELLIPSIS_TEST_REDIS_URL, NATS $ELLIPSIS_TEST_NATS_URL" >&2

set +e
"$@"
rc=$?
set -e
exit "$rc"

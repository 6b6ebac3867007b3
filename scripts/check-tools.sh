#!/usr/bin/env bash
# Checks that the tools the tests run are recent enough, before any test
# starts, and stops at the first one that is not with one line saying what
# to install:
#
#   scripts/check-tools.sh node nats-server redis-server
#
# `make test` and `make test-quick` check node first; scripts/testenv.sh
# checks nats-server and redis-server before it starts them. The minimums
# and where they come from:
#
#   node          20.17  the JS tests run `node --disable-warning=...` and
#                        node:test's mock timers (Node 20.11; older: "bad
#                        option"), and @asyncapi/parser's @stoplight/spectral-*
#                        packages require 20.17 on the 20 line (README.md)
#   nats-server   2.9    the oldest the suite is run against (Debian 12's
#                        2.9.10); its flags (-js, -sd, -cluster_name, -n)
#                        need 2.2, older lines are not tested
#   redis-server  7.0    sharded Pub/Sub (SPUBLISH, SSUBSCRIBE) and the
#                        scripts' commands (docs/protocol.md, "Redis")
#
# The in-process NATS of `make run` and of some tests is the nats-server Go
# module (v2.15, go.mod); it needs nothing installed.
set -euo pipefail

die() { echo "check-tools: $*" >&2; exit 1; }

# version_ge A B: whether dotted version A >= B (numeric parts; a missing
# part is 0).
version_ge() {
  local IFS=.
  local -a a=($1) b=($2)
  local i x y
  for ((i = 0; i < ${#a[@]} || i < ${#b[@]}; i++)); do
    x=${a[i]:-0} y=${b[i]:-0}
    x=${x%%[!0-9]*} y=${y%%[!0-9]*}
    ((10#${x:-0} > 10#${y:-0})) && return 0
    ((10#${x:-0} < 10#${y:-0})) && return 1
  done
  return 0
}

# check NAME MIN VERSION_COMMAND... INSTALL_HINT: the last argument is the
# hint; the first number of the form N.N[.N] in the command's output is the
# version.
check() {
  local name=$1 min=$2 hint=${*: -1} out ver path
  local -a cmd=("${@:3:$#-3}")
  path=$(command -v "${cmd[0]}" 2>/dev/null) ||
    die "${cmd[0]} not found on PATH; the tests need $name >= $min: $hint"
  out=$("${cmd[@]}" 2>&1 || true)
  ver=$(grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' <<<"$out" | head -1 || true)
  [ -n "$ver" ] || die "cannot read the version of $path (\`${cmd[*]}\` printed: ${out:0:80}); the tests need $name >= $min: $hint"
  version_ge "$ver" "$min" ||
    die "$path is $name $ver; the tests need $name >= $min: $hint"
}

[ $# -gt 0 ] || set -- node nats-server redis-server
for tool in "$@"; do
  case $tool in
  node)
    check "Node.js" 20.17 node --version \
      "install Node.js 20.17 or newer, e.g. the 22 LTS (https://nodejs.org/en/download; Debian/Ubuntu: NodeSource's nodejs package, as Debian 12's own is 18; macOS: brew install node) and put it first on PATH" ;;
  nats-server)
    check "nats-server" 2.9 nats-server --version \
      "install a newer one (https://github.com/nats-io/nats-server/releases; Debian/Ubuntu: apt-get install nats-server; macOS: brew install nats-server) and put it first on PATH" ;;
  redis-server)
    check "Redis" 7.0 redis-server --version \
      "install Redis 7 or newer (Debian/Ubuntu: apt-get install redis-server, Debian 12 has 7.0; macOS: brew install redis) and put it first on PATH" ;;
  *) die "check-tools.sh: unknown tool $tool (node, nats-server, redis-server)" ;;
  esac
done

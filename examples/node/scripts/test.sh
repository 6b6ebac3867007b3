#!/usr/bin/env bash
# The Node.js examples of the platform hooks (examples/node), each run
# against a private stack: installs the pinned packages (npm ci), builds
# the dev stack binary (tools/cmd/ellipsis-dev) and runs node --test.
# Needs Node >= 20, Go, and the Redis and NATS named by
# ELLIPSIS_TEST_REDIS_URL / ELLIPSIS_TEST_NATS_URL (`make test` starts
# private ones; else 127.0.0.1:6379 and :4222). Logs of the stacks:
# examples/node/test-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

npm ci --prefer-offline --no-audit --no-fund --loglevel=error

bindir="$(mktemp -d "${TMPDIR:-/tmp}/ellipsis-examples-bin.XXXXXX")"
trap 'rm -rf "$bindir"' EXIT
(cd ../.. && go build -o "$bindir/" ./tools/cmd/ellipsis-dev)
export ELLIPSIS_EXAMPLES_DEV_BIN="$bindir/ellipsis-dev"

# Node 20 and 21 have the WebSocket client (which the tests' users need)
# behind a flag; 22 and later have it on.
flags=()
if [ "$(node -e 'process.stdout.write(typeof WebSocket)')" != function ]; then flags+=(--experimental-websocket); fi
# --test-timeout: a test that hangs fails instead of holding up `make test`;
# --test-force-exit: once every test has ended, a handle left open (a
# refresh timer of a showing a failed test never ended) cannot keep the
# run from finishing.
node "${flags[@]}" --disable-warning=ExperimentalWarning --test --test-reporter=spec --test-concurrency=1 --test-timeout=120000 --test-force-exit test/*.test.js

#!/usr/bin/env bash
# Every test of the browser SDK (clients/js), independent of the Makefile:
#   1. npm ci --prefer-offline (devDependencies only: playwright-core, typescript, @asyncapi/parser,
#      react, react-dom, esbuild for the React binding's tests)
#   2. types: tsc --strict on types/usage.ts against src/ellipsis.d.ts
#   3. unit tests (node --test, fake timers; docs/asyncapi.yaml parsed and
#      its examples validated) and the keystroke replay of
#      tools/keystrokes/data (events per message vs keystrokes)
#   4. the package as published: `npm pack` into a temporary folder (no
#      lifecycle scripts), its file list checked (LICENSE, README.md,
#      package.json, src/ only), the tarball installed offline into a scratch
#      project that imports it by name in Node (test/pack/pack.test.js)
#   5. end-to-end tests in headless Chromium against a real stack: builds
#      the gateway and presence-worker into a temporary folder and runs them
#      on free loopback ports with their own Redis key / NATS subject prefix
#      (and the dev stack, ellipsis-dev, for the demo page's chat service);
#      test/e2e/pack.test.js loads the packed tarball with an import map.
# Needs Node >= 20, Go, and the Redis and NATS named by
# ELLIPSIS_TEST_REDIS_URL / ELLIPSIS_TEST_NATS_URL (`make test` starts
# private ones; else 127.0.0.1:6379 and :4222). Installs Debian's chromium when /usr/bin/chromium
# (or $CHROMIUM) is missing. Artifacts (screenshots, service logs, replay
# figures): clients/js/test-artifacts/.
#
# ELLIPSIS_JS_SKIP_E2E=1 skips step 5 (step 4 still runs); ELLIPSIS_E2E_URL=<gateway URL> runs it
# against a stack that already runs (auth=none) instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export CHROMIUM

start=$SECONDS
step() { printf '\n== clients/js [%ss]: %s\n' "$((SECONDS - start))" "$*"; }

step "npm ci"
# --prefer-offline: packages already in npm's cache are used without asking
# the registry again, so a second run works offline (without it, npm retries
# the registry for about a minute per request before using its cache).
npm ci --prefer-offline --no-audit --no-fund --loglevel=error

mkdir -p test-artifacts
bindir="$(mktemp -d "${TMPDIR:-/tmp}/ellipsis-e2e-bin.XXXXXX")"
cleanup() {
  # Only this script's background jobs still running (tsc, go build).
  for p in $(jobs -pr); do kill "$p" 2>/dev/null || true; done
  rm -rf "$bindir"
}
trap cleanup EXIT

# Type check and Go build run beside the unit tests (two slow, independent steps).
npx --no-install tsc -p types/tsconfig.json >test-artifacts/tsc.log 2>&1 &
tsc_pid=$!
if [ "${ELLIPSIS_JS_SKIP_E2E:-}" != 1 ] && [ -z "${ELLIPSIS_E2E_URL:-}" ]; then
  (cd ../.. && go build -o "$bindir/" ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker ./tools/cmd/ellipsis-dev) \
    >test-artifacts/go-build.log 2>&1 &
  build_pid=$!
fi

step "unit tests and keystroke replay (node --test)"
node --disable-warning=ExperimentalWarning --test --test-reporter=spec test/unit/*.test.js test/replay/*.test.js

step "types (tsc --strict types/usage.ts)"
if ! wait "$tsc_pid"; then cat test-artifacts/tsc.log; echo "clients/js: type check failed" >&2; exit 1; fi
echo "ok"

step "npm pack, offline install into a scratch project, import in Node"
node --disable-warning=ExperimentalWarning --test --test-reporter=spec test/pack/*.test.js

if [ "${ELLIPSIS_JS_SKIP_E2E:-}" = 1 ]; then
  step "end-to-end tests skipped (ELLIPSIS_JS_SKIP_E2E=1)"
  exit 0
fi

if [ ! -x "$CHROMIUM" ]; then
  step "installing chromium (Debian package)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "clients/js: $CHROMIUM is missing and apt-get needs root" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  [ -x "$CHROMIUM" ] || { echo "clients/js: chromium installed but $CHROMIUM is missing (set CHROMIUM)" >&2; exit 1; }
fi

if [ -z "${ELLIPSIS_E2E_URL:-}" ]; then
  step "go build gateway + presence-worker + ellipsis-dev"
  if ! wait "$build_pid"; then cat test-artifacts/go-build.log; echo "clients/js: go build failed" >&2; exit 1; fi
  echo "ok"
fi

step "end-to-end tests (headless $("$CHROMIUM" --version 2>/dev/null | tail -n1))"
ELLIPSIS_E2E_BIN_DIR="$bindir" node --disable-warning=ExperimentalWarning --test --test-reporter=spec --test-concurrency=1 test/e2e/*.test.js

step "all passed in $((SECONDS - start)) s; artifacts in clients/js/test-artifacts/"

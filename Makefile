# Ellipsis: the two commands a new user runs are `make run` and `make test`.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
# Every module of the workspace (go.work); `go test ./...` at the root would
# test none of them.
MODULES := shared deploy services/gateway services/presence-worker clients/js tools tools/release test examples/go testkit testkit/inproc
# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# fail a clean run with "context deadline exceeded" at the deadline on a
# loaded machine (golang/go#75804, fixed in Go 1.27). 50000 inputs: 1-10 s each.
FUZZTIME ?= 50000x
# The version stamped into binaries by `make build`: the git tag, or the
# commit, "-dirty" when the tree has changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit stamped beside it (Go's own vcs stamping is off where
# GOFLAGS=-buildvcs=false, and an image build has no .git).
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/ellipsis-chat/ellipsis/shared/buildinfo

.PHONY: run demo build release-snapshot release test test-quick quick-go quick-js check-tools test-all vet tidy-check readme-images config-doc unit fuzz-smoke js examples-node bench bench-peers loadgen loadgen-replay loadgen-fanout loadgen-idle loadgen-bigroom loadgen-stall loadgen-watch plots plots-sweep fmt

## run: start the dev stack (gateway + worker, embedded NATS, Redis or an embedded one) on :8080, admin :9090
run:
	$(GO) run ./tools/cmd/ellipsis-dev

## demo: three scripted users replay real keystrokes against the running stack
demo:
	$(GO) run ./tools/cmd/ellipsis-demo $(DEMO_ARGS)

## loadgen*: the load generator against a stack on loopback (see tools/README.md, docs/BENCHMARKS.md)
loadgen:
	tools/loadgen/run.sh rate
loadgen-replay:
	tools/loadgen/run.sh replay
loadgen-fanout:
	tools/loadgen/run.sh fanout
loadgen-idle:
	tools/loadgen/run.sh idle
## loadgen-bigroom, -stall, -watch: issue 25's cases, each side by side in one run (tools/loadgen/cases.sh; about 2 min each)
loadgen-bigroom:
	tools/loadgen/cases.sh bigroom
loadgen-stall:
	tools/loadgen/cases.sh stall
loadgen-watch:
	tools/loadgen/cases.sh watch

## plots: the README's latency-against-load SVGs (docs/img/latency-vs-*.svg) from the committed sweep (docs/data/loadgen-sweep)
plots:
	cd tools && $(GO) run ./cmd/ellipsis-plots -data ../docs/data/loadgen-sweep -out ../docs/img
## plots-sweep: run the load sweep first (tools/loadgen/sweep.sh, 12 runs of 10 s, one at a time), then draw
plots-sweep:
	tools/loadgen/sweep.sh
	$(MAKE) --no-print-directory plots

## bench: the hot-path benchmarks (codec, enc, fan-out, worker command path and stores against real Redis)
bench:
	cd shared && $(GO) test -run '^$$' -bench . -benchmem ./protocol ./names
	cd services/gateway && $(GO) test -run '^$$' -bench 'FanOut|Written' -benchmem ./internal/hub ./internal/metrics
	cd services/presence-worker && $(GO) test -run '^$$' -bench . -benchmem ./worker ./internal/store

## bench-peers: the same typing workload against Ellipsis, then against Centrifugo v6 (built from the Go module proxy
## into bin/peers, cached), back to back, and one table with the ratios (docs/BENCHMARKS.md, "Against Centrifugo").
## LOAD=L1 (default: 2,000 conns) | L2 (10,000) | L3 (15,000) | custom with CONNS= ROOMS= RATE=; DURATION=15s; PEERS_ARGS= go to the load generator;
## BATCH_WINDOW=0s sets the gateway's ELLIPSIS_BATCH_WINDOW (default 5ms), WORKER_BATCH_WINDOW=2ms the worker's (default 0s);
## a sweep in one invocation: WINDOWS="0s 2ms 5ms" and/or RATES="3000 5000 7000" (P99_TARGET=200 ms: each system's capacity)
## SHARE=0.5 the share of connections that type (raise it to sweep past the throttle); SERVER_CPUS=1 LOADGEN_CPUS=0 pin both systems' servers to one CPU list and the load generator to another (taskset)
bench-peers:
	tools/loadgen/peers.sh $(PEERS_ARGS)

## build: build every binary into bin/, stamped with VERSION and REVISION (-version, ellipsis_build_info)
build:
	mkdir -p bin
	$(GO) build -ldflags "-X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION)" -o bin/ ./services/gateway/cmd/gateway ./services/presence-worker/cmd/presence-worker ./tools/cmd/ellipsis-dev ./tools/cmd/ellipsis-demo ./tools/cmd/ellipsis-loadgen ./tools/cmd/ellipsis-token

## release-snapshot: the release, dry run: into dist/, nothing published, any commit (VERSION: git describe + -snapshot).
## Binaries for linux and darwin on amd64 and arm64 (.tar.gz), a CycloneDX SBOM each, a multi-arch OCI image per
## service (an OCI archive: podman load -i), SHA256SUMS and artifacts.json; tools/release, docs/releasing.md.
## RELEASE_ARGS go to the tool (e.g. -platforms linux/amd64 -services gateway, -base REF).
release-snapshot:
	cd tools/release && $(GO) run ./cmd/ellipsis-release -root ../.. -snapshot $(RELEASE_ARGS)

## release: the same for a commit tagged vX.Y.Z with a clean tree, and push both images to IMAGE_REPO
## (docs/releasing.md: then upload dist/*.tar.gz, *.cdx.json, *_oci.tar and SHA256SUMS to the GitHub release)
IMAGE_REPO ?= ghcr.io/ellipsis-chat
release:
	cd tools/release && $(GO) run ./cmd/ellipsis-release -root ../.. -push -image-repo $(IMAGE_REPO) $(RELEASE_ARGS)

## test: vet, go.mod tidiness, every module's tests with -race, a short run of each fuzz target, and the JS SDK's
## unit, replay and Chromium tests, against a private Redis and NATS that scripts/testenv.sh starts on spare ports.
## A failing step does not stop the others (--keep-going): one run shows every failure, and make still fails.
## First checks Node (>= 20.17), nats-server (>= 2.9) and Redis (>= 7): one line names what to install.
## About 16 min on a 2-core machine (CI: 960 s).
test: check-tools
	scripts/testenv.sh $(MAKE) --no-print-directory --keep-going test-all

## test-quick: the inner loop: every module's tests with -short and without -race, and the JS SDK's unit and
## replay tests; no Chromium, vet, tidy check or fuzzing (make test runs them). Same private Redis and NATS.
test-quick: check-tools
	scripts/testenv.sh $(MAKE) --no-print-directory --keep-going quick-go quick-js

## check-tools: Node's version (scripts/check-tools.sh); scripts/testenv.sh checks nats-server's and Redis's
## itself, after installing Debian's packages where they are missing (as root with apt-get)
check-tools:
	@scripts/check-tools.sh node

# Module by module, as unit does: the failed modules are listed at the end.
quick-go:
	@failed=; for m in $(MODULES); do echo "== test -short $$m"; (cd $$m && $(GO) test -short -timeout 10m ./...) || failed="$$failed $$m"; done; \
	  if [ -n "$$failed" ]; then echo "== FAILED in:$$failed"; exit 1; fi

quick-js:
	cd clients/js && npm ci --prefer-offline --no-audit --no-fund --loglevel=error && \
	  node --disable-warning=ExperimentalWarning --test test/unit/*.test.js test/replay/*.test.js

test-all: vet tidy-check unit fuzz-smoke js examples-node

vet:
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && $(GO) vet ./...); done
	@set -e; for m in shared services/gateway services/presence-worker tools tools/release examples/go testkit testkit/inproc; do (cd $$m && GOWORK=off $(GO) build ./...); done; echo "== every module builds alone (GOWORK=off)"

## tidy-check: every module's go.mod and go.sum are as `go mod tidy` leaves them
tidy-check:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod/go.sum not tidy: run (cd $$m && go mod tidy)"; exit 1; }; done; echo "== every module is tidy"

## unit: every module's tests, all of them even when one fails; the failed modules are listed at the end
unit:
	@failed=; for m in $(MODULES); do echo "== test $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 10m ./...) || failed="$$failed $$m"; done; \
	  if [ -n "$$failed" ]; then echo "== FAILED in:$$failed"; exit 1; fi

fuzz-smoke:
	@set -e; cd shared; for t in FuzzDecodeClientFrame FuzzDecodeCommand FuzzDecodeCommands FuzzDecodeRoomEvent FuzzClientFrameScan FuzzCommandScan FuzzRoomEventScan FuzzAppendCommand FuzzDecodeSnapshotReply FuzzDecodeUserIDs; do \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./protocol; done; \
	  for t in FuzzEnc FuzzNames FuzzRoomToken; do \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./names; done

## config-doc: write docs/configuration.md's table from the settings table (shared/config/settings.go)
config-doc:
	cd shared && $(GO) run ./config/cmd/configdoc -doc ../docs/configuration.md

## readme-images: copy the two-tabs screenshot that the Chromium test made (make js) into docs/img for the README
readme-images:
	@test -f clients/js/test-artifacts/two-tabs.png || { echo "no clients/js/test-artifacts/two-tabs.png: run make js (or make test) first"; exit 1; }
	cp clients/js/test-artifacts/two-tabs.png docs/img/two-tabs.png

## js: the browser SDK's tests (node --test, keystroke replay, headless Chromium end to end; installs Chromium when missing)
js:
	clients/js/scripts/test.sh

## examples-node: the Node.js examples of the platform hooks (examples/node), each against a private stack;
## the Go examples (examples/go) run in unit
examples-node:
	examples/node/scripts/test.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

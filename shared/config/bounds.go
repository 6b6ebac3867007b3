package config

import "time"

// Bounds of the settings that a promise of docs/protocol.md depends on,
// each derived from the promise it keeps. TestPromisesHoldAtTheBounds
// (promises_test.go) quotes every promise from docs/protocol.md and checks
// it arithmetically at the smallest and largest values Validate accepts.
const (
	// expirySlack is the slack docs/protocol.md allows after ttl for an
	// expired entry's `typing_stop` `expired` ("within ttl + 1 s",
	// "Timing") and after throttle for the trailing edge ("within
	// throttle + 1 s", "Throttle").
	expirySlack = time.Second
	// deliveryAllowance is the part of expirySlack kept for what follows a
	// sweep tick: the sweep script's round trip to Redis, the Pub/Sub
	// fan-out to the gateways and the write to each client.
	deliveryAllowance = 500 * time.Millisecond
	// maxSweepInterval is ELLIPSIS_SWEEP_INTERVAL's ceiling: an entry
	// expiring at T is pushed by T + the interval + the delivery, so the
	// interval may take what the delivery leaves of the slack. The trailing
	// edge (throttle/2 + the interval) and the user hash's lifetime (ttl +
	// 10 s + throttle) are kept a fortiori.
	maxSweepInterval = expirySlack - deliveryAllowance

	// maxTypingTimer is the ceiling of ttl, throttle, refresh and idle
	// stop: clients time them from GET /v1/config and `ttl_ms` with
	// setTimeout, which holds at most 2^31−1 ms (about 24.8 days; a longer
	// delay fires at once), after the JS SDK adds its 1 s grace to ttl_ms.
	maxTypingTimer = 24 * time.Hour

	// maxShutdownWindow is the ceiling of the lame duck and of the drain:
	// the gateway's shutdown deadline, 2 × (lame duck + drain) + 10 s
	// (services/gateway/cmd/gateway), stays within what a rolling update
	// waits for (terminationGracePeriodSeconds ≥ preStop + lame duck +
	// drain + 10 s, docs/protocol.md "Outages and shutdown").
	maxShutdownWindow = 5 * time.Minute

	// HTTPWriteTimeout is the gateway's deadline for writing each HTTP
	// answer (net/http.Server.WriteTimeout), counted from the end of the
	// request's headers: a 401 after a JWKS fetch, a 503 after the snapshot
	// timeout, and every other answer must be written before it, or the
	// client gets a reset instead of the JSON error docs/protocol.md
	// promises.
	HTTPWriteTimeout = 30 * time.Second
	// answerMargin is kept under HTTPWriteTimeout for the gateway's own work
	// and the write of the answer.
	answerMargin = time.Second
	// maxJWKSTimeout and maxSnapshotTimeout are the ceilings of
	// ELLIPSIS_JWKS_TIMEOUT and ELLIPSIS_SNAPSHOT_TIMEOUT: an HTTP snapshot
	// read may wait for one JWKS fetch (a token naming an unknown kid) and
	// then for the authorisation and the snapshot (which share the snapshot
	// timeout), and its answer must still be written within
	// HTTPWriteTimeout − answerMargin.
	maxJWKSTimeout     = 15 * time.Second
	maxSnapshotTimeout = 10 * time.Second

	// maxBatchWindow is the ceiling of ELLIPSIS_BATCH_WINDOW and
	// ELLIPSIS_WORKER_BATCH_WINDOW: a command waits at most one window at
	// the gateway (NATS batch) and one at the worker (Redis pipeline), so
	// two windows of 50 ms keep the added latency
	// within half of the 200 ms end-to-end budget of a typing change
	// (issue 22), far below the throttle and the ttl.
	maxBatchWindow = 50 * time.Millisecond

	// maxPongWait is ELLIPSIS_PONG_WAIT's ceiling: a peer silent for an
	// hour is gone for any client, and the ping period (9/10 of the wait)
	// and the read deadlines stay far from time.Duration's range.
	maxPongWait = time.Hour
)

// minFrameBytes is ELLIPSIS_MAX_FRAME_BYTES's floor: docs/protocol.md
// promises that any room id of 1..256 bytes works end to end, and the
// longest client frame with the room and request id at their limits
// (protocol.MaxIDBytes, protocol.MaxRequestIDBytes), every byte one JSON
// escapes to 2 (`"`, `\`), is 809 bytes as JSON.stringify writes it. An
// encoder that escapes non-ASCII or HTML characters as \uXXXX can need up
// to 2345 bytes; the default (4096) takes that, and docs/protocol.md says
// so.
const minFrameBytes = 1024

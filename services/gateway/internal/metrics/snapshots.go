package metrics

import "github.com/prometheus/client_golang/prometheus"

// Snapshot outcomes (label result of ellipsis_gateway_snapshots_total):
// one per asker of a room's snapshot (join, sync, a push after an
// overflow, a resync, GET /v1/rooms/{room}/typing).
const (
	// SnapshotRequested: the asker started or queued a request to the
	// workers (one per request sent).
	SnapshotRequested = "requested"
	// SnapshotShared: the asker was served by a request another asker had
	// started or queued (docs/protocol.md, "Snapshots").
	SnapshotShared = "shared"
	// SnapshotRateLimited: the asker was over its snapshot budget
	// (ELLIPSIS_SNAPSHOT_RATE per user on WebSocket, ELLIPSIS_HTTP_SNAPSHOT_RATE
	// per user on HTTP); no request was sent.
	SnapshotRateLimited = "rate_limited"
)

func newSnapshotsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem, Name: "snapshots_total",
		Help: "Askers of a room's typing snapshot by result: requested (a request sent to the workers), shared (served by another asker's request), rate_limited (over the snapshot budget, nothing sent).",
	}, []string{"result"})
}

// snapshotResults are the label values of snapshots_total.
var snapshotResults = labelSet(SnapshotRequested, SnapshotShared, SnapshotRateLimited)

// Snapshot counts one asker of a snapshot; result is one of the
// Snapshot* constants (anything else counts as [LabelOther]).
func (m *Metrics) Snapshot(result string) {
	m.snapshots.WithLabelValues(bounded(snapshotResults, result)).Inc()
}

// SnapshotsCounter is the counter of result (one of the Snapshot*
// constants), for tests and reports.
func (m *Metrics) SnapshotsCounter(result string) prometheus.Counter {
	return m.snapshots.WithLabelValues(bounded(snapshotResults, result))
}

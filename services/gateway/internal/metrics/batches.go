package metrics

import "github.com/prometheus/client_golang/prometheus"

// Command batch outcomes (label outcome of
// ellipsis_gateway_command_batches_total), with ELLIPSIS_BATCH_WINDOW > 0.
const (
	// BatchSent: the batch was handed to NATS.
	BatchSent = "sent"
	// BatchFailed: NATS refused the batch (the connection was lost while
	// it waited); its commands are lost and counted in commands_unsent_total.
	BatchFailed = "failed"
)

// Reasons of ellipsis_gateway_commands_unsent_total.
const (
	// UnsentBatchFailed: the command's batch was refused by NATS.
	UnsentBatchFailed = "batch_failed"
	// UnsentQueueFull: the command was refused (its client answered
	// unavailable) because 16 full batches waited for a blocked NATS write.
	UnsentQueueFull = "queue_full"
)

// Batches counts the gateway's command batches (docs/protocol.md,
// "Command batches"); it implements backend.BatchMetrics. Its series are
// exported as zero from the start, also with batching off.
type Batches struct {
	batches *prometheus.CounterVec
	size    prometheus.Histogram
	unsent  *prometheus.CounterVec
}

// NewBatches creates the batch metrics and registers them on reg.
func NewBatches(reg prometheus.Registerer) (*Batches, error) {
	b := &Batches{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "command_batches_total",
			Help: "Command batches on NATS (ELLIPSIS_BATCH_WINDOW > 0) by outcome: sent, failed (refused by NATS, its commands lost).",
		}, []string{"outcome"}),
		size: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "command_batch_commands",
			Help:    "Commands per command batch sent on NATS.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1..256
		}),
		unsent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem, Name: "commands_unsent_total",
			Help: "Commands of batching not sent: batch_failed (their batch was refused by NATS: lost), queue_full (refused at once, answered unavailable).",
		}, []string{"reason"}),
	}
	for _, o := range []string{BatchSent, BatchFailed} {
		b.batches.WithLabelValues(o)
	}
	for _, r := range []string{UnsentBatchFailed, UnsentQueueFull} {
		b.unsent.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{b.batches, b.size, b.unsent} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// BatchSent counts a batch of n commands handed to NATS.
func (b *Batches) BatchSent(n int) {
	b.batches.WithLabelValues(BatchSent).Inc()
	b.size.Observe(float64(n))
}

// BatchFailed counts a batch of n commands that NATS refused.
func (b *Batches) BatchFailed(n int) {
	b.batches.WithLabelValues(BatchFailed).Inc()
	b.unsent.WithLabelValues(UnsentBatchFailed).Add(float64(n))
}

// CommandRefused counts a command refused because the batch queue was full.
func (b *Batches) CommandRefused() { b.unsent.WithLabelValues(UnsentQueueFull).Inc() }

// BatchesCounter is the counter of outcome (BatchSent, BatchFailed), for tests.
func (b *Batches) BatchesCounter(outcome string) prometheus.Counter {
	return b.batches.WithLabelValues(outcome)
}

// UnsentCounter is the counter of reason (Unsent*), for tests.
func (b *Batches) UnsentCounter(reason string) prometheus.Counter {
	return b.unsent.WithLabelValues(reason)
}

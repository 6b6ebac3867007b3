package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
)

// NATS error kinds (label kind of ellipsis_gateway_nats_errors_total): the
// kinds package natsconn reports.
const (
	NATSDisconnect   = natsconn.KindDisconnect   // "disconnect": the connection to NATS was lost (nats.go reconnects)
	NATSSlowConsumer = natsconn.KindSlowConsumer // "slow_consumer": a subscription (the reply inbox) dropped messages
	NATSAsync        = natsconn.KindAsync        // "async": any other asynchronous error nats.go reported (credentials refused included)
)

// NATS counts the trouble of the gateway's NATS connection. The log lines
// about it are rate-limited; the counter is not.
type NATS struct {
	errors    *prometheus.CounterVec // label kind
	connected atomic.Pointer[func() bool]
}

// NewNATS creates the NATS metrics and registers them on reg.
func NewNATS(reg prometheus.Registerer) (*NATS, error) {
	n := &NATS{errors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem, Name: "nats_errors_total",
		Help: "NATS problems by kind: disconnect, slow_consumer, async.",
	}, []string{"kind"})}
	if err := reg.Register(n.errors); err != nil {
		return nil, err
	}
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem, Name: "nats_connected",
		Help: "1 while the gateway's NATS connection is up, 0 while it is down or reconnecting (and before Start).",
	}, func() float64 {
		if f := n.connected.Load(); f != nil && (*f)() {
			return 1
		}
		return 0
	})
	if err := reg.Register(up); err != nil {
		return nil, err
	}
	for _, k := range []string{NATSDisconnect, NATSSlowConsumer, NATSAsync} {
		n.errors.WithLabelValues(k) // export zeros, for alerts on rate()
	}
	return n, nil
}

// Error counts one NATS problem of kind (one of the NATS* constants).
func (n *NATS) Error(kind string) { n.errors.WithLabelValues(kind).Inc() }

// WatchConnection makes ellipsis_gateway_nats_connected report connected()
// from now on; it is read at every scrape, so it must not block (nats.go's
// IsConnected takes the connection's lock only).
func (n *NATS) WatchConnection(connected func() bool) { n.connected.Store(&connected) }

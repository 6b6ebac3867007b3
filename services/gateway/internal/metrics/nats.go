package metrics

import (
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

// NATS counts the trouble of the gateway's NATS connection
// (ellipsis_gateway_nats_errors_total) and reports whether it is up
// (ellipsis_gateway_nats_connected).
type NATS = natsconn.Metrics

// NewNATS creates the gateway's NATS metrics and registers them on reg.
func NewNATS(reg prometheus.Registerer) (*NATS, error) {
	return natsconn.NewMetrics(reg, natsconn.MetricsOpts{
		Namespace: Namespace, Subsystem: Subsystem, Service: "gateway", ZeroBefore: "Start",
		Kinds: []string{NATSDisconnect, NATSSlowConsumer, NATSAsync},
	})
}

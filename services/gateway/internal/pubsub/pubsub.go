// Package pubsub owns the gateway's subscriptions to room channels: which
// channels are subscribed, on which connection ("link"), whether each link
// is alive, and what to resync when one comes back. The hub (rooms, holds,
// fan-out) sees only the [Broker] interface, in the spirit of centrifuge's
// Broker (github.com/centrifugal/centrifuge, broker.go): subscribe with a
// confirmation, unsubscribe, a callback per message and one per restored
// link.
//
// [Redis] is the implementation on Redis Pub/Sub (standalone, Sentinel and
// Cluster, classic or sharded); [Memory] is an in-memory one for tests of
// the hub's logic.
package pubsub

import (
	"context"
	"errors"
)

// Errors of [Broker.Subscribe].
var (
	// ErrUnavailable: the subscription is not confirmed (its link is down,
	// or the server did not confirm it before the caller's deadline).
	ErrUnavailable = errors.New("pubsub: subscription unavailable")
	// ErrRefused: the server answered the channel's (S)SUBSCRIBE with an
	// error reply (an ACL without the channel's pattern: NOPERM). Errors
	// wrapping it wrap [ErrUnavailable] too.
	ErrRefused = errors.New("pubsub: subscription refused by the server")
	// ErrClosed: the broker is closed.
	ErrClosed = errors.New("pubsub: closed")
)

// Handler receives what the broker's links read. Its methods are called
// from the links' reader goroutines, one message at a time per link, and
// must not block on I/O or call back into the broker.
type Handler interface {
	// HandleMessage is one message published on a subscribed channel.
	HandleMessage(channel, payload string)
	// HandleRestored names channels whose messages may have been lost (a
	// link was down, a Sentinel master switch, a Cluster slot moved) and
	// that are subscribed and confirmed again now: the hub resyncs their
	// rooms. Channels of links that stayed up are never named.
	HandleRestored(channels []string)
}

// Broker is the subscription side of a Pub/Sub backplane.
//
// Subscriptions are counted: every Subscribe, whether it succeeded or not,
// must be paired with one Unsubscribe of the same channel, and a channel
// is subscribed while it has more Subscribes than Unsubscribes. The hub
// counts one per room member, so the order in which concurrent joins and
// leaves of a room reach the broker never matters.
type Broker interface {
	// Start runs the links, delivering to h. It is called once, before any
	// Subscribe.
	Start(h Handler)
	// Subscribe counts one subscriber of channel and waits until the
	// server confirmed the subscription (at once when it is confirmed
	// already), bounded by ctx. It returns an error wrapping
	// [ErrUnavailable] when ctx ends first or the channel's link is known
	// to be down, wrapping [ErrRefused] too when the server refused the
	// subscription, or [ErrClosed]. It never holds a lock across the wait.
	Subscribe(ctx context.Context, channel string) error
	// Unsubscribe drops one subscriber of channel; the last one's
	// UNSUBSCRIBE is sent in the background. It never blocks on the
	// network.
	Unsubscribe(channel string)
	// Health reports the links' state as last observed (no I/O): it
	// answers at once whatever the backend does.
	Health() Health
	// Close stops the links and waits for their goroutines (bounded by the
	// client's dial, read and write timeouts). Safe to call twice.
	Close()
}

// Health is the cached state of a broker's links.
type Health struct {
	// OK is false while any link is down: it has not answered its first
	// PING yet, lost its connection, or is refusing subscriptions.
	OK bool
	// Links is how many links exist; Down lists the down ones ("shared",
	// or a Cluster master's address) with the last error.
	Links int
	Down  map[string]string
}

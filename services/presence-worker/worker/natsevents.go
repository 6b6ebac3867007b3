package worker

import (
	"sync"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// NATS room events (ELLIPSIS_NATS_EVENTS, docs/protocol.md "NATS room
// events"): every typing_start and typing_stop the store publishes on
// Redis Pub/Sub is also published, same bytes, on
// <prefix>.typing.v1.room.<names.RoomToken(room)>, on the worker's NATS
// connection, for platform services that talk NATS only.
//
//	shard / sweeper ──EventSink.RoomEvent──► queue (natsEventQueue) ──one goroutine──► nc.Publish
//
// The command path never waits for NATS: RoomEvent only hands the event to
// a bounded queue, and one goroutine publishes (nats.go's Publish may
// block on a full socket buffer while connected, and buffers up to its
// reconnect buffer while reconnecting).

// natsEventQueue bounds the events waiting for the publisher goroutine.
// Overflow rule: an event that finds the queue full is dropped and counted
// (ellipsis_worker_nats_events_total{result="dropped"}); NATS events are
// at most once, and a consumer resyncs with a snapshot request. 8192 events
// of about 150 bytes are about 1.2 MB, and seconds of a busy worker's
// events: a queue that full means NATS does not keep up, and waiting longer
// would only deliver stale "typing".
const natsEventQueue = 8192

// Results of ellipsis_worker_nats_events_total.
const (
	natsEventPublished = "published" // handed to nats.go (sent, or in its reconnect buffer)
	natsEventDropped   = "dropped"   // the queue was full
	natsEventFailed    = "failed"    // nats.go refused it (closed, reconnect buffer full, ...)
)

// eventPublisher is what natsEvents publishes with: *nats.Conn.
type eventPublisher interface {
	Publish(subject string, data []byte) error
}

// natsEvent is one queued room event.
type natsEvent struct {
	room string
	data []byte
}

// natsEvents is the [store.EventSink] that publishes room events on NATS.
// Build it with newNATSEvents (before store.New, which takes it in
// store.Options.Events), start its goroutine with start once the connection
// exists, stop it with stop after the last RoomEvent caller ended. Events
// handed over before start wait in the queue.
type natsEvents struct {
	names names.Names
	m     *metrics
	rl    *ratelog.Logger

	q    chan natsEvent
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the goroutine returned

	mu      sync.Mutex // guards started, stopped
	started bool
	stopped bool
}

var _ store.EventSink = (*natsEvents)(nil)

func newNATSEvents(n names.Names, m *metrics, rl *ratelog.Logger) *natsEvents {
	return &natsEvents{names: n, m: m, rl: rl,
		q: make(chan natsEvent, natsEventQueue), quit: make(chan struct{}), done: make(chan struct{})}
}

// RoomEvent implements [store.EventSink]: it queues the event without waiting,
// or drops and counts it when the queue is full.
func (e *natsEvents) RoomEvent(room string, event []byte) {
	select {
	case e.q <- natsEvent{room, event}:
	default:
		e.m.natsEvents.WithLabelValues(natsEventDropped).Inc()
		e.rl.Warn("nats-events-full", "NATS room event queue full, dropping events", zap.Int("queue", natsEventQueue))
	}
}

// start runs the publisher goroutine on pub. Only the first call counts;
// none after stop.
func (e *natsEvents) start(pub eventPublisher) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.stopped {
		return
	}
	e.started = true
	go e.run(pub)
}

// run publishes queued events in order until quit, then what is still
// queued, and returns.
func (e *natsEvents) run(pub eventPublisher) {
	defer close(e.done)
	for {
		select {
		case ev := <-e.q:
			e.publish(pub, ev)
		case <-e.quit:
			for {
				select {
				case ev := <-e.q:
					e.publish(pub, ev)
				default:
					return
				}
			}
		}
	}
}

// publish publishes one event and counts the result.
func (e *natsEvents) publish(pub eventPublisher, ev natsEvent) {
	if err := pub.Publish(e.names.RoomEventSubject(ev.room), ev.data); err != nil {
		e.m.natsEvents.WithLabelValues(natsEventFailed).Inc()
		e.rl.Warn("nats-events-publish", "publishing a room event on NATS failed", zap.String("room", ev.room), zap.Error(err))
		return
	}
	e.m.natsEvents.WithLabelValues(natsEventPublished).Inc()
}

// stop ends the publisher goroutine once it has published (or failed) what
// is queued, and waits for it. Call it after the last RoomEvent caller
// ended (shards and sweeper); events queued later are never published.
// Safe to call more than once, and without start.
func (e *natsEvents) stop() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	started := e.started
	e.mu.Unlock()
	close(e.quit)
	if started {
		<-e.done
	}
}

// newEvents builds s.events when Config.NATSEvents is on and returns it as
// the store's [store.EventSink]; off, it returns a nil sink (not a nil
// *natsEvents), so the store reports nothing and its sweep script keeps no
// events (no cost when off). Call it before store.New.
func (s *Server) newEvents() store.EventSink {
	if !s.cfg.NATSEvents {
		return nil
	}
	s.events = newNATSEvents(s.names, s.m, s.rl)
	return s.events
}

// startEvents starts publishing room events on the worker's NATS
// connection (once it exists; nats.go buffers while it reconnects).
func (s *Server) startEvents() {
	if s.events != nil {
		s.events.start(s.nc)
		s.log.Info("room events on NATS", zap.String("subjects", s.names.RoomEventsWildcard()))
	}
}

// stopEvents publishes what is queued and stops the publisher; called by
// Shutdown after the shards and the sweeper ended, before the NATS
// connection is drained, so the events of the commands taken before
// Shutdown are published (counted failed only when the connection is
// closed already: NATS down, or Shutdown's deadline passed).
func (s *Server) stopEvents() {
	if s.events != nil {
		s.events.stop()
	}
}

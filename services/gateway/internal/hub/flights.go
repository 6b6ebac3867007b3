package hub

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/backend"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Shared snapshots (docs/protocol.md, "Snapshots"): concurrent askers of
// one room's snapshot on this gateway share one request to the workers.
// A room has at most one flight in flight and one queued; the queued one
// starts when the one in flight ends. An asker names the moment since
// which the snapshot must have been read (after it took its hold, or when
// an HTTP request arrived): it shares the flight in flight only if that
// flight started after that moment, else the queued one (queueing it if
// none is). So every snapshot an asker gets was read after its hold began,
// and replaying the events buffered during the hold over it gives the
// right state (hub.go, "Holds"). A flight is bounded by ReadyTimeout and
// the hub's context, never by an asker's: an asker that gives up (its own
// deadline, its connection closed) leaves the flight running for the
// others. Its answer, or its error, goes to every asker that waited for
// it. The singleflight of golang.org/x/sync shares whatever call is in
// flight, which would break the "read after my hold" rule, hence this.
type flights struct {
	backend Backend
	timeout time.Duration
	met     *metrics.Metrics

	mu     sync.Mutex
	rooms  map[string]*roomFlights // rooms with a flight in flight; no empty entries
	closed bool
	wg     sync.WaitGroup // one per room with a flight in flight
	ctx    context.Context
	cancel context.CancelFunc
}

// roomFlights is one room's flights; under flights.mu.
type roomFlights struct {
	cur  *flight // in flight
	next *flight // queued behind cur; nil: none
}

// flight is one snapshot request; snap and err are set before done is
// closed and never after.
type flight struct {
	start time.Time // when it started (monotonic); zero while queued
	done  chan struct{}
	snap  protocol.Snapshot
	err   error
}

func newFlights(backend Backend, timeout time.Duration, met *metrics.Metrics) *flights {
	ctx, cancel := context.WithCancel(context.Background())
	return &flights{backend: backend, timeout: timeout, met: met, rooms: map[string]*roomFlights{}, ctx: ctx, cancel: cancel}
}

// get returns room's snapshot from a flight that started after since (or
// was queued after it), waiting for it until ctx is done. since must be
// read after the caller's hold began (and, for a join, after the room's
// subscription was confirmed).
//
// Errors: the flight's error (the Backend's, or its deadline), ctx's
// error when the caller stops waiting first, [ErrClosed] once the hub is
// closing.
func (f *flights) get(ctx context.Context, room string, since time.Time) (protocol.Snapshot, error) {
	fl, err := f.join(room, since)
	if err != nil {
		return protocol.Snapshot{}, err
	}
	select {
	case <-fl.done:
		return fl.snap, fl.err
	case <-ctx.Done():
		why := "timed out waiting for the room's snapshot"
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "request cancelled"
		}
		return protocol.Snapshot{}, backend.Unavailable(why, context.Cause(ctx))
	}
}

// join finds or makes the flight that serves an asker of room since.
func (f *flights) join(room string, since time.Time) (*flight, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	rf := f.rooms[room]
	switch {
	case rf == nil:
		fl := &flight{start: time.Now(), done: make(chan struct{})}
		f.rooms[room] = &roomFlights{cur: fl}
		f.wg.Add(1)
		go f.run(room, fl)
		f.met.Snapshot(metrics.SnapshotRequested)
		return fl, nil
	case rf.cur.start.After(since):
		f.met.Snapshot(metrics.SnapshotShared)
		return rf.cur, nil
	case rf.next != nil:
		f.met.Snapshot(metrics.SnapshotShared)
		return rf.next, nil
	default:
		rf.next = &flight{done: make(chan struct{})}
		f.met.Snapshot(metrics.SnapshotRequested)
		return rf.next, nil
	}
}

// run flies fl, then the flights queued behind it, one at a time, and
// forgets room once none is left.
func (f *flights) run(room string, fl *flight) {
	defer f.wg.Done()
	for fl != nil {
		ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
		fl.snap, fl.err = f.backend.Snapshot(ctx, room)
		cancel()
		if fl.err != nil && f.ctx.Err() != nil {
			// close cancelled it: its askers get the hub's shutdown answer.
			fl.snap, fl.err = protocol.Snapshot{}, ErrClosed
		}
		close(fl.done)
		f.mu.Lock()
		rf := f.rooms[room]
		fl, rf.cur, rf.next = rf.next, rf.next, nil
		if fl == nil {
			delete(f.rooms, room)
		} else {
			fl.start = time.Now()
		}
		f.mu.Unlock()
	}
}

// close cancels the flights in flight and queued (their askers get
// [ErrClosed] unless the snapshot was read first), refuses new ones and
// waits for their goroutines.
func (f *flights) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

package hub

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/backoff"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// Resync of one room: its joined members are held, one snapshot is
// requested, and each member gets it (self-filtered) as an unasked
// "typing" frame. A room whose snapshot fails is retried on its own, after
// a full-jitter backoff from resyncRetryMin doubling to resyncRetryMax
// (shared/backoff); no other room is touched. At most resyncConcurrency
// snapshots are in flight.
const (
	resyncRetryMin    = 100 * time.Millisecond
	resyncRetryMax    = 5 * time.Second
	resyncConcurrency = 16
)

// resyncer queues rooms to resync; mu guards everything below it and is
// never held with a hub lock.
type resyncer struct {
	h    *Hub
	wake chan struct{} // capacity 1: the queue is not empty

	mu    sync.Mutex
	rooms map[string]*resyncState // queued, running or waiting to retry
	queue []string
	done  bool

	warn *ratelog.Logger
}

type resyncState struct {
	bo      *backoff.Backoff
	queued  bool        // in queue
	running bool        // a resync is in flight
	again   bool        // asked again while running: queue once more
	timer   *time.Timer // waiting to retry
}

func newResyncer(h *Hub) *resyncer {
	return &resyncer{h: h, wake: make(chan struct{}, 1), rooms: map[string]*resyncState{},
		warn: ratelog.New(h.log, time.Minute)}
}

// enqueue asks for a resync of room. A room already queued, or waiting
// for its retry, is not queued twice; one asked while its resync runs is
// queued again once it ends (events may have been lost after its
// snapshot).
func (q *resyncer) enqueue(room string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return
	}
	st := q.rooms[room]
	if st == nil {
		st = &resyncState{bo: backoff.New(resyncRetryMin, resyncRetryMax)}
		q.rooms[room] = st
	}
	switch {
	case st.running:
		st.again = true
		return
	case st.queued || st.timer != nil:
		return
	}
	st.queued = true
	q.queue = append(q.queue, room)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// stop cancels the retry timers; run ends with the hub's context.
func (q *resyncer) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done = true
	for _, st := range q.rooms {
		if st.timer != nil {
			st.timer.Stop()
		}
	}
}

// run dispatches queued rooms, resyncConcurrency at a time, until the hub
// closes; the resyncs it started end before it returns.
func (q *resyncer) run() {
	h := q.h
	defer h.wg.Done()
	sem := make(chan struct{}, resyncConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		q.mu.Lock()
		var room string
		if len(q.queue) > 0 {
			room, q.queue = q.queue[0], q.queue[1:]
			st := q.rooms[room]
			st.queued, st.running = false, true
		}
		q.mu.Unlock()
		if room == "" {
			select {
			case <-h.ctx.Done():
				return
			case <-q.wake:
			}
			continue
		}
		select {
		case <-h.ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			q.finish(room, h.resyncRoom(room))
		}()
	}
}

// finish records the outcome of one resync of room: done, queued again,
// or retried after the room's backoff.
func (q *resyncer) finish(room string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.rooms[room]
	st.running = false
	if q.done {
		return
	}
	if ok && !st.again {
		delete(q.rooms, room)
		return
	}
	if ok {
		st.bo.Reset()
	}
	st.again = false
	delay := st.bo.Next()
	if !ok {
		q.warn.Warn("resync-failed", "room resync failed; retrying it with backoff (logged at most once a minute)", zap.String("room", room), zap.Duration("retry_in", delay))
	}
	st.timer = time.AfterFunc(delay, func() {
		q.mu.Lock()
		st.timer = nil
		q.mu.Unlock()
		q.enqueue(room)
	})
}

// resyncRoom pushes a snapshot of room to its joined members, held
// together, through [Hub.syncHolds]; false when the snapshot failed or a
// member's buffer overflowed. Members still joining are not sent it
// (nothing may precede their "joined"): they are marked, and their join
// pushes a fresh snapshot after "joined".
func (h *Hub) resyncRoom(name string) bool {
	rm := h.lookup(name)
	if rm == nil {
		return true
	}
	// Its watchers get a summary re-read at the next watch tick (events
	// may have been lost); it is sent only to those for whom it changed.
	rm.watchDirty = false
	h.markWatchDirty(rm)
	holds := make([]*Hold, 0, len(rm.members))
	for m, ms := range rm.members {
		if !ms.joined {
			ms.overflow = true
			continue
		}
		if ms.view.Off() {
			continue // no unasked snapshot for it
		}
		holds = append(holds, ms.hold(rm, m))
	}
	rm.mu.Unlock()
	if len(holds) == 0 {
		return true
	}
	h.met.Resyncs.Inc()
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.ReadyTimeout)
	overflowed, err := h.syncHolds(ctx, name, holds, SyncAsked, "", nil)
	cancel()
	if err != nil {
		h.log.Debug("resync snapshot failed", zap.String("room", name), zap.Error(err))
		for _, hd := range holds {
			h.Release(hd, nil, "")
		}
		return false
	}
	return !overflowed
}

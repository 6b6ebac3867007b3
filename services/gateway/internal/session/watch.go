package session

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Watching rooms (docs/protocol.md, "Watching rooms"): watch and unwatch
// are served on the reader, one frame at a time, so nothing more is read
// from the connection until the frame is answered (backpressure, as the
// room lanes' bound: a ping waits too). A watch is answered within
// SnapshotTimeout: its new rooms are authorised (as a join) and subscribed
// (hub.Watch) watchConcurrency at a time under one deadline, and a room
// not confirmed by then is refused unavailable. The "watching" answer is
// queued before the hub may send the rooms' summaries (hub.Arm), and the
// writer keeps at most one unwritten summary per room (writer.go).
//
// Per new room, in this order: an invalid id is refused bad_request; the
// connection's limit (MaxWatched) watch_limit; the gateway shutting down
// or NATS down unavailable; the user's watch budget
// (budgets.go: MaxWatched tokens refilled that many a minute)
// rate_limited; the authoriser forbidden (the token stays spent: it asked
// the authoriser) or unavailable; the room's subscription unavailable. A
// room refused unavailable gives its token back.
//
// Memory per connection: the watched set (at most MaxWatched room ids),
// the hub's watch state (hub/watch.go) and at most one queued summary per
// watched room; one watch frame in flight holds at most as many rooms as
// fit in MaxFrameBytes.

// watchConcurrency bounds the authorisations and subscriptions in flight
// for one watch frame.
const watchConcurrency = 32

// SendSummary queues a summary frame of a watched room ([hub.Watcher]):
// the latest unwritten summary of a room replaces the one before it;
// false after a close request.
func (c *Conn) SendSummary(room string, frame []byte) bool {
	if c.closing() {
		return false
	}
	return c.w.sendSummary(room, frame)
}

// watchTry is one new room of a watch frame on its way.
type watchTry struct {
	room string // holds a token of the watch budget (holdWatch)
	code string // "" once watched; else the refusal
	msg  string
}

// watch serves a watch frame on the reader.
func (c *Conn) watch(f protocol.ClientFrame) {
	now := time.Now()
	c.mu.Lock()
	gone := c.disconnected
	c.mu.Unlock()
	down := !gone && !c.deps.Backend.Connected()

	type result struct {
		room     string
		accepted bool
		try      *watchTry
		code     string
		msg      string
	}
	results := make([]result, 0, len(f.Rooms))
	var tries []*watchTry
	seen := make(map[string]struct{}, len(f.Rooms))
	for _, r := range f.Rooms {
		if _, dup := seen[r]; dup {
			continue
		}
		seen[r] = struct{}{}
		res := result{room: r}
		_, watched := c.watched[r]
		switch err := protocol.ValidateID("room", r); {
		case err != nil:
			res.code, res.msg = protocol.CodeBadRequest, err.Error()
		case watched:
			res.accepted = true
		case len(c.watched)+len(tries) >= c.cfg.MaxWatched || !c.budget.watching():
			res.code, res.msg = protocol.CodeWatchLimit, c.watchLimitMsg()
		case gone:
			res.code, res.msg = protocol.CodeUnavailable, "gateway shutting down; reconnect"
		case down:
			res.code, res.msg = protocol.CodeUnavailable, "presence backend unavailable (NATS); retry"
		default:
			if !c.budget.holdWatch(now) {
				res.code, res.msg = protocol.CodeRateLimited, c.watchBudgetMsg(c.budget.watchRetry(now))
				break
			}
			res.try = &watchTry{room: r}
			tries = append(tries, res.try)
		}
		results = append(results, res)
	}

	c.watchTries(tries)

	var rooms, armed []string
	var refused []protocol.Refusal
	for _, res := range results {
		if t := res.try; t != nil {
			res.code, res.msg = t.code, t.msg
			res.accepted = t.code == ""
			if res.accepted {
				if c.watched == nil {
					c.watched = make(map[string]struct{}, len(tries))
				}
				c.watched[t.room] = struct{}{}
				armed = append(armed, t.room)
			}
		}
		if res.accepted {
			rooms = append(rooms, res.room)
			continue
		}
		c.met.WatchRefused(res.code)
		refused = append(refused, protocol.Refusal{Room: res.room, Code: res.code, Message: res.msg})
	}
	c.reply("", protocol.TypeWatching, protocol.NewWatching(f.ID, rooms, refused, len(c.watched)))
	c.deps.Hub.Arm(c, armed...)
}

// watchTries authorises and subscribes the new rooms of one watch frame,
// watchConcurrency at a time, all within SnapshotTimeout, and sets each
// one's refusal (none: watched in the hub, not armed yet).
func (c *Conn) watchTries(tries []*watchTry) {
	if len(tries) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	sem := make(chan struct{}, watchConcurrency)
	var wg sync.WaitGroup
	for _, t := range tries {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			t.code, t.msg = protocol.CodeUnavailable, c.watchTimeoutMsg()
			c.budget.returnWatch()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.watchOne(ctx, t)
		}()
	}
	wg.Wait()
}

// watchOne is one room of watchTries.
func (c *Conn) watchOne(ctx context.Context, t *watchTry) {
	g, err := c.deps.Authorizer.Authorize(ctx, c.ident, t.room)
	switch {
	case errors.Is(err, authz.ErrForbidden):
		t.code, t.msg = protocol.CodeForbidden, "not allowed to watch room "+strconv.Quote(t.room)
		c.budget.spendWatch(time.Now()) // the authoriser was asked
		return
	case err != nil && ctx.Err() != nil:
		t.code, t.msg = protocol.CodeUnavailable, c.watchTimeoutMsg()
	case err != nil:
		t.code, t.msg = protocol.CodeUnavailable, "authorisation unavailable; retry"
	default:
		err = c.deps.Hub.Watch(ctx, t.room, c, filter.New(c.ident.HideTypingFrom, g.HideTypingFrom, true))
		switch {
		case err == nil:
			c.budget.spendWatch(time.Now())
			return
		case errors.Is(err, hub.ErrClosed):
			t.code, t.msg = protocol.CodeUnavailable, "gateway shutting down; reconnect"
		case ctx.Err() != nil:
			t.code, t.msg = protocol.CodeUnavailable, c.watchTimeoutMsg()
		case errors.Is(err, hub.ErrRefused):
			t.code, t.msg = protocol.CodeUnavailable, "room subscription refused by Redis; retry"
		default:
			t.code, t.msg = protocol.CodeUnavailable, "room subscription unavailable (Redis); retry"
		}
	}
	c.budget.returnWatch() // unavailable: the token is given back
}

func (c *Conn) watchLimitMsg() string {
	if c.cfg.MaxWatched == 0 {
		return "watching rooms is turned off on this gateway (ELLIPSIS_MAX_WATCHED_ROOMS=0)"
	}
	return fmt.Sprintf("at most %d rooms watched per connection; unwatch one first", c.cfg.MaxWatched)
}

func (c *Conn) watchBudgetMsg(retry time.Duration) string {
	n := c.cfg.MaxWatched
	ms := int64(math.Ceil(float64(retry) / float64(time.Millisecond)))
	return fmt.Sprintf("too many rooms newly watched: %d per user on this gateway, refilled %d a minute, shared by the user's connections; retry in %d ms", n, n, max(ms, 1))
}

func (c *Conn) watchTimeoutMsg() string {
	return "room not authorised and subscribed within " + c.cfg.SnapshotTimeout.String() + " (ELLIPSIS_SNAPSHOT_TIMEOUT); retry"
}

// unwatch serves an unwatch frame on the reader: the rooms named (every
// watched room when none is) are no longer watched, and none of their
// summaries is queued after the answer.
func (c *Conn) unwatch(f protocol.ClientFrame) {
	rooms := f.Rooms
	if rooms == nil {
		rooms = c.watchedRooms()
	}
	var listed, gone []string
	seen := make(map[string]struct{}, len(rooms))
	for _, r := range rooms {
		if _, dup := seen[r]; dup {
			continue
		}
		seen[r] = struct{}{}
		listed = append(listed, r)
		if _, ok := c.watched[r]; ok {
			delete(c.watched, r)
			gone = append(gone, r)
		}
	}
	c.deps.Hub.Unwatch(c, gone...)
	c.w.forgetSummaries(gone)
	c.reply("", protocol.TypeUnwatched, protocol.NewUnwatched(f.ID, listed, len(c.watched)))
}

// watchedRooms lists the watched rooms, sorted; reader only (or once it
// ended).
func (c *Conn) watchedRooms() []string {
	rooms := make([]string, 0, len(c.watched))
	for r := range c.watched {
		rooms = append(rooms, r)
	}
	slices.Sort(rooms)
	return rooms
}

// unwatchAll ends every watch of a closing connection (the reader ended).
func (c *Conn) unwatchAll() {
	if len(c.watched) == 0 {
		return
	}
	c.deps.Hub.Unwatch(c, c.watchedRooms()...)
	c.watched = nil
}

package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/backend"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/filter"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// reply queues a server frame of type typ made by the session, an answer
// about room ("" for none): after every event of room already taken.
func (c *Conn) reply(room, typ string, v any) {
	b, err := protocol.Encode(v)
	if err != nil {
		c.logAt(zapcore.ErrorLevel, "encode frame", zap.String("type", typ), zap.Error(err))
		return
	}
	if c.sendReply(room, b) {
		c.met.FrameOut(typ, 1)
	}
}

func (c *Conn) sendError(code, msg, room, id string) {
	c.met.Error(code)
	c.reply(room, protocol.TypeError, protocol.NewError(code, msg, room, id))
}

func (c *Conn) unavailable(f protocol.ClientFrame, why string) {
	c.sendError(protocol.CodeUnavailable, why, f.Room, f.ID)
}

func (c *Conn) isJoined(room string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.rooms[room]
	return ok
}

// join serves a join in the room's lane. A join of a room not yet joined
// reserves a place among MaxRooms (c.joining) and holds one of the user's
// free joins if one is left, until it commits or fails: joins in flight
// count against the limit, and a join that fails gives both back, but
// for a join the authoriser denied: that one asked it, and spends its free
// join as a joined room does. A re-join, and a join that found no free
// join, takes a token of the user's snapshot budget (budget.go).
func (c *Conn) join(f protocol.ClientFrame) {
	c.mu.Lock()
	_, already := c.rooms[f.Room]
	n, gone := len(c.rooms)+c.joining, c.disconnected
	reserved := !gone && !already && n < c.cfg.MaxRooms
	if reserved {
		c.joining++
	}
	c.mu.Unlock()
	switch {
	case gone:
		c.unavailable(f, "gateway shutting down; reconnect")
		return
	case !already && !reserved:
		c.sendError(protocol.CodeRoomLimit, fmt.Sprintf("at most %d rooms per connection; leave one first", c.cfg.MaxRooms), f.Room, f.ID)
		return
	}
	free := reserved && c.holdFreeJoin()
	if reserved {
		// Runs on this goroutine after the hub's Sync returned (commit is
		// called within it), so reserved and free are this join's alone.
		defer func() {
			c.mu.Lock()
			if reserved {
				c.joining--
			}
			c.mu.Unlock()
			if free {
				c.budget.returnFree()
			}
		}()
	}
	if !c.deps.Backend.Connected() {
		c.unavailable(f, "presence backend unavailable (NATS); retry")
		return
	}
	if !free && !c.takeSnapshot(f) {
		return
	}
	// The room's hide list: the authoriser's for a new room, the one its
	// first join got for a re-join (which asks no authoriser).
	var roomHidden filter.Set
	if !already {
		var ok, denied bool
		if roomHidden, ok, denied = c.authorize(f); !ok {
			if denied && free {
				free = false
				c.budget.spendFree(time.Now())
			}
			return
		}
	} else {
		c.mu.Lock()
		roomHidden = c.roomHidden[f.Room]
		c.mu.Unlock()
	}
	view := filter.New(c.ident.HideTypingFrom, roomHidden, !f.TypingOff())
	// The room is added to c.rooms only once the snapshot is in, and not
	// after the disconnect command went out (shutdown) or a close began
	// (Serve has taken or is about to take the list of rooms to leave).
	commit := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.disconnected || c.closing() {
			return false
		}
		if reserved {
			reserved = false
			c.joining--
		}
		if free {
			free = false
			c.budget.spendFree(time.Now())
		}
		c.rooms[f.Room] = struct{}{}
		if roomHidden.Len() > 0 {
			if c.roomHidden == nil {
				c.roomHidden = map[string]filter.Set{}
			}
			c.roomHidden[f.Room] = roomHidden
		}
		return true
	}
	c.answerSync(f, c.deps.Hub.Sync(c.ctx, hub.SyncJoin, f.Room, c, view, f.ID, commit))
}

// authorize asks the authoriser whether the user may join f's room, within
// SnapshotTimeout, and returns the users its grant hides in the room. When
// not, it answers f forbidden (denied) or unavailable (the authoriser
// could not tell) and returns ok false.
func (c *Conn) authorize(f protocol.ClientFrame) (hidden filter.Set, ok, denied bool) {
	actx, cancel := context.WithTimeout(c.ctx, c.cfg.SnapshotTimeout)
	g, err := c.deps.Authorizer.Authorize(actx, c.ident, f.Room)
	cancel()
	switch {
	case errors.Is(err, authz.ErrForbidden):
		c.sendError(protocol.CodeForbidden, "not allowed to join room "+strconv.Quote(f.Room), f.Room, f.ID)
		return filter.Set{}, false, true
	case err != nil:
		c.unavailable(f, "authorisation unavailable; retry")
		return filter.Set{}, false, false
	}
	return g.HideTypingFrom, true, false
}

// answerSync answers a join or sync that the hub could not serve.
func (c *Conn) answerSync(f protocol.ClientFrame, err error) {
	switch {
	case err == nil:
	case errors.Is(err, hub.ErrNotMember):
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
	case errors.Is(err, hub.ErrSnapshot):
		c.unavailable(f, "typing snapshot unavailable ("+backend.Reason(err)+"); retry")
	case errors.Is(err, hub.ErrAborted), errors.Is(err, hub.ErrClosed):
		c.unavailable(f, "gateway shutting down; reconnect")
	case errors.Is(err, hub.ErrRefused):
		c.unavailable(f, "room subscription refused by Redis; retry")
	default:
		c.unavailable(f, "room subscription unavailable (Redis); retry")
	}
}

func (c *Conn) leave(f protocol.ClientFrame) {
	c.mu.Lock()
	_, joined := c.rooms[f.Room]
	var cmd *protocol.Command
	if joined {
		delete(c.rooms, f.Room)
		delete(c.roomHidden, f.Room)
		c.threads.leaveRoom(f.Room) // the leave ends every scope of the room
		if c.ident.ShareTyping && !c.disconnected {
			cmd = c.commandLocked(protocol.OpLeave, f.Room)
		}
	}
	c.mu.Unlock()
	if pubErr := c.publish(cmd); pubErr != nil {
		c.logAt(zapcore.DebugLevel, "leave command not published; workers expire the entry after ttl", zap.String("room", f.Room), zap.Error(pubErr))
	}
	if joined {
		c.deps.Hub.Leave(f.Room, c)
		// A snapshot push in flight for the room is dropped by the hub
		// (its hold's membership is gone): stop awaiting it.
		c.w.pushEnded(f.Room, 0)
	}
	c.reply(f.Room, protocol.TypeLeft, protocol.NewLeft(f.Room, f.ID))
}

// typing serves typing_start and typing_stop, in the room itself or in
// f.Thread of it (docs/protocol.md, "Threads and activities"): an activity
// outside cfg.Activities is bad_request, a start in one more thread than
// MaxThreads this connection types in is too_many_threads (scopes.go),
// both with the frame's room and id; the command carries f's thread and
// activity (never ttl_ms: clients get the standard ttl).
func (c *Conn) typing(f protocol.ClientFrame) {
	op := protocol.OpStart
	if f.Type == protocol.TypeTypingStop {
		op = protocol.OpStop
	}
	if f.Activity == protocol.ActivityTyping {
		f.Activity = "" // the default: the command a client without activity sends
	}
	if op == protocol.OpStart {
		if msg := c.cfg.checkActivity(f.Activity); msg != "" {
			c.sendError(protocol.CodeBadRequest, msg, f.Room, f.ID)
			return
		}
	}
	c.mu.Lock()
	_, joined := c.rooms[f.Room]
	var why string
	var cmd *protocol.Command
	tooMany := false
	var startedAt, prevStart time.Time // a thread start recorded, to undo if unpublished
	switch {
	case !joined:
	case !c.ident.ShareTyping:
		// The user opted out: drop start and stop alike, silently.
	case c.disconnected:
		why = "gateway shutting down; reconnect"
	case !c.deps.Backend.Connected():
		why = "presence backend unavailable (NATS); retry"
	case f.Thread != "" && op == protocol.OpStart && !c.startThreadLocked(f.Room, f.Thread, &startedAt, &prevStart):
		tooMany = true
	default:
		if f.Thread != "" && op == protocol.OpStop {
			c.threads.stopThread(f.Room, f.Thread)
		}
		cmd = c.commandLocked(op, f.Room)
		cmd.Thread, cmd.Activity = f.Thread, f.Activity
	}
	c.mu.Unlock()
	if err := c.publish(cmd); err != nil {
		why = "presence backend unavailable (NATS); retry"
		if !startedAt.IsZero() {
			c.mu.Lock()
			c.threads.undoStart(f.Room, f.Thread, startedAt, prevStart)
			c.mu.Unlock()
		}
	}
	switch {
	case !joined:
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
	case tooMany:
		c.sendError(protocol.CodeTooManyThreads, fmt.Sprintf("at most %d threads of room %s typed in at once (ELLIPSIS_MAX_THREADS_PER_USER); stop one first", c.cfg.maxThreads(), strconv.Quote(f.Room)), f.Room, f.ID)
	case why != "":
		c.unavailable(f, why)
	}
}

// startThreadLocked records a start in thread of room now (scopes.go),
// setting *at to now and *prev to the thread's previous start; false when
// it would pass MaxThreads. c.mu is held.
func (c *Conn) startThreadLocked(room, thread string, at, prev *time.Time) bool {
	now := time.Now()
	p, ok := c.threads.startThread(room, thread, now, c.cfg.maxThreads(), c.cfg.typingTTL())
	if ok {
		*at, *prev = now, p
	}
	return ok
}

// commandLocked builds a start, stop or leave command with the next seq;
// c.mu is held. The caller publishes it (publish) after releasing c.mu, so
// no lock is held across the NATS write: a command published late by a
// race with Disconnect (the only other publisher) carries a lower seq than
// the disconnect, and the worker drops it as stale.
func (c *Conn) commandLocked(op, room string) *protocol.Command {
	c.seq++
	return &protocol.Command{
		V: protocol.Version, Op: op, Room: room, User: c.ident.User, Name: c.ident.Name,
		Conn: c.id, Seq: c.seq, TsMs: time.Now().UnixMilli(),
	}
}

// publish sends cmd (nil: nothing) to the workers and counts it.
func (c *Conn) publish(cmd *protocol.Command) error {
	if cmd == nil {
		return nil
	}
	if err := c.deps.Backend.Publish(cmd); err != nil {
		return err
	}
	c.met.Command(cmd.Op)
	return nil
}

func (c *Conn) sync(f protocol.ClientFrame) {
	if !c.isJoined(f.Room) {
		c.sendError(protocol.CodeNotJoined, "join room "+strconv.Quote(f.Room)+" first", f.Room, f.ID)
		return
	}
	if !c.takeSnapshot(f) {
		return
	}
	if !c.deps.Backend.Connected() {
		c.unavailable(f, "presence backend unavailable (NATS); retry")
		return
	}
	c.answerSync(f, c.deps.Hub.Sync(c.ctx, hub.SyncAsked, f.Room, c, nil, f.ID, nil))
}

// Disconnect publishes the connection's one disconnect command now (if it
// joined rooms and shares typing) and stops publishing anything after it.
// Later calls do nothing. The gateway calls it for every connection at
// shutdown, before closing them; Serve calls it when the connection ends.
func (c *Conn) Disconnect() {
	c.mu.Lock()
	if c.disconnected {
		c.mu.Unlock()
		return
	}
	c.disconnected = true
	if len(c.rooms) == 0 || !c.ident.ShareTyping {
		c.mu.Unlock()
		return
	}
	c.seq++
	cmd := &protocol.Command{
		V: protocol.Version, Op: protocol.OpDisconnect, User: c.ident.User,
		Conn: c.id, Seq: c.seq, Rooms: c.joinedRooms(), TsMs: time.Now().UnixMilli(),
	}
	c.mu.Unlock()
	if err := c.publish(cmd); err != nil {
		c.logAt(zapcore.WarnLevel, "disconnect command not published; workers expire the entries after ttl", zap.Error(err))
	}
}

// joinedRooms lists c.rooms sorted; c.mu is held.
func (c *Conn) joinedRooms() []string {
	rooms := make([]string, 0, len(c.rooms))
	for r := range c.rooms {
		rooms = append(rooms, r)
	}
	slices.Sort(rooms)
	return rooms
}

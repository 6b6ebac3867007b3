package session

import (
	"fmt"
	"sync"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Room lanes (docs/protocol.md, "Order and loss"): a join or sync waits on
// the network (authorisation, the room's subscription, the workers'
// snapshot: up to ELLIPSIS_SNAPSHOT_TIMEOUT each), so it is served off the
// reader, in its room's lane: a FIFO run by one goroutine that lives while
// the room has a frame in flight. A later frame for a room with a lane
// queues behind it, so frames of one room are served in the order they
// were read (join r, typing_start r, leave r behave as if served one at a
// time); a frame for another room, and a ping, is served by the reader at
// once. Answers to frames of different rooms may therefore come out of
// order; each carries its room and id.
//
// Bounds: at most [MaxLanes] rooms have a lane per connection; a join or
// sync of another room then makes the reader wait until a lane ends or the
// connection closes (backpressure: nothing more is read meanwhile, so a
// ping waits too; a client rejoining many rooms at once gets its answers
// 8 rooms at a time). A lane queues at most [LaneQueue] frames behind the
// one in flight; a frame over it is answered `unavailable` (with its room and id)
// and dropped. The inbound rate limit (inbound.go) bounds how fast either
// fills. On close the connection's context is cancelled, the lanes drop
// their queued frames, and Serve waits for them before it publishes the
// disconnect command and leaves the rooms.
const (
	// MaxLanes is the most rooms with a join or sync in flight on one
	// connection.
	MaxLanes = 8
	// LaneQueue is the most frames queued behind a room's frame in flight.
	LaneQueue = 16
)

// lanes is a connection's room lanes; the reader creates lanes, each lane's
// goroutine removes its own. The zero value is ready (nothing is
// allocated until the first join or sync, and the last lane to end lets
// the map and channel go).
type lanes struct {
	mu    sync.Mutex
	rooms map[string]*[]protocol.ClientFrame // room → frames queued behind the one in flight
	free  chan struct{}                      // capacity 1: a lane ended (wakes a waiting reader)
	wg    sync.WaitGroup                     // one per running lane
}

// dispatch serves f, a decoded client frame other than ping, keeping the
// per-room order. Reader only.
func (c *Conn) dispatch(f protocol.ClientFrame) {
	waits := f.Type == protocol.TypeJoin || f.Type == protocol.TypeSync
	l := &c.lanes
	for {
		l.mu.Lock()
		if q := l.rooms[f.Room]; q != nil {
			if len(*q) >= LaneQueue {
				l.mu.Unlock()
				c.unavailable(f, fmt.Sprintf("too many frames waiting behind a join or sync of room %q (at most %d); retry", f.Room, LaneQueue))
				return
			}
			*q = append(*q, f)
			l.mu.Unlock()
			return
		}
		if !waits {
			l.mu.Unlock()
			c.serve(f) // no lane for the room: nothing of it is in flight
			return
		}
		if len(l.rooms) < MaxLanes {
			if l.rooms == nil {
				l.rooms = make(map[string]*[]protocol.ClientFrame, MaxLanes)
				l.free = make(chan struct{}, 1)
			}
			l.rooms[f.Room] = new([]protocol.ClientFrame)
			l.wg.Add(1)
			l.mu.Unlock()
			go c.runLane(f)
			return
		}
		free := l.free
		l.mu.Unlock()
		select {
		case <-free:
		case <-c.w.quit:
			return // closing: the frame is not served
		}
	}
}

// runLane serves f and then the frames queued behind it in its room's
// lane, and ends the lane when none is left. Frames still queued once the
// connection is closing are dropped.
func (c *Conn) runLane(f protocol.ClientFrame) {
	l := &c.lanes
	defer l.wg.Done()
	room := f.Room
	for {
		if !c.closing() {
			c.serve(f)
		}
		l.mu.Lock()
		q := l.rooms[room]
		if len(*q) == 0 {
			delete(l.rooms, room)
			free := l.free
			if len(l.rooms) == 0 {
				// Nothing in flight: an idle connection keeps neither the
				// map nor the channel (a reader waiting on free holds it).
				l.rooms, l.free = nil, nil
			}
			l.mu.Unlock()
			select {
			case free <- struct{}{}:
			default: // a token is there already
			}
			return
		}
		f = (*q)[0]
		(*q)[0] = protocol.ClientFrame{}
		*q = (*q)[1:]
		l.mu.Unlock()
	}
}

// waitLanes waits for every lane to end; the connection is closing, so
// their requests in flight are cancelled.
func (c *Conn) waitLanes() { c.lanes.wg.Wait() }

// serve serves one frame of a room (not a ping), on the reader or in the
// room's lane.
func (c *Conn) serve(f protocol.ClientFrame) {
	switch f.Type {
	case protocol.TypeJoin:
		c.join(f)
	case protocol.TypeLeave:
		c.leave(f)
	case protocol.TypeTypingStart, protocol.TypeTypingStop:
		c.typing(f)
	case protocol.TypeSync:
		c.sync(f)
	}
}

package session

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// keepQueueCap is the backing array an empty outbound queue keeps for the
// next frames (a burst of typing events); a larger one is released.
const keepQueueCap = 16

// writerHost is what the writer tells its connection, and asks of it.
type writerHost interface {
	// written reports a text frame written, its write finished at now
	// (delivery delay of room events).
	written(frame []byte, now time.Time)
	// writeFailed reports a failed write: the connection ends without a
	// close frame (1006).
	writeFailed()
	// readDone is closed once reading ended (the peer's close reply, or
	// the connection broke).
	readDone() <-chan struct{}
	// writeStalled reports a write that did not finish within
	// cfg.WriteStall: the connection is closed with 1013.
	writeStalled()
	// overflowed reports an answer refused because answerCap frames are
	// queued (the peer asks faster than it reads): the connection is
	// closed with 1013.
	overflowed()
	// conflating reports that the writer began (true) or ended (false)
	// keeping room events as the latest per (room, thread, user).
	conflating(on bool)
	// conflated reports n room events replaced or superseded, unwritten.
	conflated(n int)
	// pushRoom asks for an unasked typing snapshot of room (its conflated
	// events overflowed the room's cap), the writer's push number push
	// (see [writer.pushAwaited]); it must not block. The writer drops the
	// room's events until [writer.sendSnapshot] of room.
	pushRoom(room string, push uint64)
}

// writer is a connection's outbound side: the queue, the write loop, the
// pings and the close sequence. It owns every data write of its
// transport.
//
// The queue is out[head:], guarded by mu. A sender never blocks and no
// frame is refused. Room events (sendEvent) are queued one by one while
// fewer than the high-water mark (cfg.OutboundQueue/2, at least 1) frames
// are queued; from there, until the queue and the conflation state have
// drained, the writer conflates: it keeps only the latest event per
// (room, thread, user) in conf and writes those after the queue
// (docs/protocol.md, "Order and loss"). A room's conflated events never
// pass a frame of that room queued after them: a snapshot of the room
// (sendSnapshot) supersedes them (they are older than the hold it was
// read after), and any other answer about the room (sendReply: left, an
// error) first moves them into the queue. A room with more than
// cfg.ConflateRoomCap conflated entries (its scopes' users together) drops them and asks for a snapshot
// push (host.pushRoom), dropping its events until that snapshot comes;
// while a snapshot of the room queued since conflation began is not
// written yet, the push is asked only once it is, so a reader that does
// not read has at most one pushed snapshot per room queued, not one per
// overflow. So the state is bounded: conf holds at most MaxRooms ×
// ConflateRoomCap entries, and the queue the high-water mark of events
// plus the answers (bounded by the inbound limit), the rooms'
// snapshots (at most one pushed per room), at most one unwritten summary
// per watched room (sendSummary) and per room in summary mode
// (sendRoomSummary) besides the ones other frames of that room were
// queued after. The queue grows on demand and is
// released when it drains with a large backing array, so an idle
// connection holds (almost) nothing. Queuing a frame starts the write loop's goroutine
// unless one runs (writing); it ends once the queue is empty, or runs
// the close sequence once quit is closed. Pings come from a runtime timer
// (no goroutine) every 9/10 of cfg.PongWait, which starts the write loop.
type writer struct {
	tr   Transport
	host writerHost
	// cfg is the connection's: the writer reads OutboundQueue, PongWait
	// (pings every 9/10 of it), WriteStall (the bound of every data write and
	// ping before a close) and ConflateRoomCap.
	cfg *Config

	mu   sync.Mutex
	out  [][]byte
	head int
	// conf is the conflation state: room → scope key (hub.EventKey: user
	// and thread) → latest event frame;
	// confN its entries; confPush the rooms whose conflated events
	// overflowed → the snapshot push awaited (pushes numbers them, never
	// reset); confSnap the rooms with a snapshot queued while conflating →
	// its enq number, until it is written; inConf that the writer
	// conflates (reported to the host). All under mu; the maps are nil
	// when not conflating.
	conf     map[string]map[string][]byte
	confN    int
	confPush map[string]push
	confSnap map[string]uint64
	pushes   uint64
	inConf   bool
	overflow bool // an answer was refused (answerCap), reported to the host once; mu
	// sums maps a watched room to the enq number of its summary queued
	// last (sendSummary); an entry at or below deq was written. Nil once
	// the queue drains; a room's entry goes when it is unwatched
	// (forgetSummaries). Under mu.
	sums map[string]uint64
	// rsums maps a room in summary mode to the enq number of its summary
	// snapshot queued last (sendRoomSummary) while no other frame of that
	// room was queued after it; an entry at or below deq was written. Nil
	// once the queue drains. Under mu.
	rsums map[string]uint64
	// enq and deq count the frames ever queued and taken from out; ans
	// holds the enq number of each answer or snapshot still queued, oldest
	// first (at most answerCap). All under mu.
	enq, deq uint64
	ans      []uint64
	live     bool        // start was called: write loops may be started; mu
	writing  bool        // a write loop runs, or the last one closed the transport; mu
	pingDue  bool        // the ping timer fired: the write loop pings first; mu
	pinger   *time.Timer // set in start under mu
	// one backs the drain of a write loop that takes a single frame (the
	// common case: an event at a person's pace), so it allocates nothing;
	// only one write loop runs at a time (writing).
	one [1][]byte

	quit chan struct{} // closed by close
	// closeBy is the write deadline of a closing connection (UnixNano,
	// set before quit is closed; 0 before): no write waits past it
	// (writeDeadline).
	closeBy     atomic.Int64
	hardStop    *time.Timer // aborts the transport 2*closeGrace after close; set before quit is closed
	closeCode   int         // close frame to send; 0: none (peer closed or conn broken)
	closeReason string
	done        chan struct{} // closed when the close sequence ended
}

// push is a snapshot push of a room awaited: its number and whether it
// was asked of the host (it is not while the room's previous snapshot is
// still queued).
type push struct {
	n     uint64
	asked bool
}

// init readies w for tr (nil: frames stay queued, as before start) with
// cfg, which must not change afterwards.
func (w *writer) init(tr Transport, host writerHost, cfg *Config) {
	w.tr, w.host, w.cfg = tr, host, cfg
	w.quit = make(chan struct{})
	w.done = make(chan struct{})
}

// start arms the pings and lets write loops run, starting one if frames
// are queued or a close was requested already.
func (w *writer) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Created with a deadline it never reaches and armed after the
	// assignment, so the callback, which re-arms it, always finds it.
	w.pinger = time.AfterFunc(time.Duration(math.MaxInt64), w.pingTick)
	w.pinger.Reset(w.pingPeriod())
	w.live = true
	if len(w.out) > w.head || w.closing() {
		w.startLocked()
	}
}

func (w *writer) closing() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// close asks for the close sequence: the queued frames are flushed within
// closeGrace (except after 1013), the close frame of code and reason is
// sent (none for code 0), and the transport is closed after the peer's
// reply or closeGrace. Writes are bounded by closeGrace from now on, and
// the transport is aborted 2*closeGrace from now. Called once; it never
// blocks.
func (w *writer) close(code int, reason string) {
	w.closeCode, w.closeReason = code, reason
	// A write in flight may be blocked on a peer that stopped reading
	// (a slow consumer): give it closeGrace at most, not WriteWait.
	// Later writes take closeBy too (writeDeadline); a write that
	// re-armed the socket's deadline just now is cut by the hard stop.
	by := time.Now().Add(closeGrace)
	w.closeBy.Store(by.UnixNano())
	if w.tr != nil {
		w.tr.CutWrites(by)
		w.hardStop = time.AfterFunc(2*closeGrace, w.tr.Abort)
	}
	close(w.quit)
	w.mu.Lock()
	if w.live {
		w.startLocked()
	}
	w.mu.Unlock()
}

// send queues frame, an answer about no room, and starts a write loop
// unless one runs (or start was not called yet).
func (w *writer) send(frame []byte) bool { return w.sendReply("", frame) }

// sendReply queues frame, an answer about room ("" for none) that is not
// a snapshot: never dropped, and written after every event of room
// already taken (the room's conflated events are moved into the queue
// before it).
func (w *writer) sendReply(room string, frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fullLocked() {
		return false
	}
	if users := w.conf[room]; room != "" && users != nil {
		for _, f := range users {
			w.enqueueLocked(f)
		}
		w.dropRoomLocked(room)
	}
	delete(w.rsums, room)
	w.enqueueLocked(frame)
	w.answerLocked()
	w.kickLocked()
	return true
}

// sendSnapshot queues frame, a snapshot of room (joined or typing):
// never dropped; it supersedes the room's conflated events and ends a
// snapshot push of the room awaited.
func (w *writer) sendSnapshot(room string, frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fullLocked() {
		return false
	}
	delete(w.rsums, room)
	w.queueSnapshotLocked(room, frame)
	w.answerLocked()
	w.endConflationLocked()
	w.kickLocked()
	return true
}

// sendRoomSummary takes frame, an unasked typing snapshot of a room in
// summary mode (hub summary.go): like sendSnapshot it supersedes the
// room's conflated events and ends a snapshot push of the room awaited,
// but it replaces, in its place, the room's previous summary still queued
// when no other frame of the room was queued after that one, and it is not
// an answer (outside answerCap). So a reader that stopped reading holds at
// most one summary per room (bounded by MaxRooms) and is closed by the
// write stall, not by its summaries. Never refused.
func (w *writer) sendRoomSummary(room string, frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.rsums[room]; ok && e > w.deq {
		w.out[w.head+int(e-1-w.deq)] = frame // out[head+i] is frame deq+1+i
		if n := len(w.conf[room]); n > 0 {
			w.dropRoomLocked(room)
			w.host.conflated(n)
		}
		delete(w.confPush, room)
		w.endConflationLocked()
		return true
	}
	w.queueSnapshotLocked(room, frame)
	if w.rsums == nil {
		w.rsums = map[string]uint64{}
	}
	w.rsums[room] = w.enq
	w.endConflationLocked()
	w.kickLocked()
	return true
}

// queueSnapshotLocked queues frame, a snapshot of room, dropping the
// room's conflated events (older than it) and its awaited push; mu is
// held.
func (w *writer) queueSnapshotLocked(room string, frame []byte) {
	if n := len(w.conf[room]); n > 0 {
		w.dropRoomLocked(room)
		w.host.conflated(n)
	}
	delete(w.confPush, room)
	w.enqueueLocked(frame)
	if w.inConf {
		if w.confSnap == nil {
			w.confSnap = map[string]uint64{}
		}
		w.confSnap[room] = w.enq
	}
}

// sendEvent takes frame, an event of room of scope key (hub.EventKey: its
// user and thread): queued while fewer than the high-water mark are
// queued and nothing is conflated, else kept as the latest event of
// (room, key), so a thread event never replaces a room event of the same
// user. It never refuses one.
func (w *writer) sendEvent(room, key string, frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.inConf && len(w.out)-w.head < w.highWater() {
		if w.rsums != nil {
			delete(w.rsums, room) // a summary before this event stays
		}
		w.enqueueLocked(frame) // the hot path: no allocation once warm
		w.kickLocked()
		return true
	}
	if w.closing() {
		return false // the close sequence may have ended conflation already
	}
	if !w.inConf {
		w.inConf = true
		w.host.conflating(true)
	}
	if _, ok := w.confPush[room]; ok {
		w.host.conflated(1) // the awaited snapshot supersedes it
		return true
	}
	users := w.conf[room]
	if _, ok := users[key]; ok {
		users[key] = frame
		w.host.conflated(1)
		return true
	}
	if len(users) >= w.roomCap() {
		// More users than a snapshot lists: one snapshot replaces them.
		w.dropRoomLocked(room)
		w.host.conflated(len(users) + 1)
		if w.confPush == nil {
			w.confPush = map[string]push{}
		}
		w.pushes++
		p := push{n: w.pushes}
		if _, queued := w.confSnap[room]; !queued {
			// Else asked once that snapshot is written (snapWrittenLocked):
			// a reader that does not read gets one pushed snapshot per
			// room waiting, not one per overflow.
			p.asked = true
			w.host.pushRoom(room, p.n)
		}
		w.confPush[room] = p
		return true
	}
	if users == nil {
		if w.conf == nil {
			w.conf = map[string]map[string][]byte{}
		}
		users = map[string][]byte{}
		w.conf[room] = users
	}
	users[key] = frame
	w.confN++
	w.kickLocked()
	return true
}

// sendSummary queues frame, a summary of a watched room: it replaces the
// room's summary still queued, in its place, if there is one (and the
// room was not unwatched since: forgetSummaries), else it is queued. Never
// refused: at most one summary per watched room waits (MaxWatched),
// outside answerCap.
func (w *writer) sendSummary(room string, frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.sums[room]; ok && e > w.deq {
		w.out[w.head+int(e-1-w.deq)] = frame // out[head+i] is frame deq+1+i
		return true
	}
	w.enqueueLocked(frame)
	if w.sums == nil {
		w.sums = map[string]uint64{}
	}
	w.sums[room] = w.enq
	w.kickLocked()
	return true
}

// forgetSummaries keeps the summaries of rooms queued so far from being
// replaced: rooms are no longer watched (their "unwatched" answer
// follows), so a summary after a later watch of one of them comes after
// that watch's "watching".
func (w *writer) forgetSummaries(rooms []string) {
	w.mu.Lock()
	for _, r := range rooms {
		delete(w.sums, r)
	}
	w.mu.Unlock()
}

// pushEnded forgets the snapshot push of room awaited, one that will not
// come: push (when the hub no longer has the member), or any (push 0:
// the room was left).
func (w *writer) pushEnded(room string, push uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.confPush[room]; ok && (push == 0 || p.n == push) {
		delete(w.confPush, room)
	}
	w.endConflationLocked()
}

// pushAwaited reports whether the snapshot push push of room is still
// awaited: not once a snapshot of the room came (it ended the push), the
// room was left (pushEnded), or a later push of the room replaced it. A
// push of a room left and joined again is not awaited any more, so its
// snapshot, held under the old membership or read before the new one's
// subscription, is never written after the new join's.
func (w *writer) pushAwaited(room string, push uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.confPush[room]
	return ok && p.n == push
}

// answerCap is the most answers and snapshots queued at once:
// cfg.OutboundQueue. Events stop queuing at the high-water mark and
// conflate, and an answer moves at most its room's conflated events ahead
// of it, so only answers the peer asks for faster than it reads can grow
// the queue; past answerCap the next one is refused and the connection
// closed (1013).
func (w *writer) answerCap() int { return max(1, w.cfg.OutboundQueue) }

// fullLocked reports (to the host, once) that answerCap answers are
// queued, and that this one must be refused; mu is held.
func (w *writer) fullLocked() bool {
	if len(w.ans) < w.answerCap() {
		return false
	}
	if !w.overflow {
		w.overflow = true
		w.host.overflowed()
	}
	return true
}

// answerLocked records the frame just queued as an answer; mu is held.
func (w *writer) answerLocked() { w.ans = append(w.ans, w.enq) }

// highWater is how many queued frames make room events conflate:
// cfg.OutboundQueue/2, at least 1.
func (w *writer) highWater() int { return max(1, w.cfg.OutboundQueue/2) }

// roomCap is the most entries (scopes' users) conflated per room (cfg.ConflateRoomCap,
// default 100: ELLIPSIS_SNAPSHOT_MAX's).
func (w *writer) roomCap() int {
	if w.cfg.ConflateRoomCap > 0 {
		return w.cfg.ConflateRoomCap
	}
	return 100
}

// dropRoomLocked forgets room's conflated events; mu is held.
func (w *writer) dropRoomLocked(room string) {
	w.confN -= len(w.conf[room])
	delete(w.conf, room)
}

// endConflationLocked ends conflation once nothing is conflated, no push
// is awaited and the queue is under the high-water mark; mu is held.
func (w *writer) endConflationLocked() {
	if !w.inConf || w.confN > 0 || len(w.confPush) > 0 || len(w.out)-w.head >= w.highWater() {
		return
	}
	w.inConf = false
	w.conf, w.confPush, w.confSnap = nil, nil, nil
	w.host.conflating(false)
}

// kickLocked starts a write loop once start was called; mu is held.
func (w *writer) kickLocked() {
	if w.live {
		w.startLocked()
	}
}

// conflatedEntries is how many rooms and entries are conflated (tests).
func (w *writer) conflatedEntries() (rooms, entries int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conf), w.confN
}

// outbound is the writer's state now ([Conn.Outbound]).
func (w *writer) outbound() Outbound {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Outbound{
		Queued: len(w.out) - w.head, Answers: len(w.ans), HighWater: w.highWater(),
		Conflating: w.inConf, ConflatedRooms: len(w.conf), Conflated: w.confN,
		RoomCap: w.roomCap(), PushesAwaited: len(w.confPush),
	}
}

// startLocked starts the write loop's goroutine unless one runs; mu is
// held.
func (w *writer) startLocked() {
	if !w.writing {
		w.writing = true
		go w.writeLoop()
	}
}

// enqueueLocked appends frame to the queue; mu is held.
func (w *writer) enqueueLocked(frame []byte) bool {
	if w.head > 0 && len(w.out) == cap(w.out) {
		// Reuse the room of frames already written before growing.
		n := copy(w.out, w.out[w.head:])
		clear(w.out[n:])
		w.out, w.head = w.out[:n], 0
	}
	w.out = append(w.out, frame)
	w.enq++
	return true
}

// dequeue takes the oldest queued frame; ok is false when none is queued.
func (w *writer) dequeue() (f []byte, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dequeueLocked()
}

// dequeueLocked is dequeue with mu held: the queue's oldest frame, else
// a conflated event (any room, any user: their order does not change any
// room's final state).
func (w *writer) dequeueLocked() (f []byte, ok bool) {
	if w.head == len(w.out) {
		for room, users := range w.conf {
			for u, f := range users {
				delete(users, u)
				w.confN--
				if len(users) == 0 {
					delete(w.conf, room)
				}
				w.endConflationLocked()
				return f, true
			}
		}
		w.endConflationLocked()
		return nil, false
	}
	f = w.out[w.head]
	w.out[w.head] = nil
	w.head++
	w.deq++
	if len(w.ans) > 0 && w.ans[0] <= w.deq {
		w.ans = w.ans[1:]
		if len(w.ans) == 0 {
			w.ans = nil
		}
	}
	if len(w.confSnap) > 0 {
		w.snapWrittenLocked() // an answer or a room summary written
	}
	if w.head == len(w.out) {
		if cap(w.out) > keepQueueCap {
			w.out = nil
		} else {
			w.out = w.out[:0]
		}
		w.head = 0
		w.sums, w.rsums = nil, nil // every summary was written
	}
	w.endConflationLocked()
	return f, true
}

// snapWrittenLocked forgets the rooms whose snapshot queued while
// conflating was taken from the queue, and asks the snapshot push each of
// them deferred meanwhile; mu is held.
func (w *writer) snapWrittenLocked() {
	for room, at := range w.confSnap {
		if at > w.deq {
			continue
		}
		delete(w.confSnap, room)
		if p, ok := w.confPush[room]; ok && !p.asked {
			p.asked = true
			w.confPush[room] = p
			w.host.pushRoom(room, p.n)
		}
	}
}

// queued is the number of frames in the queue and conflated.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.out) - w.head + w.confN
}

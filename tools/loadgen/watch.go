package loadgen

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The watch case (issue 25): Options.Watchers extra connections, members
// of no room, each watch Options.WatchRooms rooms among the run's
// (docs/protocol.md, "Watching rooms": watch, watching, summary) from
// Options.WatchAt on. Measured: summaries per second each watcher reads,
// the gateway's CPU per second before and after the watchers start (one
// run, the same connections and load), and the delay to the state in the
// watcher's summaries (state.go: a summary replaces the watcher's view of
// that room). A summary lists at most protocol's first 3 typists of a room
// and its total: with rooms of at most 3 typists (the case's default
// load) it is the room's whole state; with more, the summaries that did
// not list every typist are counted (partial) and the view keeps only the
// listed.

// watchMaxFrame is the gateway's default frame limit
// (ELLIPSIS_MAX_FRAME_BYTES): watch frames are cut below it.
const watchMaxFrame = 4096

// watcher is one watching connection; its rooms are run room indexes.
type watcher struct {
	*client
	rooms []int
	// from is when its first watch frame was written (mono ns); the
	// summaries read after it count for its rate.
	from atomic.Int64
}

// watchStats gathers what the watchers read.
type watchStats struct {
	state     *stateStats
	summaries atomic.Int64
	accepted  atomic.Int64 // rooms a `watching` frame listed
	answers   atomic.Int64 // `watching` frames
	mu        sync.Mutex
	refused   map[string]int64 // code -> rooms
}

func newWatchStats() *watchStats {
	return &watchStats{state: newStateStats(), refused: map[string]int64{}}
}

// watchFrame is a watch-related server frame as the load generator reads
// it (docs/protocol.md, "Watching rooms").
type watchFrame struct {
	Type    string            `json:"type"`
	Room    string            `json:"room"`
	Typing  []protocol.Typist `json:"typing"`
	Total   int               `json:"total"`
	Rooms   []string          `json:"rooms"`
	Refused []struct {
		Room string `json:"room"`
		Code string `json:"code"`
	} `json:"refused"`
	Watched int    `json:"watched"`
	Code    string `json:"code"`
	ID      string `json:"id"`
}

// watchFrames cuts the watch of rooms into frames of at most max bytes
// each ({"type":"watch","rooms":[...],"id":"wN"}).
func watchFrames(rooms []string, max int) [][]byte {
	var out [][]byte
	var cur []string
	size := 0
	const overhead = len(`{"type":"watch","rooms":[],"id":"w000000"}`)
	flush := func() {
		if len(cur) == 0 {
			return
		}
		b, _ := json.Marshal(map[string]any{"type": "watch", "rooms": cur, "id": "w" + strconv.Itoa(len(out))})
		out = append(out, b)
		cur, size = nil, 0
	}
	for _, r := range rooms {
		n := len(r) + 3 // quotes and comma
		if len(cur) > 0 && overhead+size+n > max {
			flush()
		}
		cur = append(cur, r)
		size += n
	}
	flush()
	return out
}

// watchedRooms is the rooms watcher w of n watches: per rooms from
// w*per on, modulo rooms.
func watchedRooms(w, per, rooms int) []int {
	out := make([]int, 0, min(per, rooms))
	seen := make(map[int]bool, per)
	for i := 0; i < per; i++ {
		ri := (w*per + i) % rooms
		if seen[ri] {
			break
		}
		seen[ri] = true
		out = append(out, ri)
	}
	return out
}

// buildWatchers makes the run's watchers (not connected): watcher w is
// user <run>-w<w> on the first URL.
func buildWatchers(r *runner) []*watcher {
	o := &r.opts
	ws := make([]*watcher, o.Watchers)
	for w := range ws {
		c := &client{
			idx:        o.Conns + w,
			user:       r.runID + "-w" + strconv.Itoa(w),
			roomIdx:    -1,
			url:        o.URLs[0],
			r:          r,
			watching:   true,
			sample:     true,
			view:       newView(),
			views:      map[int32]*recvState{},
			readerDone: make(chan struct{}),
		}
		ws[w] = &watcher{client: c, rooms: watchedRooms(w, o.WatchRooms, o.Rooms)}
		c.tracked = ws[w].rooms
		c.stateOut = r.watch.state
	}
	return ws
}

// startWatching writes w's watch frames.
func (w *watcher) startWatching() {
	names := make([]string, len(w.rooms))
	for i, ri := range w.rooms {
		names[i] = w.r.roomName(ri)
	}
	now := w.r.clock.mono()
	w.trackFrom.Store(now)
	w.from.Store(now)
	for _, f := range watchFrames(names, watchMaxFrame) {
		w.wmu.Lock()
		_ = w.ws.SetWriteDeadline(time.Now().Add(writeWait))
		err := w.ws.WriteMessage(websocket.TextMessage, f)
		w.wmu.Unlock()
		if err != nil {
			w.r.st.fail("watch:write")
			return
		}
	}
}

// handleWatch processes one frame read by a watcher.
func (c *client) handleWatch(data []byte, now int64) {
	ws := c.r.watch
	var f watchFrame
	if err := json.Unmarshal(data, &f); err != nil {
		c.r.st.fail("bad_frame")
		return
	}
	switch f.Type {
	case "summary":
		ws.summaries.Add(1)
		ri, ok := c.r.roomIndex(f.Room)
		if !ok {
			c.r.st.fail("watch:unknown_room")
			return
		}
		c.trackRoom(ri, f.Typing, f.Total, now)
	case "watching":
		ws.answers.Add(1)
		ws.accepted.Add(int64(len(f.Rooms)))
		ws.mu.Lock()
		for _, rf := range f.Refused {
			ws.refused[rf.Code]++
		}
		ws.mu.Unlock()
	case "error":
		c.r.st.fail("watch:error_frame:" + f.Code)
	}
}

// roomName is the id of run room index i.
func (r *runner) roomName(i int) string { return r.runID + "-r" + strconv.Itoa(i) }

// roomIndex is the run room index of a room id.
func (r *runner) roomIndex(room string) (int, bool) {
	s, ok := strings.CutPrefix(room, r.runID+"-r")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= r.opts.Rooms {
		return 0, false
	}
	return i, true
}

// WatchResult is the watch case of a run.
type WatchResult struct {
	Watchers   int `json:"watchers"`
	WatchRooms int `json:"watch_rooms"`
	// AtSeconds: when the watchers started watching, after the start of
	// the run.
	AtSeconds float64 `json:"at_s"`
	// Accepted rooms (summed over the watchers' `watching` frames) and
	// refused ones by code.
	Accepted int64            `json:"accepted"`
	Refused  map[string]int64 `json:"refused"`
	// Summaries read by all watchers (settle included); per watcher per
	// second of watching, from its first watch frame to the end of the
	// run (settle excluded).
	Summaries                 int64   `json:"summaries"`
	SummariesPerWatcherPerSec float64 `json:"summaries_per_watcher_per_s"`
	// ServerCPUBefore and ServerCPUAfter: CPU seconds per second of
	// Options.CPUPIDs before the watchers started and after (to the end
	// of the run).
	ServerCPUBefore float64 `json:"server_cpu_per_s_before"`
	ServerCPUAfter  float64 `json:"server_cpu_per_s_after"`
	// State: the delay to the state in the watchers' summaries and their
	// final views.
	State StateResult `json:"state"`
}

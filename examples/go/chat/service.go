package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Limits of [Service]. Every queue is bounded; the overflow rule is given
// with each.
const (
	// MaxTextBytes bounds a message's text (bytes of UTF-8).
	MaxTextBytes = 2000
	// maxBodyBytes bounds a POST body.
	maxBodyBytes = 8 << 10
	// History is how many recent messages a room keeps for streams that
	// open or reconnect; older ones are forgotten.
	History = 50
	// MaxRooms bounds the rooms held in memory. A new room beyond it
	// drops the least recently used room without open streams (its
	// history is forgotten; message ids are service-wide, so they never
	// repeat); when every room has open streams, the post or stream of a
	// new room is answered 503.
	MaxRooms = 1000
	// MaxStreams bounds the open streams of one room; one more is
	// answered 503.
	MaxStreams = 64
	// streamQueue is each stream's backlog of messages; a stream that
	// falls that far behind is ended, and its EventSource reconnects with
	// Last-Event-ID and gets the missed messages from the history.
	streamQueue = 32
	// streamWriteWait bounds each write to a stream.
	streamWriteWait = 10 * time.Second
	// stopTimeout bounds the stop command of a post.
	stopTimeout = 2 * time.Second
)

// Message is a posted message as streamed to the room. Thread is the
// thread of the room it was posted in (absent: the room itself).
type Message struct {
	ID     int64  `json:"id"`
	Room   string `json:"room"`
	Thread string `json:"thread,omitempty"`
	User   string `json:"user"`
	Name   string `json:"name,omitempty"`
	Text   string `json:"text"`
	TsMs   int64  `json:"ts_ms"`
}

// Post is the body of a post: POST /rooms/{room}/messages. Thread is
// optional: an id with the rules of a room (1..256 bytes of UTF-8
// without control characters); absent or "" = the room itself.
type Post struct {
	User   string `json:"user"`
	Name   string `json:"name,omitempty"`
	Text   string `json:"text"`
	Thread string `json:"thread,omitempty"`
}

type room struct {
	history []Message
	streams map[chan Message]struct{}
	used    time.Time // last post, stream opened or closed: the eviction order
}

// Service is a minimal chat service, in memory, for the demo page of the
// dev stack (tools/devstack serves it under /demo/chat/):
//
//	POST /rooms/{room}/messages  {"user":"alice","name":"Alice","text":"hi","thread":"t-9"}
//	     → 201 {"id":7}, the message goes to the room's streams, and
//	       [StopTypingIn] ends alice's typing in its scope (the thread, or
//	       without "thread" the room itself) on every device
//	GET  /rooms/{room}/messages  text/event-stream: the last [History]
//	     messages of the room and its threads (after Last-Event-ID when
//	     the browser reconnects), then each new one; event id =
//	     Message.ID, data = Message as JSON
//
// With [Service.EnableAssistant], a message mentioning "@assistant"
// makes the assistant think in the message's scope and then reply there
// (assistant.go).
//
// It trusts the "user" of a post: it is a demo for ELLIPSIS_AUTH=none. A
// real chat service takes the user from its own authentication, stores the
// message, and then calls [StopTyping] exactly as Post does here.
type Service struct {
	nc     *nats.Conn
	prefix string
	// OnStopError, when set, hears a failed stop command (the message is
	// posted all the same; the indicator then ends at its ttl).
	OnStopError func(room, user string, err error)

	assistant *assistant // nil without EnableAssistant

	mu     sync.Mutex
	rooms  map[string]*room
	lastID int64 // the last Message.ID, service-wide
	closed bool
	done   chan struct{}
}

// NewService returns a chat service that sends its stop commands through
// nc on "<subjectPrefix>.typing.v1.cmd" ("" = "ellipsis").
func NewService(nc *nats.Conn, subjectPrefix string) *Service {
	return &Service{nc: nc, prefix: subjectPrefix, rooms: map[string]*room{}, done: make(chan struct{})}
}

// Handler serves the routes above; mount it with http.StripPrefix.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /rooms/{room}/messages", s.handlePost)
	mux.HandleFunc("GET /rooms/{room}/messages", s.handleStream)
	return mux
}

// Close ends every stream and refuses new ones (503), then ends the
// assistant's thinks (each sends the stop of its own conn, bounded by the
// agent's timeout) and waits for them. Call it before shutting the HTTP
// server down, whose Shutdown waits for open streams.
func (s *Service) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	if s.assistant != nil {
		s.assistant.close()
	}
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg}})
}

func (s *Service) handlePost(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	var p Post
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: must be at most %d bytes", maxBodyBytes))
		return
	}
	if err := json.Unmarshal(body, &p); err != nil {
		httpError(w, http.StatusBadRequest, "body: not a JSON object: "+err.Error())
		return
	}
	if err := protocol.ValidateID("room", roomID); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := protocol.ValidateID("user", p.User); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := protocol.ValidateName("name", p.Name); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.Thread != "" {
		if err := protocol.ValidateID("thread", p.Thread); err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if p.Text == "" || len(p.Text) > MaxTextBytes || !utf8.ValidString(p.Text) {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("text: must be 1..%d bytes of UTF-8, got %d", MaxTextBytes, len(p.Text)))
		return
	}
	// The hook: the message is posted, so its author is no longer typing
	// in its scope.
	ctx, cancel := context.WithTimeout(r.Context(), stopTimeout)
	err = StopTypingIn(ctx, s.nc, s.prefix, roomID, p.Thread, p.User)
	cancel()
	if err != nil && s.OnStopError != nil {
		s.OnStopError(roomID, p.User, err)
	}
	msg, ok := s.publish(roomID, p)
	if !ok {
		httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("chat: closed, or at its limit of %d rooms, all with open streams", MaxRooms))
		return
	}
	if s.assistant != nil {
		s.assistant.heard(s, msg)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]int64{"id": msg.ID})
}

// publish appends the message to the room's history and hands it to each
// stream; a stream whose queue is full is ended (it reconnects and
// catches up from the history).
func (s *Service) publish(roomID string, p Post) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Message{}, false
	}
	rm := s.roomLocked(roomID)
	if rm == nil {
		return Message{}, false
	}
	s.lastID++
	msg := Message{ID: s.lastID, Room: roomID, Thread: p.Thread, User: p.User, Name: p.Name, Text: p.Text, TsMs: time.Now().UnixMilli()}
	rm.history = append(rm.history, msg)
	if len(rm.history) > History {
		rm.history = append(rm.history[:0:0], rm.history[len(rm.history)-History:]...)
	}
	for ch := range rm.streams {
		select {
		case ch <- msg:
		default:
			delete(rm.streams, ch)
			close(ch)
		}
	}
	return msg, true
}

// open registers a stream of roomID and returns the history after lastID.
func (s *Service) open(roomID string, lastID int64) (chan Message, []Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errors.New("chat: closed")
	}
	rm := s.roomLocked(roomID)
	if rm == nil {
		return nil, nil, fmt.Errorf("chat: at its limit of %d rooms, all with open streams", MaxRooms)
	}
	if len(rm.streams) >= MaxStreams {
		return nil, nil, fmt.Errorf("chat: room at its limit of %d streams", MaxStreams)
	}
	var backlog []Message
	for _, m := range rm.history {
		if m.ID > lastID {
			backlog = append(backlog, m)
		}
	}
	ch := make(chan Message, streamQueue)
	rm.streams[ch] = struct{}{}
	return ch, backlog, nil
}

func (s *Service) closeStream(roomID string, ch chan Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rm := s.rooms[roomID]; rm != nil {
		if _, ok := rm.streams[ch]; ok {
			delete(rm.streams, ch)
			close(ch)
			rm.used = time.Now()
		}
	}
}

// roomLocked returns roomID's room, marked used now, making it if need
// be; at MaxRooms it first drops the least recently used room without
// open streams, and returns nil when every room has some. s.mu is held.
func (s *Service) roomLocked(roomID string) *room {
	rm := s.rooms[roomID]
	if rm == nil {
		if len(s.rooms) >= MaxRooms && !s.evictLocked() {
			return nil
		}
		rm = &room{streams: map[chan Message]struct{}{}}
		s.rooms[roomID] = rm
	}
	rm.used = time.Now()
	return rm
}

// evictLocked drops the least recently used room without open streams and
// reports whether there was one. It scans every room (MaxRooms at most),
// only when a new room finds the limit reached. s.mu is held.
func (s *Service) evictLocked() bool {
	var oldest string
	var at time.Time
	for id, rm := range s.rooms {
		if len(rm.streams) == 0 && (oldest == "" || rm.used.Before(at)) {
			oldest, at = id, rm.used
		}
	}
	if oldest == "" {
		return false
	}
	delete(s.rooms, oldest)
	return true
}

func (s *Service) handleStream(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	if err := protocol.ValidateID("room", roomID); err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	lastID, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	ch, backlog, err := s.open(roomID, lastID)
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer s.closeStream(roomID, ch)
	// A stream lives longer than the server's write timeout: each write
	// gets its own deadline instead.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	write := func(m Message) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
		data, _ := json.Marshal(m)
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", m.ID, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	if _, err := io.WriteString(w, "retry: 1000\n\n"); err != nil {
		return
	}
	for _, m := range backlog {
		if write(m) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	for {
		select {
		case m, ok := <-ch:
			if !ok || write(m) != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

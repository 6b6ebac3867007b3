// Package chat is the platform side of "message posted → stop typing"
// (docs/protocol.md, "Typing commands"): when a user's message is posted,
// the chat service publishes
//
//	{"v":1,"op":"stop","room":"42","user":"alice"}
//
// on <prefix>.typing.v1.cmd. Without "conn", the stop ends every
// connection of the user in the room at once (every device), and a start
// that a gateway sent before it (or within 500 ms after) is dropped, so
// the indicator never outlives the message. A message posted in a thread
// names it ("thread"), and ends its author's typing in that thread only.
// [StopTyping] and [StopTypingIn] are the whole hook; [Service] is a tiny
// in-memory chat service built on them, with an assistant that thinks
// before it answers (package agent), which the dev stack (`make run`)
// serves to the demo page.
package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// DefaultTimeout bounds [StopTyping] when ctx has no deadline.
const DefaultTimeout = 2 * time.Second

// StopTyping publishes the stop command for (room, user) on
// "<subjectPrefix>.typing.v1.cmd" ("" = "ellipsis") and flushes, so that
// the server has it when StopTyping returns nil. Room and user must be
// valid ids (1..256 bytes of UTF-8 without control characters); the error
// names the field. NATS core is at most once: a stop lost while no worker
// is reachable leaves the indicator until its ttl runs out (about 5 s).
// It ends the user's typing in the room itself, not in its threads: see
// [StopTypingIn].
func StopTyping(ctx context.Context, nc *nats.Conn, subjectPrefix, room, user string) error {
	return StopTypingIn(ctx, nc, subjectPrefix, room, "", user)
}

// StopTypingIn is [StopTyping] for a message posted in thread of room
// ("" = the room itself): {"v":1,"op":"stop","room":R,"thread":T,"user":U}
// ends U's typing in that thread only (docs/protocol.md, "Typing
// commands"). An invalid thread is an error naming "thread".
func StopTypingIn(ctx context.Context, nc *nats.Conn, subjectPrefix, room, thread, user string) error {
	cmd := protocol.Command{V: protocol.Version, Op: protocol.OpStop, Room: room, Thread: thread, User: user}
	if err := cmd.Validate(); err != nil {
		return fmt.Errorf("stop typing: %w", err)
	}
	payload, err := json.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("stop typing: %w", err)
	}
	subject := names.New("", subjectPrefix).CommandSubject()
	if err := nc.Publish(subject, payload); err != nil {
		return fmt.Errorf("stop typing: publish on %s: %w", subject, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("stop typing: flush to the NATS server: %w", err)
	}
	return nil
}

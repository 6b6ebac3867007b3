package gateway_test

import (
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// thread and activity are ignored on the frame types that do not take
// them (docs/protocol.md, "Frames": thread on every type but typing_start
// and typing_stop, activity on every type but typing_start), whatever
// their JSON type, as every other unknown field is: a v1 client that puts
// a field of that name on its join, sync or ping (a number, an object)
// is served as before.
func TestThreadAndActivityIgnoredWhereNotTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("")
	c := e.dial("alice", "")
	c.send(`{"type":"join","room":"r","thread":42,"activity":{"x":1},"id":"j"}`)
	if f := c.read(); f.str("type") != protocol.TypeJoined || f.str("id") != "j" {
		t.Fatalf("join with a number thread: %v", f)
	}
	c.send(`{"type":"sync","room":"r","thread":["a"],"activity":7,"id":"s"}`)
	if f := c.read(); f.str("type") != protocol.TypeTyping || f.str("id") != "s" {
		t.Fatalf("sync with an array thread: %v", f)
	}
	c.send(`{"type":"ping","thread":{},"activity":true,"id":"p"}`)
	if f := c.read(); f.str("type") != protocol.TypePong {
		t.Fatalf("ping with an object thread: %v", f)
	}
	c.send(`{"type":"typing_stop","room":"r","thread":"t","activity":5}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStop || cmd.Thread != "t" || cmd.Activity != "" {
		t.Fatalf("stop with a number activity: command %+v", cmd)
	}
	c.send(`{"type":"typing_start","room":"r","thread":null,"activity":null}`)
	if cmd := e.nextCommand(); cmd.Op != protocol.OpStart || cmd.Thread != "" || cmd.Activity != "" {
		t.Fatalf("start with null thread and activity: command %+v", cmd)
	}
	// Where they are taken, a wrong JSON type is still bad_request naming
	// the field, with the id.
	c.send(`{"type":"typing_start","room":"r","thread":5,"id":"a"}`)
	if f := c.expectError(protocol.CodeBadRequest); !containsAll(f.str("message"), "thread", "string") || f.str("id") != "a" {
		t.Fatalf("start with a number thread: %v", f)
	}
	c.send(`{"type":"typing_start","room":"r","activity":5,"id":"b"}`)
	if f := c.expectError(protocol.CodeBadRequest); !containsAll(f.str("message"), "activity", "string") || f.str("id") != "b" {
		t.Fatalf("start with a number activity: %v", f)
	}
	e.noCommand(100 * time.Millisecond)
}

package worker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// batchOf writes cmds as a gateway's batch (docs/protocol.md, "Command
// batches"); extra raw elements go after them.
func batchOf(t *testing.T, cmds []protocol.Command, extra ...string) []byte {
	t.Helper()
	b := protocol.AppendBatchHead(nil)
	for i := range cmds {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = protocol.AppendCommand(b, &cmds[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range extra {
		b = append(append(b, ','), x...)
	}
	return protocol.AppendBatchTail(b)
}

// The worker takes both forms of the command subject: a batch's commands
// are applied in order, like the same commands sent one by one, and an
// invalid element is dropped and counted on its own, the others applied.
func TestBatchAndSingleForms(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s, s43 := e.subscribe("42"), e.subscribe("43") // no order across connections
		before := e.processed()
		e.publishRaw(batchOf(t, []protocol.Command{
			start("42", "alice", "Alice", "gw-a:1", 1),
			start("43", "bob", "Bob", "gw-a:2", 1),
			stop("42", "alice", "gw-a:1", 2),
		}, `{"v":1,"op":"start","room":"42","conn":"gw-a:3"}`))
		e.eventually("the batch processed", func() bool { return e.processed() >= before+4 })
		s.Expect(protocol.TypeTypingStart, "42", "alice", "", waitLong)
		s43.Expect(protocol.TypeTypingStart, "43", "bob", "", waitLong)
		s.Expect(protocol.TypeTypingStop, "42", "alice", "stopped", waitLong)
		if n := e.metric("ellipsis_worker_invalid_payloads_total", map[string]string{"field": "user"}); n != 1 {
			t.Fatalf("invalid_payloads_total{user} = %v, want 1 (the invalid element)", n)
		}
		// The single form still works, beside batches.
		e.send(stop("43", "bob", "gw-a:2", 2))
		s43.Expect(protocol.TypeTypingStop, "43", "bob", "stopped", waitLong)
		if got := typists(e.snapshot("42")); len(got) != 0 {
			t.Fatalf("room 42: %v", got)
		}
	})
}

// A batch refused whole (malformed, wrong v, empty, too long) counts once,
// by its field, and changes nothing.
func TestMalformedBatchRefused(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		e.startWorker()
		s := e.subscribe("r")
		ok, _ := json.Marshal(start("r", "u", "", "c", 1))
		many := make([]protocol.Command, protocol.MaxBatchCommands+1)
		for i := range many {
			many[i] = start("r", "u", "", "c", uint64(i+1))
		}
		e.sendRaw(
			[]byte(`{"v":1,"op":"batch","cmds":[`+string(ok)), // unterminated
			[]byte(`{"v":2,"op":"batch","cmds":[`+string(ok)+`]}`),
			[]byte(`{"v":1,"op":"batch","cmds":[]}`),
			batchOf(t, many),
		)
		for f, n := range map[string]float64{"json": 1, "v": 1, "cmds": 2} {
			if got := e.metric("ellipsis_worker_invalid_payloads_total", map[string]string{"field": f}); got != n {
				t.Errorf("invalid_payloads_total{field=%q} = %v, want %v", f, got, n)
			}
		}
		s.ExpectNone(100 * time.Millisecond)
	})
}

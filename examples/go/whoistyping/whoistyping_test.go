package whoistyping_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/examples/go/whoistyping"
	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// DefaultTimeout is the gateway's: ELLIPSIS_SNAPSHOT_TIMEOUT's default.
func TestDefaultTimeoutIsTheGateways(t *testing.T) {
	if d := config.Default().SnapshotTimeout; whoistyping.DefaultTimeout != d {
		t.Errorf("DefaultTimeout %s, ELLIPSIS_SNAPSHOT_TIMEOUT's default %s", whoistyping.DefaultTimeout, d)
	}
}

func TestAsk(t *testing.T) {
	st := stacktest.Start(t, nil)
	room := "who? {42}"
	alice, bob := st.Dial(t, "alice"), st.Dial(t, "bob")
	alice.Join(room)
	bob.Join(room)

	ctx, cancel := context.WithTimeout(context.Background(), stacktest.Wait)
	defer cancel()
	reply, err := whoistyping.Ask(ctx, st.NC, st.Prefix, room)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Users) != 0 || reply.Total != 0 {
		t.Fatalf("before typing: %+v, want nobody", reply)
	}

	alice.Send(map[string]any{"type": "typing_start", "room": room})
	bob.Until(map[string]any{"type": "typing_start", "user": "alice"}) // the state is in Redis now
	reply, err = whoistyping.Ask(ctx, st.NC, st.Prefix, room)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Total != 1 || len(reply.Users) != 1 || reply.Users[0].User != "alice" || reply.Users[0].Name != "Alice" || reply.Room != room {
		t.Fatalf("while alice types: %+v", reply)
	}
}

func TestAskErrors(t *testing.T) {
	st := stacktest.Start(t, nil)
	if _, err := whoistyping.Ask(context.Background(), st.NC, st.Prefix, ""); err == nil || !strings.Contains(err.Error(), "room") {
		t.Fatalf("empty room: %v, want an error naming room", err)
	}
	// A prefix no worker serves: no responders, at once.
	if _, err := whoistyping.Ask(context.Background(), st.NC, st.Prefix+"x", "42"); err == nil || !strings.Contains(err.Error(), "no presence worker") {
		t.Fatalf("no worker: %v", err)
	}
}

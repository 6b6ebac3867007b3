package integration

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The snapshot cap end to end: with ELLIPSIS_SNAPSHOT_MAX 2 and five
// typists, joined, typing (sync) and GET /v1/rooms/{room}/typing list the
// two most recently active, by user id, with total 5; the self filter takes a
// listed typist out of both the list and the total.
func TestCutSnapshotCarriesTotal(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1, func(c *config.Config) {
		c.SnapshotMax = 2
		c.TypingTTL = 30 * time.Second // the typists stay shown throughout
		c.TypingThrottle = 2 * time.Second
		c.TypingRefresh = 4 * time.Second
		c.TypingIdleStop = 3 * time.Second
	})
	const room = "crowd"
	obs := dial(t, s.wsURL(0, "observer", ""), "observer")
	obs.join(room)
	// The list holds the most recently active typists (their scores, Redis
	// TIME in ms plus ttl), sorted by user id: starting e..a in turn, a and
	// b. Two starts applied in the same millisecond tie, and a tie goes to
	// the later user id (c over b), so each start is applied a millisecond
	// or more after the previous one's ts_ms, on the server's clock.
	var last int64
	for _, u := range []string{"e", "d", "c", "b", "a"} {
		c := dial(t, s.wsURL(0, u, "N "+u), u)
		c.join(room)
		c.start(room)
		f := obs.next(isStart(room, u), 5*time.Second, "typing_start of "+u)
		if f.TsMs <= last {
			t.Fatalf("%s's typing_start has ts_ms %d, not after the previous start's %d", u, f.TsMs, last)
		}
		last = f.TsMs
		time.Sleep(2 * time.Millisecond) // Redis TIME is past last's millisecond
	}
	check := func(what string, list []protocol.Typist, total *int, wantUsers string, wantTotal int) {
		t.Helper()
		if got := users(list); got != wantUsers || total == nil || *total != wantTotal {
			t.Fatalf("%s: users %s total %v; want %s total %d", what, got, deref(total), wantUsers, wantTotal)
		}
	}

	late := dial(t, s.wsURL(0, "late", ""), "late")
	j := late.join(room)
	check("joined", j.Typing, j.Total, "a,b", 5)

	late.send(map[string]any{"type": "sync", "room": room, "id": "s1"})
	f := late.next(func(f frame) bool { return f.Type == "typing" && f.ID == "s1" }, 5*time.Second, "typing snapshot")
	check("typing", f.Users, f.Total, "a,b", 5)

	var body struct {
		Users []protocol.Typist `json:"users"`
		Total *int              `json:"total"`
	}
	u := "http://" + s.gateways[0].HTTPAddr() + "/v1/rooms/" + url.PathEscape(room) + "/typing?user=late"
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	check("HTTP", body.Users, body.Total, "a,b", 5)

	// A listed typist joining from a second device: itself filtered out of
	// the list and the total.
	a2 := dial(t, s.wsURL(0, "a", "N a"), "a2")
	j = a2.join(room)
	check("joined by a", j.Typing, j.Total, "b", 4)
}

func deref(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}

package demo

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

func TestIndicator(t *testing.T) {
	tests := []struct {
		names []string
		want  string
	}{
		{nil, "(nobody)"},
		{[]string{"Alice"}, "Alice is typing…"},
		{[]string{"Alice", "Bob"}, "Alice and Bob are typing…"},
		{[]string{"Alice", "Bob", "Carol"}, "Alice, Bob and Carol are typing…"},
		{[]string{"Alice", "Bob", "Carol", "Dan"}, "Alice, Bob and 2 others are typing…"},
		{[]string{"Alice", "Bob", "Carol", "Dan", "Eve", "Fay"}, "Alice, Bob and 4 others are typing…"},
	}
	for _, tt := range tests {
		if got := Indicator(tt.names); got != tt.want {
			t.Errorf("Indicator(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}

func TestView(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	v := newView("bob", "r", 5*time.Second)
	check := func(want string) {
		t.Helper()
		if got := v.line(); got != want {
			t.Fatalf("line = %q, want %q", got, want)
		}
	}
	v.apply(protocol.ServerFrame{Type: "joined", Room: "r", Typing: []protocol.Typist{{User: "carol", Name: "Carol"}}}, at(0))
	check("Carol is typing…")
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "alice", Name: "Alice", TTLMs: 2000}, at(100))
	check("Carol and Alice are typing…")
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "bob", Name: "Bob"}, at(150)) // self: ignored
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "other", User: "dan"}, at(150))          // other room: ignored
	check("Carol and Alice are typing…")
	// Alice's local expiry: 2 s after her last start; the snapshot entry for
	// Carol took the 5 s default.
	v.expire(at(2099))
	check("Carol and Alice are typing…")
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "alice", TTLMs: 2000}, at(2000)) // refresh, no name: keeps "Alice"
	v.expire(at(3999))
	check("Carol and Alice are typing…")
	v.expire(at(4000))
	check("Carol is typing…")
	v.apply(protocol.ServerFrame{Type: "typing_stop", Room: "r", User: "carol", Reason: "stopped"}, at(4100))
	check("(nobody)")
	// A start without a name shows the user id; a snapshot keeps the order
	// of users already shown and drops the others.
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "dan"}, at(5000))
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "eve", Name: "Eve"}, at(5000))
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "fay", Name: "Fay"}, at(5000))
	check("dan, Eve and Fay are typing…")
	v.apply(protocol.ServerFrame{Type: "typing_start", Room: "r", User: "gus", Name: "Gus"}, at(5000))
	check("dan, Eve and 2 others are typing…")
	v.apply(protocol.ServerFrame{Type: "typing", Room: "r", Users: []protocol.Typist{{User: "gus"}, {User: "zed", Name: "Zed"}, {User: "eve"}}}, at(5100))
	check("Eve, Gus and Zed are typing…")
}

func msg(end keystrokes.End, gapAfter time.Duration, pressMs ...int) keystrokes.Message {
	m := keystrokes.Message{End: end, GapAfter: gapAfter}
	for _, ms := range pressMs {
		m.Keys = append(m.Keys, keystrokes.Keystroke{Key: "a", Press: time.Duration(ms) * time.Millisecond})
	}
	m.EndAt = m.Keys[len(m.Keys)-1].Press
	if end == keystrokes.EndSend {
		m.EndAt += 200 * time.Millisecond
	}
	return m
}

func describe(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		if s.kind == stepKey {
			b.WriteString("k")
		} else {
			b.WriteString("S")
		}
		b.WriteString("@" + s.at.String() + " ")
	}
	return strings.TrimSpace(b.String())
}

func TestBuildScript(t *testing.T) {
	msgs := []keystrokes.Message{
		msg(keystrokes.EndSend, 10*time.Second, 1000, 1300),         // sent at 1500; pause capped at 4.5 s
		msg(keystrokes.EndGap, 3500*time.Millisecond, 20000, 20100), // not sent; pause 3.5 s
		msg(keystrokes.EndMaxKeys, 100*time.Millisecond, 30000),     // sent 300 ms after; pause raised to 1.2 s
	}
	p := pacing{speed: 1, minPause: 1200 * time.Millisecond, maxPause: 4500 * time.Millisecond, sendDelay: 300 * time.Millisecond}
	got := describe(buildScript(msgs, 0, time.Second, time.Minute, 2, p))
	// start 1s: k@1s k@1.3s S@1.5s; +4.5s -> 6s: k@6s k@6.1s (gap) ; +3.5s -> 9.6s: k@9.6s S@9.9s (2nd sent: stop)
	want := "k@1s k@1.3s S@1.5s k@6s k@6.1s k@9.6s S@9.9s"
	if got != want {
		t.Fatalf("script\n got: %s\nwant: %s", got, want)
	}

	// Speed 2 halves every recorded duration, pauses included.
	p.speed = 2
	got = describe(buildScript(msgs, 0, 0, time.Minute, 1, p))
	if want := "k@0s k@150ms S@250ms"; got != want {
		t.Fatalf("speed 2\n got: %s\nwant: %s", got, want)
	}

	// until cuts the script; no send after it; first message offset and
	// wrap-around.
	p.speed = 1
	got = describe(buildScript(msgs, 2, 0, 2*time.Second, 0, p))
	// msg2 at 0: k@0 S@300ms; pause 1.2s -> 1.5s: msg0 k@1.5s k@1.8s, send at 2s >= until: cut.
	if want := "k@0s S@300ms k@1.5s k@1.8s"; got != want {
		t.Fatalf("until\n got: %s\nwant: %s", got, want)
	}
	if s := buildScript(nil, 0, 0, time.Second, 0, p); s != nil {
		t.Fatalf("no messages: %v", s)
	}
}

func TestBuildScriptSampleIsMonotonic(t *testing.T) {
	ss, err := keystrokes.Sample()
	if err != nil {
		t.Fatal(err)
	}
	p := pacing{speed: 1, minPause: DefaultMinPause, maxPause: DefaultMaxPause, sendDelay: 300 * time.Millisecond}
	for _, s := range ss {
		msgs := s.Messages(keystrokes.SplitOptions{MaxKeys: DefaultMaxKeys, TextOnly: true})
		steps := buildScript(msgs, 0, 0, 10*time.Minute, 0, p)
		if len(steps) < 500 {
			t.Errorf("session %d: %d steps in 10 minutes", s.ID, len(steps))
		}
		for i := 1; i < len(steps); i++ {
			if steps[i].at < steps[i-1].at {
				t.Fatalf("session %d: step %d at %s before %s", s.ID, i, steps[i].at, steps[i-1].at)
			}
		}
	}
}

func TestMintHS256(t *testing.T) {
	now := time.Unix(1764480000, 0)
	tok, err := MintHS256([]byte("s3cret"), "alice", "Alice", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGateway{secret: "s3cret"}
	req := mustRequest(t, tok)
	user, name, ok := g.auth(req)
	if !ok || user != "alice" || name != "Alice" {
		t.Fatalf("auth = %q %q %v", user, name, ok)
	}
	g.secret = "other"
	if _, _, ok := g.auth(req); ok {
		t.Fatal("token verified with the wrong secret")
	}
	if _, err := MintHS256(nil, "a", "", now, time.Hour); err == nil {
		t.Fatal("empty secret accepted")
	}
}

var lineRE = regexp.MustCompile(`^\[\s*\d+\.\ds\] (\w+)\s+sees: (.*)$`)

// lastLines returns each user's last printed indicator line, and all lines.
func lastLines(out string) (map[string]string, []string) {
	last := map[string]string{}
	var all []string
	for _, l := range strings.Split(out, "\n") {
		if m := lineRE.FindStringSubmatch(l); m != nil {
			last[m[1]] = m[2]
			all = append(all, l)
		}
	}
	return last, all
}

func TestRunAgainstFakeGateway(t *testing.T) {
	g := newFakeGateway(t, protocol.ClientConfig{TTLMs: 2000, RefreshMs: 1000, IdleStopMs: 600, Auth: "none"}, "")
	var out testkit.SyncBuffer
	res, err := Run(context.Background(), Options{
		URL:      g.wsURL(),
		Room:     "room-1",
		Speed:    2,
		Duration: 4 * time.Second,
		Users: []User{
			{ID: "alice", Name: "Alice", Session: 1, StartAfter: 0},
			{ID: "bob", Name: "Bob", Session: 0, StartAfter: 200 * time.Millisecond},
			{ID: "carol", Name: "Carol", Session: 2, StartAfter: 400 * time.Millisecond},
		},
		Settle:  300 * time.Millisecond,
		Verbose: true,
		Out:     &out,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Logf("output:\n%s", text)
	checkDemoOutput(t, text)
	if len(res.Users) != 3 {
		t.Fatalf("users = %+v", res.Users)
	}
	for _, u := range res.Users {
		checkUserSent(t, g, u)
	}
	var sum bytes.Buffer
	if err := res.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("summary:\n%s", sum.String())
	for _, want := range []string{"keystrokes/frame", "alice", "total", "fewer frames than one per keystroke"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

// checkDemoOutput checks the demo's verbose output for alice, bob and
// carol: the server's timers, enough indicator lines, each ending on
// Nobody, an overlap shown and the sent frames logged.
func checkDemoOutput(t *testing.T, text string) {
	t.Helper()
	if !strings.Contains(text, "refresh 1s, idle stop 600ms, ttl 2s") {
		t.Errorf("timers from /v1/config not used")
	}
	last, all := lastLines(text)
	if len(all) < 6 {
		t.Fatalf("only %d indicator lines", len(all))
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		if last[u] != Nobody {
			t.Errorf("%s's last line is %q, want %q", u, last[u], Nobody)
		}
	}
	if !strings.Contains(text, " are typing…") {
		t.Errorf("no overlap shown (want some \"X and Y are typing…\")")
	}
	if !strings.Contains(text, "sends typing_start (start)") {
		t.Errorf("verbose: no sent lines")
	}
}

// checkUserSent checks one user's stats after 4 s of typing with refresh
// 1s, and that the frames g received from that user are exactly what the
// stats say was sent.
func checkUserSent(t *testing.T, g *fakeGateway, u UserResult) {
	t.Helper()
	s := u.Sent
	if s.Keystrokes == 0 || s.Starts == 0 {
		t.Errorf("%s typed nothing: %+v", u.ID, s)
	}
	if s.Starts != s.Stops() {
		t.Errorf("%s: %d starts but %d stops; every burst must end", u.ID, s.Starts, s.Stops())
	}
	if s.Refreshes == 0 {
		t.Errorf("%s: no refresh in 4 s of typing with refresh 1s: %+v", u.ID, s)
	}
	if u.Received == 0 || u.Lines == 0 {
		t.Errorf("%s received %d events, printed %d lines", u.ID, u.Received, u.Lines)
	}
	frames := g.received(u.ID)
	var starts, stops int
	for _, f := range frames {
		switch f {
		case "typing_start":
			starts++
		case "typing_stop":
			stops++
		}
	}
	if starts != s.Starts+s.Refreshes || stops != s.Stops() || frames[0] != "join" {
		t.Errorf("%s: server got %v; stats %+v", u.ID, frames, s)
	}
}

func TestRunMessagesBound(t *testing.T) {
	g := newFakeGateway(t, protocol.ClientConfig{TTLMs: 5000, RefreshMs: 4000, IdleStopMs: 3000, Auth: "none"}, "")
	res, err := Run(context.Background(), Options{
		URL:      g.wsURL(),
		Speed:    20,
		Messages: 1,
		Users:    []User{{ID: "alice", Name: "Alice"}, {ID: "bob", Name: "Bob", Session: 1}},
		Settle:   100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range res.Users {
		if u.Sent.Messages != 1 || u.Sent.Starts != u.Sent.Stops() {
			t.Errorf("%s: %+v, want exactly one message and every start stopped", u.ID, u.Sent)
		}
	}
}

func TestRunJWT(t *testing.T) {
	g := newFakeGateway(t, protocol.ClientConfig{TTLMs: 5000, RefreshMs: 4000, IdleStopMs: 3000, Auth: "jwt"}, "s3cret")
	opts := Options{URL: g.wsURL(), Speed: 20, Messages: 1, Settle: 50 * time.Millisecond,
		Users: []User{{ID: "alice", Name: "Alice"}, {ID: "bob", Name: "Bob", Session: 1}}}

	_, err := Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_AUTH=jwt") || !strings.Contains(err.Error(), "-jwt-secret") {
		t.Fatalf("no token: err = %v", err)
	}
	opts.JWTSecret = "wrong"
	_, err = Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "unauthorized: bad token") {
		t.Fatalf("wrong secret: err = %v", err)
	}
	opts.JWTSecret = "s3cret"
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Users[0].Received == 0 {
		t.Errorf("alice received nothing with JWTs")
	}
}

func TestRunStackNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(context.Background(), Options{URL: "ws://" + addr + "/v1/ws", DialTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "is `make run` running?") {
		t.Fatalf("err = %v, want the make run hint", err)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{URL: "http://localhost:8080/v1/ws"},
		{Speed: -1},
		{Users: []User{{ID: "a"}, {ID: "a"}}},
		{Room: strings.Repeat("x", 300)},
	} {
		if _, err := Run(context.Background(), o); err == nil || !strings.HasPrefix(err.Error(), "demo: ") {
			t.Errorf("Run(%+v) err = %v", o, err)
		}
	}
	g := newFakeGateway(t, protocol.ClientConfig{TTLMs: 4000, RefreshMs: 4000, IdleStopMs: 3000, Auth: "none"}, "")
	if _, err := Run(context.Background(), Options{URL: g.wsURL()}); err == nil || !strings.Contains(err.Error(), "refresh must be below") {
		t.Errorf("refresh >= ttl from the server: err = %v", err)
	}
}

func TestRunCancelled(t *testing.T) {
	g := newFakeGateway(t, protocol.ClientConfig{TTLMs: 5000, RefreshMs: 4000, IdleStopMs: 3000, Auth: "none"}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Options{URL: g.wsURL(), Duration: time.Minute})
	if err == nil || res == nil {
		t.Fatalf("Run = %v, %v; want the partial result and ctx's error", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %s", d)
	}
}

func TestTypistStatsSum(t *testing.T) {
	r := Result{Users: []UserResult{{Sent: typist.Stats{Keystrokes: 3, Starts: 1}}, {Sent: typist.Stats{Keystrokes: 2, SentStops: 1}}}}
	if got := r.Total(); got.Keystrokes != 5 || got.Events() != 2 {
		t.Fatalf("Total = %+v", got)
	}
}

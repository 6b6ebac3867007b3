package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/testkit"
)

// Gateway shutdown. SIGTERM to a gateway
// with twelve clients starts its lame duck: at once /readyz is 503 and new
// upgrades are refused (503, JSON error), while its connections are served
// normally for ELLIPSIS_LAME_DUCK (3 s, the default): a ping is answered
// and a typing_start reaches a receiver on another gateway. Then the
// clients are closed with 1001 spread over ELLIPSIS_SHUTDOWN_DRAIN (1 s
// here), each typist's typing_stop disconnected reaches the receiver
// within 1 s of its close, and the process exits 0.
func TestGatewaySIGTERMDrains(t *testing.T) {
	t.Parallel()
	const lameDuck, drain = 3 * time.Second, time.Second
	ps := newProcStack(t, nil)
	ps.startWorker(nil)
	ps.startWorker(nil)
	g0 := ps.startGateway(map[string]string{"ELLIPSIS_SHUTDOWN_DRAIN": drain.String(), "ELLIPSIS_LAME_DUCK": lameDuck.String()})
	g1 := ps.startGateway(nil)
	room := "shutdown"
	bob := watch(dial(t, g1.wsURL("bob", ""), "bob"))
	bob.join(room)
	var clients []*client
	var typists []string
	for i := range 12 {
		u := fmt.Sprintf("c%02d", i)
		c := dial(t, g0.wsURL(u, ""), u)
		c.join(room)
		if i%3 != 0 {
			stop := keepTyping(c, room, testRefresh)
			defer stop()
			typists = append(typists, u)
		}
		clients = append(clients, c)
	}
	bob.waitShown(room, strings.Join(typists, ","), 3*time.Second)
	since := bob.mark()

	readyAtFirstClose := watchReadyAtFirstClose(clients, g0.adminAddr)
	// term is taken before the signal is sent: the gateway starts its lame
	// duck when the signal arrives, which can be before kill returns, so a
	// time taken after kill could make an on-time close look early.
	term := time.Now()
	g0.kill(syscall.SIGTERM)

	// The lame duck. /readyz fails at once.
	readyFailed := waitReadyz(t, g0.adminAddr, 503, lameDuck, "shutdown")
	// New upgrades are refused with a JSON 503.
	status, body := refusedUpgrade(t, g0.wsURL("late", ""))
	if status != 503 || !strings.Contains(body, `"unavailable"`) || !strings.Contains(body, "shutting down") {
		t.Fatalf("upgrade during the lame duck: HTTP %d %s, want 503 unavailable", status, body)
	}
	refused := time.Now()
	// Open connections are still served: a ping is answered, and a new
	// typist (c00) reaches bob on the other gateway.
	clients[0].send(map[string]any{"type": "ping", "id": "lame"})
	clients[0].next(func(f frame) bool { return f.Type == "pong" && f.ID == "lame" }, lameDuck, "pong during the lame duck")
	stopC00 := keepTyping(clients[0], room, testRefresh)
	defer stopC00()
	typists = append(typists, "c00")
	servedAt := bob.waitShown(room, sortedCSV(typists...), lameDuck)
	for _, c := range clients {
		select {
		case <-c.done:
			t.Fatalf("%s closed during the lame duck (%v after SIGTERM)", c.name, c.endedAt.Sub(term))
		default:
		}
	}
	t.Logf("lame duck: /readyz 503 %v, upgrade refused %v, a new typist shown elsewhere %v after SIGTERM",
		readyFailed.Sub(term), refused.Sub(term), servedAt.Sub(term))

	closedAt := checkDrainCloses(t, clients, term, lameDuck, drain)

	checkStopsAfterCloses(t, bob, room, since, typists, closedAt)

	<-readyAtFirstClose.done
	if readyAtFirstClose.code != 503 || !strings.Contains(readyAtFirstClose.body, "shutdown") {
		t.Fatalf("/readyz when the first client was closed: %d %s, want 503 shutdown", readyAtFirstClose.code, readyAtFirstClose.body)
	}
	checkExitAfterDrain(t, g0, term, lameDuck, drain)
}

// checkExitAfterDrain checks that the gateway g exits 0 within lame duck +
// drain + 5 s of its SIGTERM at term.
func checkExitAfterDrain(t *testing.T, g *proc, term time.Time, lameDuck, drain time.Duration) {
	t.Helper()
	code, exited := g.waitExit(t, 30*time.Second)
	if code != 0 {
		t.Fatalf("gateway exited with %d after SIGTERM", code)
	}
	if d := exited.Sub(term); d > lameDuck+drain+5*time.Second {
		t.Fatalf("gateway took %v to exit after SIGTERM with a %v lame duck and a %v drain", d, lameDuck, drain)
	} else {
		t.Logf("gateway exited %v after SIGTERM", d)
	}
}

// readyAtClose is the gateway's /readyz answer when its first client was
// closed; done is closed once it is set.
type readyAtClose struct {
	sync.Once
	code int
	body string
	done chan struct{}
}

// watchReadyAtFirstClose watches the first close among clients: readiness
// (adminAddr's /readyz) must already say "shutdown" then.
func watchReadyAtFirstClose(clients []*client, adminAddr string) *readyAtClose {
	readyAtFirstClose := &readyAtClose{done: make(chan struct{})}
	for _, c := range clients {
		go func() {
			<-c.done
			readyAtFirstClose.Do(func() {
				readyAtFirstClose.code, readyAtFirstClose.body = readyz(adminAddr)
				close(readyAtFirstClose.done)
			})
		}()
	}
	return readyAtFirstClose
}

// checkDrainCloses checks 1001 for everyone, spread over the drain window,
// after the lame duck, and returns each client's close time by name.
func checkDrainCloses(t *testing.T, clients []*client, term time.Time, lameDuck, drain time.Duration) map[string]time.Time {
	t.Helper()
	var times []time.Time
	closedAt := map[string]time.Time{}
	for _, c := range clients {
		code, endedAt := c.closeCode(lameDuck + drain + 5*time.Second)
		if code != 1001 {
			t.Fatalf("%s closed with %d, want 1001 (going away)", c.name, code)
		}
		times = append(times, endedAt)
		closedAt[c.name] = endedAt
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if d := times[0].Sub(term); d < lameDuck {
		t.Fatalf("first client closed %v after SIGTERM, inside the %v lame duck", d, lameDuck)
	}
	spread := times[len(times)-1].Sub(times[0])
	t.Logf("closes from %v to %v after SIGTERM (spread %v over a %v drain)", times[0].Sub(term), times[len(times)-1].Sub(term), spread, drain)
	if spread < drain/2 || spread > drain+500*time.Millisecond {
		t.Fatalf("closes spread over %v, want about the drain window %v", spread, drain)
	}
	return closedAt
}

// checkStopsAfterCloses checks that receivers elsewhere (bob) see every
// typist stop, as disconnected, within 1 s of that typist's close.
func checkStopsAfterCloses(t *testing.T, bob *view, room string, since int, typists []string, closedAt map[string]time.Time) {
	t.Helper()
	bob.waitShown(room, "", 2*time.Second)
	var worst time.Duration
	for _, u := range typists {
		stops := bob.frames(since, isStop(room, u, ""))
		if len(stops) != 1 || stops[0].Reason != "disconnected" {
			t.Fatalf("%s: stops %v, want one disconnected", u, stops)
		}
		d := stops[0].at.Sub(closedAt[u])
		if d > time.Second {
			t.Fatalf("%s: typing_stop disconnected reached bob %v after its close, want ≤ 1s", u, d)
		}
		worst = max(worst, d)
	}
	recordRecovery(t, "gateway SIGTERM: typing_stop disconnected after its client's close (worst)", worst)
}

// refusedUpgrade tries a WebSocket upgrade that must be refused and
// returns the HTTP status and body of the refusal.
func refusedUpgrade(t *testing.T, rawURL string) (int, string) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
	conn, resp, err := d.Dial(rawURL, nil)
	if err == nil {
		conn.Close()
		t.Fatal("a new WebSocket was accepted during shutdown")
	}
	if resp == nil {
		t.Fatalf("upgrade during shutdown: %v, want an HTTP refusal", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Worker shutdown. SIGTERM to one of two workers in the middle of
// a burst of 10000 commands: it stops taking commands, applies every one it
// had already received, and exits 0; not one command is lost (each of the
// 10000 starts is published exactly once).
func TestWorkerSIGTERMFinishesInFlight(t *testing.T) {
	t.Parallel()
	// A start applied more than ttl after its ts_ms is dropped as late
	// (docs/protocol.md, "Typing commands"): with the suite's 1.5 s ttl, a loaded
	// machine's backlog of the burst (seconds) would drop thousands of
	// them by design. A ttl longer than the test leaves only losses.
	ps := newProcStack(t, map[string]string{"ELLIPSIS_TYPING_TTL": "60s"})
	w0 := ps.startWorker(nil)
	w1 := ps.startWorker(nil)
	nc := connectNATS(t, ps.s.cfg.NATSURL)
	n := names.New(ps.s.cfg.KeyPrefix, ps.s.cfg.SubjectPrefix)

	opt, _ := redis.ParseURL(testkit.RedisURL())
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := rdb.PSubscribe(ctx, ps.s.cfg.KeyPrefix+"chat:room:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	ch := sub.Channel(redis.WithChannelSize(20000))

	const rooms, perRoom = 100, 100
	const total = rooms * perRoom
	var term time.Time
	for i := range total {
		cmd := protocol.Command{V: 1, Op: protocol.OpStart, Room: fmt.Sprintf("r%d", i%rooms), User: fmt.Sprintf("u%d", i),
			Conn: fmt.Sprintf("c:%d", i), Seq: 1, TsMs: time.Now().UnixMilli()}
		b, _ := json.Marshal(cmd)
		if err := nc.Publish(n.CommandSubject(), b); err != nil {
			t.Fatal(err)
		}
		if i == total/3 {
			_ = nc.Flush()
			if metric(t, w0.adminAddr, "ellipsis_worker_commands_total") == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			term = time.Now()
			w0.kill(syscall.SIGTERM)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(seen) < total {
		select {
		case m := <-ch:
			ev, err := protocol.DecodeRoomEvent([]byte(m.Payload))
			if err != nil {
				t.Fatalf("bad event %q: %v", m.Payload, err)
			}
			if ev.Type == protocol.TypeTypingStart {
				seen[ev.User]++
			}
		case <-deadline:
			t.Fatalf("%d of %d starts published: commands were lost across the worker's SIGTERM (worker1 dropped %v as late)",
				len(seen), total, metric(t, w1.adminAddr, "ellipsis_worker_commands_total", `op="start"`, `outcome="late"`))
		}
	}
	for u, k := range seen {
		if k != 1 {
			t.Fatalf("%s started %d times", u, k)
		}
	}
	code, exited := w0.waitExit(t, 25*time.Second)
	if code != 0 {
		t.Fatalf("worker exited with %d after SIGTERM", code)
	}
	if w0.countLines("presence worker stopped") != 1 {
		t.Fatalf("worker did not log its clean stop:\n%s", tail(w0.out.String(), 20))
	}
	t.Logf("all %d commands applied once; worker0 exited %v after SIGTERM", total, exited.Sub(term))
}

// Shutdown(ctx) of both servers is safe to call twice,
// also concurrently, and the second call does not wait for a new drain.
func TestShutdownTwiceIsSafe(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, 1)
	c := dial(t, s.wsURL(0, "alice", ""), "alice")
	c.join("twice")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 2 {
		wg.Add(2)
		go func() { defer wg.Done(); errs[i] = s.gateways[0].Shutdown(ctx) }()
		go func() { defer wg.Done(); errs[2+i] = s.workers[0].Shutdown(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Shutdown %d: %v", i, err)
		}
	}
	began := time.Now()
	if err := s.gateways[0].Shutdown(ctx); err != nil {
		t.Fatalf("third gateway Shutdown: %v", err)
	}
	if err := s.workers[0].Shutdown(ctx); err != nil {
		t.Fatalf("third worker Shutdown: %v", err)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Fatalf("a repeated Shutdown took %v", d)
	}
	if code, _ := c.closeCode(2 * time.Second); code != 1001 {
		t.Fatalf("client closed with %d, want 1001", code)
	}
}

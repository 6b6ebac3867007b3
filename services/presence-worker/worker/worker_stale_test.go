package worker

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/store"
	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/shared/ratelog"
)

// pauseProxy forwards TCP to a Redis server and can hold every byte in
// both directions: the worker behind it is frozen as far as Redis can tell
// (the in-process equivalent of SIGSTOP for its Redis calls).
type pauseProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
}

func newPauseProxy(t *testing.T, target string) *pauseProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pauseProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { p.resume(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *pauseProxy) serve(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pump(up, c)
	go pump(c, up)
	<-done
}

func (p *pauseProxy) gate() {
	p.mu.Lock()
	for p.paused {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *pauseProxy) pause() { p.mu.Lock(); p.paused = true; p.mu.Unlock() }
func (p *pauseProxy) resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// A worker frozen (its Redis traffic held) with a client's refresh in hand
// while another worker applies the platform's stop without conn: resumed,
// it drops the refresh (superseded, counted) and the user never reappears.
// A start that waited longer than ttl is dropped and counted as late.
func TestFrozenWorkerNeverShowsStaleStart(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Backend) {
		e := newEnv(t, be)
		u, err := url.Parse(e.cfg.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy := newPauseProxy(t, u.Host)
		u.Host = proxy.ln.Addr().String()
		e.startWorker(func(c *config.Config) { c.RedisURL = u.String() })
		s := e.subscribe("r")
		first := start("r", "alice", "Alice", "c1", 1)
		first.TsMs = time.Now().UnixMilli()
		e.send(first)
		s.Expect(protocol.TypeTypingStart, "r", "alice", "", waitLong)

		proxy.pause()
		held := start("r", "alice", "Alice", "c1", 2)
		held.TsMs = time.Now().UnixMilli()
		p, _ := json.Marshal(held)
		e.publishRaw(p)
		time.Sleep(100 * time.Millisecond) // let the frozen worker take it (either way it must be dropped)
		time.Sleep(10 * time.Millisecond)  // the stop comes after the start was sent

		// Another worker applies the chat service's "message posted".
		m, _ := newMetrics(prometheus.NewRegistry(), false)
		other, err := store.New(store.Options{Kind: e.cfg.Store, PubSub: be.PubSub, Redis: e.rdb, Names: e.names, TTL: testTTL, Throttle: testThrottle, Metrics: &m.Metrics, Log: zap.NewNop(), RateLog: ratelog.New(zap.NewNop(), time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := other.Stop(context.Background(), stop("r", "alice", "", 0), protocol.ReasonStopped); err != nil || out != store.OutcomeStopped {
			t.Fatalf("platform stop: %q, %v", out, err)
		}
		s.Expect(protocol.TypeTypingStop, "r", "alice", protocol.ReasonStopped, waitLong)

		proxy.resume()
		defer func() {
			if t.Failed() {
				for _, o := range []string{store.OutcomeStarted.String(), store.OutcomeRefreshed.String(), store.OutcomeThrottled.String(), store.OutcomeStale.String(), store.OutcomeError.String(), store.OutcomeSuperseded.String()} {
					t.Logf("start %s: %v", o, e.metric("ellipsis_worker_commands_total", map[string]string{"op": "start", "outcome": o}))
				}
			}
		}()
		e.eventually("the held start dropped as superseded", func() bool {
			return e.metric("ellipsis_worker_commands_total", map[string]string{"op": "start", "outcome": store.OutcomeSuperseded.String()}) == 1
		})
		s.ExpectNone(300 * time.Millisecond)
		if got := typists(e.snapshot("r")); len(got) != 0 {
			t.Fatalf("snapshot after the stop: %v", got)
		}

		// A start that waited longer than ttl before any worker applied it.
		late := start("r", "bob", "Bob", "c2", 1)
		late.TsMs = time.Now().Add(-2 * testTTL).UnixMilli()
		e.send(late)
		if n := e.metric("ellipsis_worker_commands_total", map[string]string{"op": "start", "outcome": store.OutcomeLate.String()}); n != 1 {
			t.Fatalf("commands_total{start,late} = %v", n)
		}
		s.ExpectNone(200 * time.Millisecond)
		if got := typists(e.snapshot("r")); len(got) != 0 {
			t.Fatalf("snapshot %v", got)
		}
	})
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

func TestAdminListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ellipsis_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	var redisErr atomic.Value
	redisErr.Store("")
	var stopping atomic.Bool
	s := New(Options{
		Gatherer: reg,
		Checks: []Check{
			{Name: "nats", Probe: func(context.Context) error { return nil }},
			{Name: "redis", Probe: func(ctx context.Context) error {
				if _, ok := ctx.Deadline(); !ok {
					return errors.New("no deadline")
				}
				if e := redisErr.Load().(string); e != "" {
					return errors.New(e)
				}
				return nil
			}},
		},
		ShuttingDown: stopping.Load,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(ln)
	base := "http://" + s.Addr()

	if code, body := testkit.HTTPGet(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("healthz %d %s", code, body)
	}
	if code, body := testkit.HTTPGet(t, base+"/readyz"); code != 200 || strings.TrimSpace(body) != `{"ready":true,"checks":{"nats":"ok","redis":"ok"}}` {
		t.Fatalf("readyz %d %s", code, body)
	}
	redisErr.Store("dial tcp: refused")
	code, body := testkit.HTTPGet(t, base+"/readyz")
	var rd Readiness
	if err := json.Unmarshal([]byte(body), &rd); err != nil || code != 503 || rd.Ready || len(rd.Down) != 1 || rd.Down[0] != "redis" ||
		rd.Checks["redis"] != "dial tcp: refused" || rd.Checks["nats"] != "ok" {
		t.Fatalf("readyz with redis down: %d %s", code, body)
	}
	stopping.Store(true)
	if code, body := testkit.HTTPGet(t, base+"/readyz"); code != 503 || strings.TrimSpace(body) != `{"ready":false,"down":["shutdown"],"checks":{"shutdown":"shutting down"}}` {
		t.Fatalf("readyz shutting down: %d %s", code, body)
	}
	if code, body := testkit.HTTPGet(t, base+"/metrics"); code != 200 || !strings.Contains(body, "ellipsis_test_total 1") {
		t.Fatalf("metrics %d %s", code, body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("still serving after Shutdown")
	}
}

func TestReadyWhileStarting(t *testing.T) {
	var starting, stopping atomic.Bool
	starting.Store(true)
	s := New(Options{
		Checks: []Check{
			{Name: "nats", Probe: func(context.Context) error { return nil }},
			{Name: "redis", Probe: func(context.Context) error { return errors.New("dial tcp: refused") }},
		},
		Starting:     starting.Load,
		ShuttingDown: stopping.Load,
	})
	rd := s.Ready(context.Background())
	if rd.Ready || len(rd.Down) != 2 || rd.Down[0] != StartCheck || rd.Down[1] != "redis" ||
		rd.Checks[StartCheck] != "starting" || rd.Checks["nats"] != "ok" {
		t.Fatalf("starting: %+v, want down [start redis]", rd)
	}
	starting.Store(false)
	if rd := s.Ready(context.Background()); len(rd.Down) != 1 || rd.Down[0] != "redis" || rd.Checks[StartCheck] != "" {
		t.Fatalf("started: %+v, want down [redis] and no start check", rd)
	}
	stopping.Store(true)
	if rd := s.Ready(context.Background()); len(rd.Down) != 1 || rd.Down[0] != ShutdownCheck {
		t.Fatalf("stopping: %+v, want down [shutdown]", rd)
	}
}

func TestPprofSecondsAreBounded(t *testing.T) {
	s := New(Options{Pprof: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(ln)
	defer s.Shutdown(context.Background())
	base := "http://" + s.Addr() + "/debug/pprof/"
	for _, path := range []string{"profile?seconds=31", "profile?seconds=1e9", "profile?seconds=x", "trace?seconds=600", "heap?seconds=31"} {
		if code, body := testkit.HTTPGet(t, base+path); code != http.StatusBadRequest || !strings.Contains(body, "seconds") {
			t.Errorf("%s: %d %q, want 400 naming seconds", path, code, body)
		}
	}
	for _, path := range []string{"heap", "trace?seconds=0.05", "cmdline"} {
		if code, body := testkit.HTTPGet(t, base+path); code != http.StatusOK {
			t.Errorf("%s: %d %.200q, want 200", path, code, body)
		}
	}
}

// ellipsis_ready follows /readyz at every scrape: 0 while a check fails or
// shutdown began, 1 when every check passes.
func TestReadyCollector(t *testing.T) {
	var down, stopping atomic.Bool
	down.Store(true)
	s := New(Options{
		Checks: []Check{{Name: "redis", Probe: func(context.Context) error {
			if down.Load() {
				return errors.New("dial tcp: refused")
			}
			return nil
		}}},
		ShuttingDown: stopping.Load,
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.ReadyCollector("gateway"))
	ready := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || mfs[0].GetName() != "ellipsis_ready" || len(mfs[0].GetMetric()) != 1 {
			t.Fatalf("gathered %v, %v", mfs, err)
		}
		m := mfs[0].GetMetric()[0]
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "service" || l[0].GetValue() != "gateway" {
			t.Fatalf("labels %v", l)
		}
		return m.GetGauge().GetValue()
	}
	if v := ready(); v != 0 {
		t.Fatalf("redis down: ellipsis_ready %v, want 0", v)
	}
	down.Store(false)
	if v := ready(); v != 1 {
		t.Fatalf("every check passes: ellipsis_ready %v, want 1", v)
	}
	stopping.Store(true)
	if v := ready(); v != 0 {
		t.Fatalf("shutting down: ellipsis_ready %v, want 0", v)
	}
}

// RegisterReady: the first server on a registry exports ellipsis_ready; a
// second one's registration does nothing until the first unregisters.
func TestRegisterReady(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, second := New(Options{}), New(Options{ShuttingDown: func() bool { return true }})
	unregFirst := first.RegisterReady(reg, "worker")
	unregSecond := second.RegisterReady(reg, "worker")
	value := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
			t.Fatalf("gathered %v, %v; want one ellipsis_ready", mfs, err)
		}
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	if v := value(); v != 1 {
		t.Fatalf("ellipsis_ready %v, want the first (ready) server's 1", v)
	}
	unregSecond() // registered nothing: a no-op
	if v := value(); v != 1 {
		t.Fatalf("after the second's unregister: %v, want the first's 1", v)
	}
	unregFirst()
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Fatalf("after the first's unregister: %v, want nothing", mfs)
	}
	unregSecond = second.RegisterReady(reg, "worker")
	if v := value(); v != 0 {
		t.Fatalf("second (shutting down) registered: %v, want 0", v)
	}
	unregSecond()
}

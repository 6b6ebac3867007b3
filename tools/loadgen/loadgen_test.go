package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// quietStack is the in-process stack's configuration for tests.
func quietStack() *config.Config {
	c := config.Dev()
	c.LogLevel = "error"
	return &c
}

// checkSane checks what every healthy run must show.
func checkSane(t *testing.T, res *Result, conns int) {
	t.Helper()
	var table bytes.Buffer
	res.WriteTable(&table)
	t.Log(table.String())
	if res.Connected != int64(conns) {
		t.Errorf("connected %d of %d", res.Connected, conns)
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors: %v", res.Errors)
	}
	d := res.Delivered
	if d.ExpectedState == 0 || d.MatchedState != d.ExpectedState || d.LostState != 0 {
		t.Errorf("state changes delivered %d of %d expected", d.MatchedState, d.ExpectedState)
	}
	if d.Unmatched != 0 || d.ExpiredStops != 0 {
		t.Errorf("%d unmatched events, %d expired stops", d.Unmatched, d.ExpiredStops)
	}
	if res.Latency.Count != d.MatchedState || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 || res.Latency.P99 < res.Latency.P50 {
		t.Errorf("latency summary not sane: %+v", res.Latency)
	}
	// Bursts still on at the end are stopped after the measurement.
	if res.Sent.Starts == 0 || res.Sent.Stops > res.Sent.Starts || res.Sent.Starts-res.Sent.Stops > int64(res.TypingConns) {
		t.Errorf("sent %d starts and %d stops; want some, and a stop for every start but the last bursts", res.Sent.Starts, res.Sent.Stops)
	}
	if !strings.Contains(table.String(), "p99.9") {
		t.Error("summary table has no p99.9 column")
	}
	b, err := json.Marshal(res)
	if err != nil || !bytes.Contains(b, []byte(`"p99_9_ms"`)) {
		t.Errorf("JSON: %v, %s", err, b)
	}
}

// A tiny bounded rate-mode run against an in-process stack.
func TestRateAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: quietStack(), Mode: ModeRate,
		Conns: 20, Rooms: 4, Rate: 40, Duration: 3 * time.Second, Settle: time.Second,
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, res, 20)
	// 40 changes/s for 3 s over 20 connections in rooms of 5: each change
	// reaches the 4 other members.
	if got := res.Sent.Starts + res.Sent.Stops; got < 100 || got > 140 {
		t.Errorf("sent %d state changes, want about 120", got)
	}
	if res.Delivered.ExpectedState != 4*(res.Sent.Starts+res.Sent.Stops) {
		t.Errorf("expected deliveries %d, want 4 per state change", res.Delivered.ExpectedState)
	}
	if lines := strings.Count(progress.String(), "\n"); lines < 3 {
		t.Errorf("%d progress lines, want one a second:\n%s", lines, progress.String())
	}
}

// A tiny bounded replay of the embedded keystroke sample.
func TestReplayAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: quietStack(), Mode: ModeReplay,
		Conns: 20, Rooms: 2, Duration: 3 * time.Second, Speed: 2, ReplaySpread: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSane(t, res, 20)
	if res.Keystrokes != "embedded sample" {
		t.Errorf("keystrokes %q, want the embedded sample", res.Keystrokes)
	}
}

// An idle run reports the RSS of a process (here: this one).
func TestIdleRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an in-process stack on Redis and NATS; make test runs it (no -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Stack: true, StackConfig: quietStack(), Mode: ModeIdle,
		Conns: 10, Rooms: 1, Duration: 500 * time.Millisecond, RSSPID: os.Getpid(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != 10 || len(res.Errors) != 0 {
		t.Fatalf("connected %d, errors %v", res.Connected, res.Errors)
	}
	if res.RSS == nil || res.RSS.BeforeBytes <= 0 || res.RSS.AfterBytes <= 0 {
		t.Fatalf("rss %+v", res.RSS)
	}
	if res.Sent.Starts != 0 || res.Delivered.Frames != 0 {
		t.Errorf("idle run sent %d starts and read %d frames", res.Sent.Starts, res.Delivered.Frames)
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, o := range map[string]Options{
		"mode":                        {Mode: "burst"},
		"rooms > conns":               {Conns: 2, Rooms: 3},
		"rate per conn":               {Conns: 10, Rooms: 1, Rate: 1000},
		"url":                         {URLs: []string{"http://x"}},
		"system":                      {System: "pusher"},
		"centrifugo without a secret": {System: SystemCentrifugo},
		"centrifugo with the stack":   {System: SystemCentrifugo, JWTSecret: "s", Stack: true},
		"centrifugo namespace":        {System: SystemCentrifugo, JWTSecret: "s", CentrifugoNamespace: "a:b"},
		"run id":                      {RunID: "a b"},
		"negative warmup":             {Warmup: -time.Second},
	} {
		if err := fill(&o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

package worker

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestRateLog(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	rl := newRateLog(zap.New(core), time.Hour)
	for range 100 {
		rl.Warn("a", "flood")
	}
	rl.Warn("b", "other kind")
	if logs.Len() != 2 {
		t.Fatalf("%d lines for 100 of kind a and 1 of kind b, want 2", logs.Len())
	}
	t0 := time.Now()
	ok, n := rl.allow("a", t0.Add(2*time.Hour))
	if !ok || n != 99 {
		t.Fatalf("after the interval: ok %v suppressed %d, want true 99", ok, n)
	}
}

package ratelog

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestOneLinePerKindPerInterval(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	rl := New(zap.New(core), time.Hour)
	for range 100 {
		rl.Warn("a", "flood")
	}
	rl.Error("b", "other kind")
	if logs.Len() != 2 {
		t.Fatalf("%d lines for 100 of kind a and 1 of kind b, want 2", logs.Len())
	}
	ok, n := rl.allowAt("a", time.Now().Add(2*time.Hour))
	if !ok || n != 99 {
		t.Fatalf("after the interval: ok %v suppressed %d, want true 99", ok, n)
	}
}

func TestKindsAreBounded(t *testing.T) {
	rl := New(nil, time.Hour)
	for i := range MaxKinds + 500 {
		rl.Allow(fmt.Sprint("k", i))
	}
	if len(rl.state) > MaxKinds+1 {
		t.Fatalf("%d kinds remembered, want at most %d", len(rl.state), MaxKinds+1)
	}
	if ok, _ := rl.Allow("one more"); ok {
		t.Fatal("a kind past MaxKinds is not limited with the overflow")
	}
	if rl.Interval() != time.Hour || New(nil, 0).Interval() != DefaultInterval {
		t.Fatal("interval")
	}
}

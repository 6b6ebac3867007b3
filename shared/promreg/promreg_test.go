package promreg

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
}

func TestRegisterRefusesOrReusesADuplicate(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := Register(reg, false, counter())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Register(reg, false, counter()); !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("duplicate without reuse: %v, want AlreadyRegisteredError", err)
	}
	got, err := Register(reg, true, counter())
	if err != nil || got != first {
		t.Fatalf("duplicate with reuse: %v, %v; want the first collector", got, err)
	}
}

func TestSetKeepsTheFirstError(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSet(reg, false)
	Add(s, counter())
	Add(s, counter())
	other := Add(s, prometheus.NewCounter(prometheus.CounterOpts{Name: "y_total", Help: "y"}))
	if !errors.As(s.Err(), new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("Err = %v, want the duplicate's", s.Err())
	}
	if reg.Unregister(other) {
		t.Fatal("a collector after the error was registered")
	}
}

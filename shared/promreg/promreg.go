// Package promreg registers Prometheus collectors the one way the services
// do: refusing a duplicate, or reusing the collector a registry shared by
// two servers of one process already holds.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it. With reuse, a collector reg
// already holds under c's descriptors (a second server on a shared
// registry) is returned in c's place, so the two servers' counts add up;
// it must be of c's type. Otherwise it returns reg's error.
func Register[C prometheus.Collector](reg prometheus.Registerer, reuse bool, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if reuse && errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(C); ok {
			return prev, nil
		}
	}
	return c, err
}

// Set registers collectors on one registry and keeps the first error, so
// a constructor registers each collector in one line and checks once.
type Set struct {
	reg   prometheus.Registerer
	reuse bool
	err   error
}

// NewSet returns a Set on reg; reuse is [Register]'s.
func NewSet(reg prometheus.Registerer, reuse bool) *Set { return &Set{reg: reg, reuse: reuse} }

// Add registers c on s (see [Register]) and returns the collector to use.
// After an error it registers nothing more and returns c.
func Add[C prometheus.Collector](s *Set, c C) C {
	if s.err != nil {
		return c
	}
	got, err := Register(s.reg, s.reuse, c)
	s.err = err
	return got
}

// Err is the first error of an [Add] to s, or nil.
func (s *Set) Err() error { return s.err }

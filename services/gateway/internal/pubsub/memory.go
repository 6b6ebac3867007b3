package pubsub

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Memory is an in-process [Broker] for tests: one link, which the test can
// take down and bring back ([Memory.SetDown]), messages injected with
// [Memory.Publish]. Subscriptions are confirmed at once while the link is
// up; while it is down Subscribe fails with [ErrUnavailable].
type Memory struct {
	mu     sync.Mutex
	h      Handler
	refs   map[string]int
	down   bool
	closed bool
	// Hook, when set, runs at the start of every Subscribe (tests use it
	// to make confirmations slow or fail); it may block until ctx ends.
	// Subscribe's error wraps ErrUnavailable and the hook's error.
	Hook func(ctx context.Context, channel string) error
}

var _ Broker = (*Memory)(nil)

// NewMemory returns an empty, up broker.
func NewMemory() *Memory { return &Memory{refs: map[string]int{}} }

// Start implements [Broker].
func (m *Memory) Start(h Handler) {
	m.mu.Lock()
	m.h = h
	m.mu.Unlock()
}

// Subscribe implements [Broker].
func (m *Memory) Subscribe(ctx context.Context, channel string) error {
	m.mu.Lock()
	m.refs[channel]++
	closed, down, hook := m.closed, m.down, m.Hook
	m.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case down:
		return fmt.Errorf("%w: link down", ErrUnavailable)
	}
	if hook != nil {
		if err := hook(ctx, channel); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// Unsubscribe implements [Broker].
func (m *Memory) Unsubscribe(channel string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs[channel]--; m.refs[channel] == 0 {
		delete(m.refs, channel)
	}
}

// Health implements [Broker].
func (m *Memory) Health() Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Health{Links: 1, Down: map[string]string{"shared": "down (test)"}}
	}
	return Health{OK: true, Links: 1}
}

// Close implements [Broker].
func (m *Memory) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// Subscribed lists the channels with subscribers, sorted.
func (m *Memory) Subscribed() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for c, n := range m.refs {
		if n > 0 {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Publish delivers payload on channel if it has subscribers and the link
// is up, synchronously on the caller's goroutine; it reports whether it did.
func (m *Memory) Publish(channel, payload string) bool {
	m.mu.Lock()
	h, ok := m.h, m.refs[channel] > 0 && !m.down && !m.closed
	m.mu.Unlock()
	if ok && h != nil {
		h.HandleMessage(channel, payload)
	}
	return ok
}

// SetDown takes the link down (messages are lost, Subscribe fails) or
// brings it back, which reports every subscribed channel as restored.
func (m *Memory) SetDown(down bool) {
	m.mu.Lock()
	was := m.down
	m.down = down
	h := m.h
	m.mu.Unlock()
	if was && !down && h != nil {
		if chs := m.Subscribed(); len(chs) > 0 {
			h.HandleRestored(chs)
		}
	}
}

package typist

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// step is one scripted input at ms after t0: "k" keystroke, "t" tick,
// "s" message sent, "c" cancel.
type step struct {
	ms int
	op string
}

// run plays steps and returns "ms:action" for every action, in order.
func run(t *testing.T, p *Typist, steps []step) string {
	t.Helper()
	var out []string
	for _, s := range steps {
		at := t0.Add(time.Duration(s.ms) * time.Millisecond)
		var acts []Action
		switch s.op {
		case "k":
			acts = p.Keystroke(at)
		case "t":
			acts = p.Tick(at)
		case "s":
			acts = p.MessageSent(at)
		case "c":
			acts = p.Cancel(at)
		default:
			t.Fatalf("bad op %q", s.op)
		}
		for _, a := range acts {
			out = append(out, fmt.Sprintf("%d:%s", s.ms, a))
		}
	}
	return strings.Join(out, " ")
}

func newDefault(t *testing.T) *Typist {
	t.Helper()
	p, err := New(Config{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTimelines(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{
			name:  "first keystroke starts, the next ones inside refresh send nothing",
			steps: []step{{0, "k"}, {200, "k"}, {2900, "k"}, {3999, "k"}},
			want:  "0:start",
		},
		{
			name: "refresh at exactly 4 s after the last start, then 4 s after that refresh",
			steps: []step{
				{0, "k"}, {1000, "k"}, {2000, "k"}, {3000, "k"}, {4000, "k"},
				{5000, "k"}, {7999, "k"}, {8000, "k"}, {8100, "k"},
			},
			want: "0:start 4000:refresh 8000:refresh",
		},
		{
			name: "refresh is measured from the last start, not from the last key",
			// keys every 2.5 s: 0 start; 2500 no (2.5 < 4); 5000 refresh (5 >= 4);
			// 7500 no (2.5); 10000 refresh.
			steps: []step{{0, "k"}, {2500, "k"}, {5000, "k"}, {7500, "k"}, {10000, "k"}},
			want:  "0:start 5000:refresh 10000:refresh",
		},
		{
			name: "refresh is due by time while still typing, with no keystroke at that moment",
			// start 0, keys to 3500, pause: the refresh at 4000 keeps the
			// entry (ttl 5 s) alive; idle stop at 6500.
			steps: []step{{0, "k"}, {2000, "k"}, {3500, "k"}, {3999, "t"}, {4000, "t"}, {6499, "t"}, {6500, "t"}},
			want:  "0:start 4000:refresh 6500:stop(idle)",
		},
		{
			name:  "idle and refresh due at once: stop, no refresh first",
			steps: []step{{0, "k"}, {1000, "k"}, {4000, "t"}},
			want:  "0:start 4000:stop(idle)",
		},
		{
			name: "a late tick sends one refresh, and the next is measured from it",
			// Due at 8000, ticked at 8500: the next is due at 12500, not 12000.
			steps: []step{{0, "k"}, {2000, "k"}, {4000, "k"}, {6000, "k"}, {7000, "k"}, {8500, "t"}, {9500, "k"}, {12499, "t"}, {12500, "t"}},
			want:  "0:start 4000:refresh 8500:refresh 12500:stop(idle)",
		},
		{
			name:  "idle stop exactly 3 s after the last keystroke, not before",
			steps: []step{{0, "k"}, {1000, "k"}, {3999, "t"}, {4000, "t"}, {4500, "t"}},
			want:  "0:start 4000:stop(idle)",
		},
		{
			name:  "typing again after an idle stop is a new start, not a refresh",
			steps: []step{{0, "k"}, {3000, "t"}, {3500, "k"}, {3600, "k"}},
			want:  "0:start 3000:stop(idle) 3500:start",
		},
		{
			name:  "a keystroke after a missed tick sends the overdue stop first",
			steps: []step{{0, "k"}, {5000, "k"}},
			want:  "0:start 5000:stop(idle) 5000:start",
		},
		{
			name:  "message sent stops at once, and only once",
			steps: []step{{0, "k"}, {500, "k"}, {700, "s"}, {800, "t"}, {5000, "t"}, {6000, "s"}},
			want:  "0:start 700:stop(sent)",
		},
		{
			name:  "a new message after a send starts again",
			steps: []step{{0, "k"}, {700, "s"}, {900, "k"}, {1000, "k"}, {1200, "s"}},
			want:  "0:start 700:stop(sent) 900:start 1200:stop(sent)",
		},
		{
			name:  "sent after the idle stop was due reports the idle stop",
			steps: []step{{0, "k"}, {3200, "s"}},
			want:  "0:start 3200:stop(idle)",
		},
		{
			name:  "tick while idle sends nothing",
			steps: []step{{0, "t"}, {10000, "t"}},
			want:  "",
		},
		{
			name:  "cancel stops like a send",
			steps: []step{{0, "k"}, {100, "c"}, {200, "c"}},
			want:  "0:start 100:stop(cancel)",
		},
		{
			name: "continuous typing for 12.5 s then a send",
			steps: func() []step {
				var s []step
				for ms := 0; ms <= 12500; ms += 250 {
					s = append(s, step{ms, "k"})
				}
				return append(s, step{12600, "s"})
			}(),
			want: "0:start 4000:refresh 8000:refresh 12000:refresh 12600:stop(sent)",
		},
		{
			name:  "time going backwards is taken as the latest time",
			steps: []step{{1000, "k"}, {500, "k"}, {900, "t"}, {4000, "t"}},
			want:  "1000:start 4000:stop(idle)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newDefault(t)
			if got := run(t, p, tt.steps); got != tt.want {
				t.Errorf("timeline\n got: %q\nwant: %q", got, tt.want)
			}
			if p.Typing() {
				// Every scripted case may end typing; just check Deadline agrees.
				if _, ok := p.Deadline(); !ok {
					t.Error("Typing() but no Deadline")
				}
			} else if _, ok := p.Deadline(); ok {
				t.Error("Deadline while not typing")
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	p := newDefault(t)
	if _, ok := p.Deadline(); ok {
		t.Fatal("deadline before any keystroke")
	}
	p.Keystroke(t0)
	p.Keystroke(t0.Add(1200 * time.Millisecond))
	p.Keystroke(t0.Add(2500 * time.Millisecond))
	// The refresh due at 4 s comes before the idle stop at 5.5 s.
	d, ok := p.Deadline()
	if !ok || !d.Equal(t0.Add(4000*time.Millisecond)) {
		t.Fatalf("Deadline = %v, %v; want t0+4s (refresh)", d.Sub(t0), ok)
	}
	if got := p.Tick(d); len(got) != 1 || got[0] != Refresh {
		t.Fatalf("Tick(deadline) = %v, want [refresh]", got)
	}
	// Next the idle stop at 5.5 s (the next refresh would be at 8 s).
	d, ok = p.Deadline()
	if !ok || !d.Equal(t0.Add(5500*time.Millisecond)) {
		t.Fatalf("Deadline = %v, %v; want t0+5.5s (idle)", d.Sub(t0), ok)
	}
	if got := p.Tick(d); len(got) != 1 || got[0] != StopIdle {
		t.Fatalf("Tick(deadline) = %v, want [stop(idle)]", got)
	}
	if _, ok := p.Deadline(); ok {
		t.Fatal("Deadline after the burst ended")
	}
}

func TestStats(t *testing.T) {
	p := newDefault(t)
	run(t, p, []step{
		{0, "k"}, {2000, "k"}, {4000, "k"}, {4100, "s"}, // start, refresh, sent
		{5000, "k"}, {8000, "t"}, // start, idle stop
		{9000, "k"}, {9100, "c"}, // start, cancel
	})
	want := Stats{Keystrokes: 5, Messages: 1, Starts: 3, Refreshes: 1, IdleStops: 1, SentStops: 1, CancelStops: 1}
	if got := p.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if got := p.Stats().Events(); got != 7 {
		t.Fatalf("Events = %d, want 7", got)
	}
	if got := want.Add(want); got.Keystrokes != 10 || got.Events() != 14 {
		t.Fatalf("Add = %+v", got)
	}
}

func TestCustomTimers(t *testing.T) {
	p, err := New(Config{Refresh: 1500 * time.Millisecond, IdleStop: time.Second}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := run(t, p, []step{{0, "k"}, {900, "k"}, {1500, "k"}, {2400, "t"}, {2500, "t"}})
	if want := "0:start 1500:refresh 2500:stop(idle)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestNewRefusesBadTimers(t *testing.T) {
	_, err := New(Config{Refresh: 5 * time.Second}, 5*time.Second)
	if !errors.Is(err, ErrRefreshNotBelowTTL) {
		t.Fatalf("refresh == ttl: err = %v, want ErrRefreshNotBelowTTL", err)
	}
	if err == nil || !strings.Contains(err.Error(), "refresh 5s, ttl 5s") {
		t.Fatalf("error should name both values: %v", err)
	}
	if _, err := New(Config{}, 4*time.Second); !errors.Is(err, ErrRefreshNotBelowTTL) {
		t.Fatalf("default refresh 4s with ttl 4s: err = %v", err)
	}
	if _, err := New(Config{Refresh: -time.Second, IdleStop: -time.Second}, 0); err == nil ||
		!strings.Contains(err.Error(), "refresh must be positive") || !strings.Contains(err.Error(), "idle stop must be positive") {
		t.Fatalf("negative timers: err = %v", err)
	}
	if _, err := New(Config{}, 0); err != nil {
		t.Fatalf("unknown ttl should skip the check: %v", err)
	}
}

func TestFromConfig(t *testing.T) {
	c := config.Default()
	got := FromConfig(c)
	if got.Refresh != 4*time.Second || got.IdleStop != 3*time.Second {
		t.Fatalf("FromConfig(Default) = %+v", got)
	}
	p, err := New(got, c.TypingTTL)
	if err != nil {
		t.Fatal(err)
	}
	if p.Config() != got {
		t.Fatalf("Config() = %+v", p.Config())
	}
}

func TestActionFrame(t *testing.T) {
	for a, want := range map[Action]string{Start: "typing_start", Refresh: "typing_start", StopIdle: "typing_stop", StopSent: "typing_stop", StopCancel: "typing_stop"} {
		if a.Frame() != want {
			t.Errorf("%v.Frame() = %q, want %q", a, a.Frame(), want)
		}
	}
}

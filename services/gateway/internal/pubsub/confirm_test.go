package pubsub

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/metrics"
	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// The confirmation and refusal rules (confirm.go, refusal.go) on a broker
// that is never started: the test plays the writer (planRoundLocked) and
// the reader (subscription, serverError, pong) of connection 0 itself, in
// the order Redis answers, with no server.

const noperm = "NOPERM this user has no permissions to access one of the channels used as arguments"

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		acked, grouped bool
		refusal        string
		want           verdict
	}{
		{true, false, "", verdictConfirm},
		{true, true, noperm, verdictConfirm}, // acked before the group's error: another command's
		{false, false, noperm, verdictRefuse},
		{false, true, noperm, verdictAlone},
		{false, false, "", verdictRetry},
		{false, true, "", verdictRetry},
	} {
		if got := judge(tc.acked, tc.grouped, tc.refusal); got != tc.want {
			t.Errorf("judge(acked %v, grouped %v, %q) = %v, want %v", tc.acked, tc.grouped, tc.refusal, got, tc.want)
		}
	}
}

// offline is a broker with its shared link and a recorder, never started.
func offline(t *testing.T, check string) (*Redis, *link, *recorder) {
	t.Helper()
	met, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRedis(RedisOptions{CheckChannel: check, Metrics: met})
	rec := &recorder{}
	r.h = rec
	t.Cleanup(r.Close)
	return r, r.links[""], rec
}

// round plans one writer round; the groups are sorted for comparison.
func round(r *Redis, l *link, first bool) (token string, sub [][]string, unsub []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select { // the kick this round answers
	case <-l.kick:
	default:
	}
	token, sub, unsub = r.planRoundLocked(l, first)
	for _, g := range sub {
		slices.Sort(g)
	}
	slices.SortFunc(sub, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	slices.Sort(unsub)
	return token, sub, unsub
}

// subscribeAsync runs Subscribe in the background and returns its result
// channel once Subscribe counted its subscriber (and, under the same lock
// hold, woke the writer if need be).
func subscribeAsync(r *Redis, name string) <-chan error {
	refs := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		if c := r.chans[name]; c != nil {
			return c.refs
		}
		return 0
	}
	before := refs()
	done := make(chan error, 1)
	go func() { done <- r.Subscribe(context.Background(), name) }()
	for refs() == before {
		runtime.Gosched()
	}
	return done
}

func kicked(l *link) bool { return len(l.kick) == 1 }

func TestGroupRefusedThenSettledAlone(t *testing.T) {
	r, l, _ := offline(t, "")
	ra, rb := subscribeAsync(r, "a"), subscribeAsync(r, "b")
	token, sub, _ := round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"a", "b"}}, slices.Equal) || token == "" {
		t.Fatalf("first round sent %v (token %q), want one command [a b]", sub, token)
	}
	// Redis refuses the whole command: one error reply, then the PONG.
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	select {
	case err := <-ra:
		t.Fatalf("Subscribe(a) returned %v after its group was refused, want it retried alone", err)
	case err := <-rb:
		t.Fatalf("Subscribe(b) returned %v after its group was refused, want it retried alone", err)
	default:
	}
	if !kicked(l) {
		t.Fatal("the writer was not woken to send the refused group alone")
	}
	token, sub, _ = round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"a"}, {"b"}}, slices.Equal) {
		t.Fatalf("second round sent %v, want [a] and [b] alone", sub)
	}
	r.subscription(l, 0, "subscribe", "a")
	r.serverError(l, 0, noperm) // b's command
	r.pong(l, 0, token)
	if err := <-ra; err != nil {
		t.Fatalf("Subscribe(a) accepted alone: %v", err)
	}
	err := <-rb
	if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Subscribe(b) refused: %v, want ErrRefused and ErrUnavailable with the reply", err)
	}
	if room, probe := testutil.ToFloat64(r.met.RedisSubscribeRefused.Room), testutil.ToFloat64(r.met.RedisSubscribeRefused.Probe); room != 1 || probe != 0 {
		t.Fatalf("redis_subscribe_refused_total room %v probe %v, want 1 and 0 (the group's refusal is retried, not counted)", room, probe)
	}
	if h := r.Health(); !h.OK {
		t.Fatalf("one refusal made the link down: %+v", h)
	}
	r.mu.Lock()
	_, sentB := l.sent["b"]
	r.mu.Unlock()
	if sentB {
		t.Fatal("b still counts as subscribed after its refusal")
	}
	// A later Subscribe of b (its first subscriber still counted) sends
	// it again, alone.
	rb2 := subscribeAsync(r, "b")
	if !kicked(l) {
		t.Fatal("a Subscribe of a refused channel did not wake the writer")
	}
	token, sub, _ = round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"b"}}, slices.Equal) {
		t.Fatalf("retry round sent %v, want [b]", sub)
	}
	r.subscription(l, 0, "subscribe", "b")
	r.pong(l, 0, token)
	if err := <-rb2; err != nil {
		t.Fatalf("Subscribe(b) once accepted: %v", err)
	}
}

// refuseAlone subscribes name, has Redis refuse it, and returns
// Subscribe's error.
func refuseAlone(t *testing.T, r *Redis, l *link, name string) error {
	t.Helper()
	res := subscribeAsync(r, name)
	token, sub, _ := round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{name}}, slices.Equal) {
		t.Fatalf("round sent %v, want [%s]", sub, name)
	}
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	err := <-res
	r.Unsubscribe(name) // as the hub does on a failed join
	return err
}

func TestPersistentRefusalsDownUntilProbeAccepted(t *testing.T) {
	r, l, _ := offline(t, "")
	if h := r.Health(); h.OK || h.Down["shared"] != errNeverUp {
		t.Fatalf("health before the first PONG %+v, want down %q", h, errNeverUp)
	}
	token, _, _ := round(r, l, true)
	r.pong(l, 0, token)
	if h := r.Health(); !h.OK {
		t.Fatalf("health after the first PONG %+v", h)
	}
	for i, name := range []string{"r0", "r1", "r2"} {
		if err := refuseAlone(t, r, l, name); !errors.Is(err, ErrRefused) {
			t.Fatalf("Subscribe(%s): %v, want ErrRefused", name, err)
		}
		if h := r.Health(); h.OK != (i < refusalsUnhealthy-1) {
			t.Fatalf("after %d refusals in a row health is %+v", i+1, h)
		}
	}
	if h := r.Health(); !strings.Contains(h.Down["shared"], "refusing") || !strings.Contains(h.Down["shared"], "NOPERM") {
		t.Fatalf("health %+v, want the link refusing with the reply", h)
	}
	// A health round probes the last refused channel; refused again, the
	// link stays down.
	l.kickPing()
	token, sub, _ := round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"r2"}}, slices.Equal) {
		t.Fatalf("health round sent %v, want the probe [r2]", sub)
	}
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	if r.Health().OK {
		t.Fatal("a refused probe ended refusing")
	}
	// Accepted: the link is up again and the probe is unsubscribed.
	l.kickPing()
	token, sub, _ = round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"r2"}}, slices.Equal) {
		t.Fatalf("health round sent %v, want the probe [r2]", sub)
	}
	r.subscription(l, 0, "subscribe", "r2")
	r.pong(l, 0, token)
	if h := r.Health(); !h.OK {
		t.Fatalf("health after the probe was accepted %+v", h)
	}
	if _, sub, unsub := round(r, l, false); len(sub) != 0 || !slices.Equal(unsub, []string{"r2"}) {
		t.Fatalf("round after the accepted probe: sub %v unsub %v, want unsub [r2]", sub, unsub)
	}
	if room, probe := testutil.ToFloat64(r.met.RedisSubscribeRefused.Room), testutil.ToFloat64(r.met.RedisSubscribeRefused.Probe); room != 3 || probe != 1 {
		t.Fatalf("redis_subscribe_refused_total room %v probe %v, want 3 (the joins) and 1 (the probe)", room, probe)
	}
}

// A confirmed subscription between refusals restarts the count: a room
// the ACL leaves out does not make the link down.
func TestConfirmationResetsRefusalRun(t *testing.T) {
	r, l, _ := offline(t, "")
	token, _, _ := round(r, l, true)
	r.pong(l, 0, token)
	for i := 0; i < 2*refusalsUnhealthy; i++ {
		_ = refuseAlone(t, r, l, "out")
		res := subscribeAsync(r, "in")
		token, _, _ := round(r, l, false)
		r.subscription(l, 0, "subscribe", "in")
		r.pong(l, 0, token)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		r.Unsubscribe("in")
		if h := r.Health(); !h.OK {
			t.Fatalf("after %d refusals each followed by a confirmation: %+v", i+1, h)
		}
	}
}

// The check channel goes with the first round of a connection; refused,
// the link is down at once, before any join; accepted, it is unsubscribed.
func TestCheckChannelOnFirstRound(t *testing.T) {
	for _, refused := range []bool{true, false} {
		r, l, _ := offline(t, "chk")
		token, sub, _ := round(r, l, true)
		if !slices.EqualFunc(sub, [][]string{{"chk"}}, slices.Equal) {
			t.Fatalf("first round sent %v, want [chk]", sub)
		}
		if refused {
			r.serverError(l, 0, noperm)
		} else {
			r.subscription(l, 0, "subscribe", "chk")
		}
		r.pong(l, 0, token)
		h := r.Health()
		if h.OK == refused {
			t.Fatalf("check channel refused=%v: health %+v", refused, h)
		}
		_, sub, unsub := round(r, l, false)
		if refused && (len(sub)+len(unsub) != 0 || kicked(l)) {
			t.Fatalf("after a refused check: sub %v unsub %v", sub, unsub)
		}
		if !refused && !slices.Equal(unsub, []string{"chk"}) {
			t.Fatalf("after an accepted check: unsub %v, want [chk]", unsub)
		}
	}
}

// A Cluster link's check channel hashes to the slot of the channel the
// link was opened for; none when no suffix can (an empty tag).
func TestSlotCheck(t *testing.T) {
	for ch, exists := range map[string]bool{"p:chat:room:{abc}": true, "plain": true, "a{b": true, "chat:room:{}": false, "x{}y{z}": false} {
		c := slotCheck("p:chat:room:acl-check", ch)
		if (c != "") != exists || exists && (names.Slot(c) != names.Slot(ch) || !strings.HasPrefix(c, "p:chat:room:acl-check:")) {
			t.Errorf("slotCheck for %q = %q (slot %d, want %d)", ch, c, names.Slot(c), names.Slot(ch))
		}
	}
	if c := slotCheck("", "chat:room:{abc}"); c != "" {
		t.Errorf("slotCheck without a check channel = %q", c)
	}
}

// A refused channel that members still hold is not sent again with every
// other join's round (that would resend every refused room each time):
// only on health rounds while the link is not refusing, and once a
// refusing link's probe is accepted.
func TestRefusedChannelRetriedOnHealthRoundsOnly(t *testing.T) {
	r, l, _ := offline(t, "")
	token, _, _ := round(r, l, true)
	r.pong(l, 0, token)
	held := subscribeAsync(r, "held")
	token, _, _ = round(r, l, false)
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	if err := <-held; !errors.Is(err, ErrRefused) {
		t.Fatalf("Subscribe(held): %v, want ErrRefused", err)
	}
	// "held" keeps its subscriber (its members joined before the ACL
	// changed, say).
	other := subscribeAsync(r, "other")
	token, sub, _ := round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"other"}}, slices.Equal) {
		t.Fatalf("a join's round sent %v, want only [other]", sub)
	}
	r.subscription(l, 0, "subscribe", "other")
	r.pong(l, 0, token)
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	l.kickPing()
	token, sub, _ = round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"held"}}, slices.Equal) {
		t.Fatalf("a health round sent %v, want the refused [held] again", sub)
	}
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	_ = refuseAlone(t, r, l, "r1")
	_ = refuseAlone(t, r, l, "r2")
	if r.Health().OK {
		t.Fatal("three refusals in a row left the link up")
	}
	l.kickPing()
	token, sub, _ = round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"r2"}}, slices.Equal) {
		t.Fatalf("a refusing link's health round sent %v, want only the probe [r2]", sub)
	}
	r.subscription(l, 0, "subscribe", "r2")
	r.pong(l, 0, token)
	if !kicked(l) {
		t.Fatal("an accepted probe did not wake the writer")
	}
	if _, sub, unsub := round(r, l, false); !slices.EqualFunc(sub, [][]string{{"held"}}, slices.Equal) || !slices.Equal(unsub, []string{"r2"}) {
		t.Fatalf("the round after the accepted probe sent %v and unsubscribed %v, want [held] and [r2]", sub, unsub)
	}
}

// A refusing link whose probe is a channel members still hold sends that
// channel on health rounds, and its confirmation ends refusing.
func TestHeldProbeRetriedOnHealthRounds(t *testing.T) {
	r, l, _ := offline(t, "")
	token, _, _ := round(r, l, true)
	r.pong(l, 0, token)
	_ = refuseAlone(t, r, l, "r0")
	_ = refuseAlone(t, r, l, "r1")
	held := subscribeAsync(r, "held") // the third refusal: held becomes the probe
	token, _, _ = round(r, l, false)
	r.serverError(l, 0, noperm)
	r.pong(l, 0, token)
	if err := <-held; !errors.Is(err, ErrRefused) || r.Health().OK {
		t.Fatalf("Subscribe(held): %v, health %+v; want refused and the link down", err, r.Health())
	}
	l.kickPing()
	token, sub, _ := round(r, l, false)
	if !slices.EqualFunc(sub, [][]string{{"held"}}, slices.Equal) {
		t.Fatalf("health round sent %v, want the held probe [held]", sub)
	}
	r.subscription(l, 0, "subscribe", "held")
	r.pong(l, 0, token)
	if h := r.Health(); !h.OK {
		t.Fatalf("health after the held probe was confirmed: %+v", h)
	}
}

// A Subscribe of the probe's channel between the probe's SUBSCRIBE and
// its PONG is settled by the probe's outcome: accepted, the channel is
// confirmed by its own token; refused, it is sent again and refused on
// its own.
func TestJoinOfTheProbeInFlight(t *testing.T) {
	for _, accepted := range []bool{true, false} {
		r, l, _ := offline(t, "chk")
		token, sub, _ := round(r, l, true)
		if !slices.EqualFunc(sub, [][]string{{"chk"}}, slices.Equal) {
			t.Fatalf("first round sent %v, want [chk]", sub)
		}
		res := subscribeAsync(r, "chk")
		token2, sub2, _ := round(r, l, false) // the join's round: chk is sent already
		if len(sub2) != 0 || token2 == "" {
			t.Fatalf("the join's round sent %v (token %q), want only a token", sub2, token2)
		}
		if accepted {
			r.subscription(l, 0, "subscribe", "chk")
		} else {
			r.serverError(l, 0, noperm)
		}
		r.pong(l, 0, token)
		r.pong(l, 0, token2)
		if accepted {
			if err := <-res; err != nil {
				t.Fatalf("Subscribe(chk) after the probe was accepted: %v", err)
			}
			continue
		}
		token3, sub3, _ := round(r, l, false)
		if !slices.EqualFunc(sub3, [][]string{{"chk"}}, slices.Equal) {
			t.Fatalf("after the refused probe the round sent %v, want [chk] again", sub3)
		}
		r.serverError(l, 0, noperm)
		r.pong(l, 0, token3)
		if err := <-res; !errors.Is(err, ErrRefused) {
			t.Fatalf("Subscribe(chk) after the refused probe: %v, want ErrRefused", err)
		}
	}
}

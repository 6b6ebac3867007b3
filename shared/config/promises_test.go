package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The arithmetic of the promises below assumes what follows a sweep tick
// (the sweep script's round trip, the Pub/Sub fan-out, the write to each
// client) takes at most this; bounds.go keeps the same share of the 1 s
// slack, and this copy makes a change there a failing test.
const testDelivery = 500 * time.Millisecond

// promise is one timing or limit promise of docs/protocol.md: quote is its
// wording there (compared with runs of white space as one space), settings
// the settings it depends on, base the mode in which they are read (nil:
// Dev), holds the promise as arithmetic over a validated Config.
type promise struct {
	quote    string
	settings []string
	base     func(c *Config)
	holds    func(c *Config) error
}

var promises = []promise{
	{quote: "| expiry push | | within ttl + 1 s |",
		settings: []string{"ELLIPSIS_TYPING_TTL", "ELLIPSIS_SWEEP_INTERVAL"},
		holds: func(c *Config) error {
			// An entry expiring at ttl after its last refresh is found
			// by the next sweep tick, then delivered.
			if at := c.TypingTTL + c.SweepInterval + testDelivery; at > c.TypingTTL+time.Second {
				return fmt.Errorf("expired stop at ttl + %s", at-c.TypingTTL)
			}
			return nil
		}},
	{quote: "within throttle/2 + the sweep interval of the last command (the contract: within throttle + 1 s",
		settings: []string{"ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_SWEEP_INTERVAL"},
		holds: func(c *Config) error {
			if at := c.TypingThrottle/2 + c.SweepInterval + testDelivery; at > c.TypingThrottle+time.Second {
				return fmt.Errorf("trailing edge at %s, throttle + 1 s is %s", at, c.TypingThrottle+time.Second)
			}
			return nil
		}},
	{quote: "expires ttl + 10 s + throttle after its last renewal",
		settings: []string{"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_SWEEP_INTERVAL"},
		holds: func(c *Config) error {
			// The user hash holds what the expiry push and the trailing
			// edge need: both must happen before it expires.
			life := c.TypingTTL + 10*time.Second + c.TypingThrottle
			expiry := c.TypingTTL + c.SweepInterval + testDelivery
			trailing := c.TypingThrottle/2 + c.SweepInterval + testDelivery
			if expiry >= life || trailing >= life {
				return fmt.Errorf("user hash expires at %s, before the expiry push (%s) or the trailing edge (%s)", life, expiry, trailing)
			}
			return nil
		}},
	{quote: "The services refuse to start unless **throttle < refresh < ttl** and **idle_stop < ttl**",
		settings: []string{"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_TYPING_REFRESH", "ELLIPSIS_TYPING_IDLE_STOP"},
		holds: func(c *Config) error {
			if c.TypingThrottle >= c.TypingRefresh || c.TypingRefresh >= c.TypingTTL || c.TypingIdleStop >= c.TypingTTL {
				return fmt.Errorf("throttle %s, refresh %s, idle stop %s, ttl %s", c.TypingThrottle, c.TypingRefresh, c.TypingIdleStop, c.TypingTTL)
			}
			return nil
		}},
	{quote: "served to clients as `ttl_ms`",
		settings: []string{"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_REFRESH", "ELLIPSIS_TYPING_IDLE_STOP"},
		holds: func(c *Config) error {
			// GET /v1/config and ttl_ms serve whole ms; the JS SDK times
			// each with setTimeout (at most 2^31−1 ms), ttl_ms plus its
			// 1 s grace (clients/js/src/store.js).
			for _, d := range []time.Duration{c.TypingTTL + time.Second, c.TypingRefresh, c.TypingIdleStop} {
				if d%time.Millisecond != 0 || d < time.Millisecond || d.Milliseconds() > math.MaxInt32 {
					return fmt.Errorf("%s is not 1..2^31−1 whole ms", d)
				}
			}
			return nil
		}},
	{quote: "receivers get at most 4 + 2⌈T/throttle⌉ events about a user over any span T",
		settings: []string{"ELLIPSIS_TYPING_THROTTLE"},
		holds: func(c *Config) error {
			// The Lua scripts keep the bucket in whole ms of Redis TIME.
			if c.TypingThrottle < time.Millisecond || c.TypingThrottle%time.Millisecond != 0 {
				return fmt.Errorf("throttle %s is not whole ms", c.TypingThrottle)
			}
			return nil
		}},
	{quote: "while the user keeps typing, the client re-sends `typing_start` this often",
		settings: []string{"ELLIPSIS_TYPING_REFRESH", "ELLIPSIS_INBOUND_RATE"},
		holds: func(c *Config) error {
			if c.TypingRefresh.Seconds()*c.InboundRate < 1 {
				return fmt.Errorf("refreshing every %s is over %g frames/s", c.TypingRefresh, c.InboundRate)
			}
			return nil
		}},
	{quote: "within `ELLIPSIS_PONG_WAIT` (60 s; the gateway pings every 54 s)",
		settings: []string{"ELLIPSIS_PONG_WAIT"},
		holds: func(c *Config) error {
			// session.pingPeriod is PongWait * 9 / 10, in time.Duration.
			if c.PongWait > math.MaxInt64/9 {
				return fmt.Errorf("pong wait %s overflows 9/10 of it", c.PongWait)
			}
			if p := c.PongWait * 9 / 10; p <= 0 || p >= c.PongWait {
				return fmt.Errorf("ping period %s for pong wait %s", p, c.PongWait)
			}
			return nil
		}},
	{quote: "Keep `terminationGracePeriodSeconds` ≥ preStop + lame duck + drain + 10 s",
		settings: []string{"ELLIPSIS_LAME_DUCK", "ELLIPSIS_SHUTDOWN_DRAIN"},
		holds: func(c *Config) error {
			// The gateway's shutdown deadline (cmd/gateway) is 2 × (lame
			// duck + drain) + 10 s, and Shutdown cuts the lame duck, then
			// the drain, to half the time left: neither may be cut.
			ld, dr := c.LameDuck, c.ShutdownDrain
			if ld+dr > (math.MaxInt64-10*time.Second)/2 {
				return fmt.Errorf("lame duck %s + drain %s overflow the shutdown deadline", ld, dr)
			}
			deadline := 2*(ld+dr) + 10*time.Second
			if ld > deadline/2 || dr > (deadline-ld)/2 {
				return fmt.Errorf("a %s deadline cuts the lame duck %s or the drain %s", deadline, ld, dr)
			}
			return nil
		}},
	{quote: "`unavailable`: the workers could not be asked in `ELLIPSIS_SNAPSHOT_TIMEOUT` (2 s)",
		settings: []string{"ELLIPSIS_SNAPSHOT_TIMEOUT", "ELLIPSIS_JWKS_TIMEOUT"},
		base:     withJWKSURL,
		holds: func(c *Config) error {
			// Authentication may wait for one JWKS fetch, then the
			// authorisation and the snapshot share the snapshot timeout;
			// the 503 must be written before the HTTP write timeout.
			if t := c.JWKSTimeout + c.SnapshotTimeout + time.Second; t > HTTPWriteTimeout {
				return fmt.Errorf("answer after %s, write timeout %s", t, HTTPWriteTimeout)
			}
			return nil
		}},
	{quote: "no reply within `ELLIPSIS_AUTHZ_TIMEOUT` (1 s) is a denial",
		settings: []string{"ELLIPSIS_AUTHZ_TIMEOUT", "ELLIPSIS_SNAPSHOT_TIMEOUT"},
		base:     func(c *Config) { c.Authz = AuthzNATS },
		holds: func(c *Config) error {
			// A join's authorisation runs within the snapshot timeout.
			if c.AuthzTimeout > c.SnapshotTimeout {
				return fmt.Errorf("authz timeout %s cut by the snapshot timeout %s", c.AuthzTimeout, c.SnapshotTimeout)
			}
			return nil
		}},
	{quote: "a Pub/Sub link silent for `ELLIPSIS_PUBSUB_PING_TIMEOUT` after a PING is redialed",
		settings: []string{"ELLIPSIS_PUBSUB_PING_INTERVAL", "ELLIPSIS_PUBSUB_PING_TIMEOUT"},
		holds: func(c *Config) error {
			// One PING is outstanding at a time.
			if c.PubSubPingTimeout >= c.PubSubPingInterval {
				return fmt.Errorf("ping timeout %s, interval %s", c.PubSubPingTimeout, c.PubSubPingInterval)
			}
			return nil
		}},
	{quote: "| rooms in a `disconnect` command | `protocol.MaxRoomsPerCommand` | 1000 | command dropped by the worker |",
		settings: []string{"ELLIPSIS_MAX_ROOMS_PER_CONN"},
		holds: func(c *Config) error {
			// A closing connection's one disconnect lists all its rooms.
			if c.MaxRoomsPerConn > protocol.MaxRoomsPerCommand {
				return fmt.Errorf("%d rooms per connection, %d per disconnect", c.MaxRoomsPerConn, protocol.MaxRoomsPerCommand)
			}
			return nil
		}},
	{quote: "Any such string works end to end",
		settings: []string{"ELLIPSIS_MAX_FRAME_BYTES"},
		holds: func(c *Config) error {
			if n := longestClientFrame(); n > c.MaxFrameBytes {
				return fmt.Errorf("the longest client frame is %d bytes, the limit %d", n, c.MaxFrameBytes)
			}
			return nil
		}},
}

func withJWKSURL(c *Config) {
	c.Service, c.Auth, c.JWKSURL = ServiceGateway, AuthJWT, "https://idp.example/jwks"
}

// longestClientFrame is the byte length of the longest frame a client may
// need to send: typing_start (the longest type) with a room id and a
// request id at their limits, every byte a '"', which JSON escapes to 2
// (no id holds the control characters that take 6).
func longestClientFrame() int {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // what JSON.stringify writes
	f := protocol.ClientFrame{Type: protocol.TypeTypingStart,
		Room: strings.Repeat(`"`, protocol.MaxIDBytes), ID: strings.Repeat(`"`, protocol.MaxRequestIDBytes)}
	if err := enc.Encode(f); err != nil {
		panic(err)
	}
	return len(bytes.TrimRight(b.Bytes(), "\n"))
}

// unbounded lists the numeric settings that leave a side of their range
// open, with why no promise needs it closed and a probe value standing for
// "very large" (or small) in the walk below.
var unbounded = map[string]struct {
	below, above bool
	reason       string
	probes       []string
}{
	"ELLIPSIS_JWKS_RELOAD": {above: true, probes: []string{"1000h"},
		reason: "a new kid is read at once; how long a removed key keeps verifying is the operator's trade against the identity provider's load, and docs/protocol.md promises no delay"},
	"ELLIPSIS_AUTHZ_CACHE_TTL": {above: true, probes: []string{"1000h"},
		reason: "how long a revoked room stays allowed is the operator's trade against the authoriser's load; no promise of docs/protocol.md depends on it"},
	"ELLIPSIS_AUTHZ_DENY_CACHE_TTL": {above: true, probes: []string{"1000h"},
		reason: "how long a denial is remembered is the operator's trade; no promise of docs/protocol.md depends on it"},
	"ELLIPSIS_PUBSUB_PING_INTERVAL": {above: true, probes: []string{"1000h"},
		reason: "a longer interval only notices a dead Pub/Sub link later; docs/protocol.md names no detection time (docs/failures.md measures the defaults)"},
	"ELLIPSIS_PUBSUB_PING_TIMEOUT": {above: true, probes: []string{"999h"},
		reason: "closed above by the rule timeout < interval"},
	"ELLIPSIS_WRITE_WAIT": {above: true, probes: []string{"1000h"},
		reason: "a slow reader holds only its own connection: a full outbound queue closes it (1013) whatever the wait, and a close cuts the write deadline"},
	"ELLIPSIS_INBOUND_RATE": {below: true, above: true, probes: []string{"0.001", "1e9"},
		reason: "any finite rate above 0 is a token bucket (0, NaN and ±Inf are refused); the refresh rule keeps refresh ≥ 1/rate"},
	"ELLIPSIS_SNAPSHOT_RATE": {below: true, above: true, probes: []string{"0.001", "1e9"},
		reason: "any finite rate above 0 is a token bucket (0, NaN and ±Inf are refused); how many snapshots a connection may ask is the operator's trade against the workers' load, and no promise of docs/protocol.md depends on it"},
	"ELLIPSIS_HTTP_SNAPSHOT_RATE": {below: true, above: true, probes: []string{"0.001", "1e9"},
		reason: "any finite rate above 0 is a token bucket (0, NaN and ±Inf are refused); the operator's trade, as ELLIPSIS_SNAPSHOT_RATE"},
}

func TestPromiseQuotesInProtocol(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	space := regexp.MustCompile(`\s+`)
	text := space.ReplaceAllString(string(doc), " ")
	for _, p := range promises {
		if !strings.Contains(text, space.ReplaceAllString(p.quote, " ")) {
			t.Errorf("docs/protocol.md no longer says %q: update the promise here with the contract", p.quote)
		}
	}
}

// TestEveryNumberBounded: each duration, integer and float setting has
// both ends of its range in the table, or is listed in unbounded with a
// reason; and a listing matches the table.
func TestEveryNumberBounded(t *testing.T) {
	for _, s := range Settings() {
		if _, ok := unit(s); !ok {
			if _, listed := unbounded[s.Env]; listed {
				t.Errorf("%s is listed as unbounded but is not a number", s.Env)
			}
			continue
		}
		lo, hi := s.V.limits()
		u := unbounded[s.Env]
		if (lo == "") != u.below || (hi == "") != u.above {
			t.Errorf("%s accepts %q..%q; unbounded lists below %v, above %v: bound it in settings.go or list why not", s.Env, lo, hi, u.below, u.above)
		}
		if (u.below || u.above) && u.reason == "" {
			t.Errorf("%s is unbounded without a reason", s.Env)
		}
	}
}

// TestValuesPastTheBoundsRefused: one unit past either end of a setting's
// range is refused, the error naming the setting and the bound.
func TestValuesPastTheBoundsRefused(t *testing.T) {
	for _, s := range Settings() {
		if _, ok := unit(s); !ok {
			continue
		}
		lo, hi := s.V.limits()
		for _, end := range []struct {
			bound string
			dir   float64
		}{{lo, -1}, {hi, 1}} {
			if end.bound == "" {
				continue
			}
			beyond := past(s, end.bound, end.dir)
			c := Dev()
			if err := set(&c, s.Env, beyond); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			named := end.bound // a floor of 0 is named "must not be negative"
			if num(s, end.bound) == 0 && err != nil && strings.Contains(err.Error(), s.Env+": must not be negative") {
				continue
			}
			if err == nil || !strings.Contains(err.Error(), s.Env+": must be") || !strings.Contains(err.Error(), named) {
				t.Errorf("%s=%s (past %s): got %v, want an error naming %s and %s", s.Env, beyond, end.bound, err, s.Env, end.bound)
			}
		}
	}
}

// coupled are the settings that rules across settings (settings.go) tie
// together: a promise is walked over its settings and theirs, so that the
// ends of each range are reached with partners that let Validate accept
// them.
var coupled = map[string][]string{
	"ELLIPSIS_TYPING_TTL":           {"ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_TYPING_REFRESH", "ELLIPSIS_TYPING_IDLE_STOP"},
	"ELLIPSIS_TYPING_THROTTLE":      {"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_REFRESH"},
	"ELLIPSIS_TYPING_REFRESH":       {"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_INBOUND_RATE"},
	"ELLIPSIS_TYPING_IDLE_STOP":     {"ELLIPSIS_TYPING_TTL"},
	"ELLIPSIS_INBOUND_RATE":         {"ELLIPSIS_TYPING_REFRESH"},
	"ELLIPSIS_AUTHZ_TIMEOUT":        {"ELLIPSIS_SNAPSHOT_TIMEOUT"},
	"ELLIPSIS_SNAPSHOT_TIMEOUT":     {"ELLIPSIS_AUTHZ_TIMEOUT"},
	"ELLIPSIS_PUBSUB_PING_INTERVAL": {"ELLIPSIS_PUBSUB_PING_TIMEOUT"},
	"ELLIPSIS_PUBSUB_PING_TIMEOUT":  {"ELLIPSIS_PUBSUB_PING_INTERVAL"},
}

// partners are the settings coupled to p's, transitively, that are not
// p's own.
func partners(p promise) []string {
	seen := map[string]bool{}
	for _, env := range p.settings {
		seen[env] = true
	}
	var out []string
	for todo := append([]string(nil), p.settings...); len(todo) > 0; todo = todo[1:] {
		for _, o := range coupled[todo[0]] {
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
				todo = append(todo, o)
			}
		}
	}
	return out
}

// TestPromisesHoldAtTheBounds walks every promise over its settings'
// smallest and largest values (two units inside each end, and the
// defaults), each combination with the first values of the coupled
// settings that Validate accepts: every accepted combination must keep the
// promise, and each setting's largest and smallest accepted values must be
// within two units of the table's bounds (the bounds are the real limits;
// the ordering ttl > refresh > throttle ≥ 1 ms moves them by a unit or
// two).
func TestPromisesHoldAtTheBounds(t *testing.T) {
	for _, p := range promises {
		lowest, highest := walk(t, p)
		if len(lowest) == 0 {
			t.Errorf("%q: no combination of %v is accepted", p.quote, p.settings)
			continue
		}
		for _, env := range p.settings {
			s := setting(t, env)
			lo, hi := s.V.limits()
			u, _ := unit(s)
			if hi != "" && less(s, highest[env], stepUnits(s, hi, -2*u)) {
				t.Errorf("%q: %s's largest accepted value is %s, the table says %s", p.quote, env, highest[env], hi)
			}
			if lo != "" && less(s, stepUnits(s, lo, 2*u), lowest[env]) {
				t.Errorf("%q: %s's smallest accepted value is %s, the table says %s", p.quote, env, lowest[env], lo)
			}
		}
	}
}

// walk checks p on every accepted combination of its settings'
// candidates, and returns the smallest and largest accepted value of each.
func walk(t *testing.T, p promise) (lowest, highest map[string]string) {
	t.Helper()
	others := partners(p)
	envs := append(append([]string(nil), p.settings...), others...)
	own := make([][]string, len(p.settings))
	for i, env := range p.settings {
		own[i] = candidates(setting(t, env))
	}
	part := make([][]string, len(others))
	for i, env := range others {
		part[i] = candidates(setting(t, env))
	}
	base := Dev()
	base.JWTSecret = "s" // the gateway's jwt mode needs a key source
	if p.base != nil {
		p.base(&base)
	}
	c := base
	vals := map[string]value{}
	for _, s := range c.table() { // bound to c, which each try overwrites
		vals[s.Env] = s.V
	}
	byEnv := map[string]Setting{}
	for _, env := range p.settings {
		byEnv[env] = setting(t, env)
	}
	lowest, highest = map[string]string{}, map[string]string{}
	partnerCombos := product(part)
	// An own combination no partners make acceptable is refused by a rule
	// across settings, so by the values of its coupled settings alone:
	// those are remembered, and skipped with any value of the others.
	hopeless := map[string]bool{}
	for _, combo := range product(own) {
		var key strings.Builder
		for i, env := range p.settings {
			if len(coupled[env]) > 0 {
				key.WriteString(combo[i] + "|")
			}
		}
		if hopeless[key.String()] {
			continue
		}
		found := false
		for _, pc := range partnerCombos {
			c = base
			for i, v := range append(append([]string(nil), combo...), pc...) {
				if err := vals[envs[i]].set(v); err != nil {
					t.Fatalf("%s=%s: %v", envs[i], v, err)
				}
			}
			if c.Validate() != nil {
				continue
			}
			if err := p.holds(&c); err != nil {
				t.Errorf("%q broken by an accepted config %v = %v %v: %v", p.quote, envs, combo, pc, err)
			}
			for i, env := range p.settings {
				s := byEnv[env]
				if v := combo[i]; lowest[env] == "" || less(s, v, lowest[env]) {
					lowest[env] = v
				}
				if v := combo[i]; highest[env] == "" || less(s, highest[env], v) {
					highest[env] = v
				}
			}
			found = true
			break // the promise reads its own settings: one partner set will do
		}
		hopeless[key.String()] = !found
	}
	return lowest, highest
}

func setting(t *testing.T, env string) Setting {
	t.Helper()
	for _, s := range Settings() {
		if s.Env == env {
			return s
		}
	}
	t.Fatalf("no setting %s", env)
	return Setting{}
}

// unit is the step of a numeric setting (1 ms for durations: the typing
// timers are whole ms; 1 for integers; 0 for floats), ok false when the
// setting is not a number.
func unit(s Setting) (float64, bool) {
	switch s.V.(type) {
	case *field[time.Duration]:
		return float64(time.Millisecond), true
	case *field[int]:
		return 1, true
	case *field[float64]:
		return 0, true
	}
	return 0, false
}

// num reads a numeric setting's text as a float (ns for durations).
func num(s Setting, v string) float64 {
	switch s.V.(type) {
	case *field[time.Duration]:
		d, err := time.ParseDuration(v)
		if err != nil {
			panic(err)
		}
		return float64(d)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		panic(err)
	}
	return f
}

// past is one step beyond the bound v, downwards for dir < 0: 1 ns for a
// duration (the least it can move), 1 for an integer, a millionth for a
// float.
func past(s Setting, v string, dir float64) string {
	switch s.V.(type) {
	case *field[time.Duration]:
		return time.Duration(num(s, v) + math.Copysign(1, dir)).String()
	case *field[int]:
		return strconv.Itoa(int(num(s, v) + math.Copysign(1, dir)))
	}
	f := num(s, v)
	return strconv.FormatFloat(f+math.Copysign(math.Max(math.Abs(f), 1)*1e-6, dir), 'g', -1, 64)
}

func less(s Setting, a, b string) bool { return num(s, a) < num(s, b) }

// candidates are the values of s the walk tries: its default, the ends of
// its range, two units inside each, and unbounded's probes for an open
// side.
func candidates(s Setting) []string {
	u, _ := unit(s)
	lo, hi := s.V.limits()
	out := []string{s.Default()}
	if lo != "" {
		out = append(out, lo, stepUnits(s, lo, u), stepUnits(s, lo, 2*u))
	}
	if hi != "" {
		out = append(out, hi, stepUnits(s, hi, -u), stepUnits(s, hi, -2*u))
	}
	return append(out, unbounded[s.Env].probes...)
}

// stepUnits is v moved by delta (in the setting's units), for values
// inside the range.
func stepUnits(s Setting, v string, delta float64) string {
	switch s.V.(type) {
	case *field[time.Duration]:
		return time.Duration(num(s, v) + delta).String()
	case *field[int]:
		return strconv.Itoa(int(num(s, v) + delta))
	}
	return v
}

func product(sets [][]string) [][]string {
	out := [][]string{nil}
	for _, set := range sets {
		var next [][]string
		for _, prefix := range out {
			for _, v := range set {
				next = append(next, append(append([]string(nil), prefix...), v))
			}
		}
		out = next
	}
	return out
}

// set gives the setting env the value v, as Load would.
func set(c *Config, env, v string) error {
	for _, s := range c.table() {
		if s.Env == env {
			if err := s.V.set(v); err != nil {
				return fmt.Errorf("%s=%s: %w", env, v, err)
			}
			return nil
		}
	}
	return fmt.Errorf("no setting %s", env)
}

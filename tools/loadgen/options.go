package loadgen

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"time"
)

// fill sets the defaults of o's zero fields and checks o; the error lists
// every problem found.
func fill(o *Options) error {
	setDefaults(o)
	errs := append(checkModeAndSystem(o), checkBounds(o)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// setDefaults gives o's zero fields their defaults (see [Options]).
func setDefaults(o *Options) {
	if len(o.URLs) == 0 {
		o.URLs = []string{DefaultURL}
	}
	o.Mode = cmp.Or(o.Mode, ModeRate)
	o.System = cmp.Or(o.System, SystemEllipsis)
	o.CentrifugoNamespace = cmp.Or(o.CentrifugoNamespace, DefaultCentrifugoNamespace)
	o.Conns = cmp.Or(o.Conns, DefaultConns)
	o.Rooms = cmp.Or(o.Rooms, DefaultRooms)
	o.Rate = cmp.Or(o.Rate, DefaultRate)
	o.TypingShare = cmp.Or(o.TypingShare, 1)
	o.Duration = cmp.Or(o.Duration, DefaultDuration)
	o.Settle = cmp.Or(o.Settle, DefaultSettle)
	o.SettleMax = cmp.Or(o.SettleMax, DefaultSettleMax)
	o.Speed = cmp.Or(o.Speed, 1)
	o.ReplaySpread = cmp.Or(o.ReplaySpread, DefaultReplaySpread)
	o.Seed = cmp.Or(o.Seed, 1)
	o.DialTimeout = cmp.Or(o.DialTimeout, DefaultDialTimeout)
	o.DialConcurrency = cmp.Or(o.DialConcurrency, DefaultDialConcurrency)
	o.SourceIPs = cmp.Or(o.SourceIPs, DefaultSourceIPs)
	o.MaxPerConnRate = cmp.Or(o.MaxPerConnRate, DefaultInboundRate)
	o.StallAt = cmp.Or(o.StallAt, o.Duration/3)
	o.StallFor = cmp.Or(o.StallFor, DefaultStallFor)
	o.StallRcvBuf = cmp.Or(o.StallRcvBuf, DefaultStallRcvBuf)
	o.WatchRooms = cmp.Or(o.WatchRooms, DefaultWatchRooms)
	o.WatchAt = cmp.Or(o.WatchAt, o.Duration/2)
	o.RunID = cmp.Or(o.RunID, "lg"+strconv.FormatUint(rand.Uint64()%(1<<40), 36))
}

// checkModeAndSystem checks the mode, the system under test and what it
// needs.
func checkModeAndSystem(o *Options) []error {
	var errs []error
	switch o.Mode {
	case ModeRate, ModeReplay, ModeIdle:
	default:
		errs = append(errs, fmt.Errorf("mode %q must be rate, replay or idle", o.Mode))
	}
	switch o.System {
	case SystemEllipsis:
	case SystemCentrifugo:
		if o.Stack {
			errs = append(errs, errors.New("system centrifugo: the in-process stack is Ellipsis's; start Centrifugo (tools/loadgen/peers.sh) and pass its URL"))
		}
		if o.JWTSecret == "" {
			errs = append(errs, errors.New("system centrifugo needs the JWT secret (its client.token.hmac_secret_key)"))
		}
		if !isWord(o.CentrifugoNamespace) {
			errs = append(errs, fmt.Errorf("centrifugo namespace %q: letters, digits, - and _ only", o.CentrifugoNamespace))
		}
	default:
		errs = append(errs, fmt.Errorf("system %q must be %s or %s", o.System, SystemEllipsis, SystemCentrifugo))
	}
	return errs
}

// checkBounds checks the run id, the sizes, rates and durations, the
// rate per connection against the gateway's inbound limit, and the URLs.
func checkBounds(o *Options) []error {
	var errs []error
	if !isWord(o.RunID) {
		errs = append(errs, fmt.Errorf("run id %q: letters, digits, - and _ only (it is part of every room and user id)", o.RunID))
	}
	if o.Conns < 1 || o.Conns > 200_000 {
		errs = append(errs, fmt.Errorf("conns must be 1..200000, got %d", o.Conns))
	}
	if o.Rooms < 1 || o.Rooms > o.Conns {
		errs = append(errs, fmt.Errorf("rooms must be 1..conns (%d), got %d", o.Conns, o.Rooms))
	}
	if o.TypingShare < 0 || o.TypingShare > 1 {
		errs = append(errs, fmt.Errorf("typing share must be in (0, 1], got %g", o.TypingShare))
	}
	if o.Rate < 0 || o.Speed < 0 || o.Duration < 0 || o.Settle < 0 || o.Warmup < 0 || o.DialTimeout < 0 || o.DialConcurrency < 0 {
		errs = append(errs, errors.New("rate, speed, duration, settle, warmup, dial timeout and dial concurrency must not be negative"))
	}
	if o.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %s: at most 24h", o.Duration))
	}
	if o.SourceIPs > 250 {
		errs = append(errs, fmt.Errorf("source IPs must be at most 250, got %d", o.SourceIPs))
	}
	errs = append(errs, checkCases(o)...)
	if o.Mode == ModeRate {
		typing := max(1, int(float64(o.Conns)*o.TypingShare))
		// Each state change may come with a refresh; frames per
		// connection per second is at most about rate/typing.
		if per := o.Rate / float64(typing); per > o.MaxPerConnRate {
			errs = append(errs, fmt.Errorf("rate %g over %d typing connections is %.1f frames/s each, above the gateway's inbound limit of %g/s (ELLIPSIS_INBOUND_RATE): add connections", o.Rate, typing, per, o.MaxPerConnRate))
		}
	}
	if !o.Stack {
		for _, u := range o.URLs {
			p, err := url.Parse(u)
			if err != nil || (p.Scheme != "ws" && p.Scheme != "wss") || p.Host == "" {
				errs = append(errs, fmt.Errorf("url %q is not a ws:// or wss:// URL with a host", u))
			}
		}
	}
	return errs
}

// isWord reports whether s is non-empty and only ASCII letters, digits,
// '-' and '_': safe in room ids, user ids and Centrifugo channel names
// without escaping.
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

// checkCases checks the options of the big-room, stalled-readers and
// watch cases.
func checkCases(o *Options) []error {
	var errs []error
	if o.StateSample < 0 || o.StateSample > o.Conns {
		errs = append(errs, fmt.Errorf("state sample must be 0..conns (%d), got %d", o.Conns, o.StateSample))
	}
	if o.StallShare < 0 || o.StallShare >= 1 {
		errs = append(errs, fmt.Errorf("stall share must be in [0, 1), got %g", o.StallShare))
	}
	if o.StallShare > 0 && (o.StallAt < 0 || o.StallFor < 0 || o.StallAt+o.StallFor > o.Duration) {
		errs = append(errs, fmt.Errorf("stall from %s for %s must end within the duration (%s)", o.StallAt, o.StallFor, o.Duration))
	}
	if o.StallShare > 0 && o.StateSample > 0 {
		errs = append(errs, errors.New("stall share and state sample: one case at a time"))
	}
	if o.Watchers < 0 || o.Watchers > 100 {
		errs = append(errs, fmt.Errorf("watchers must be 0..100, got %d", o.Watchers))
	}
	if o.WatchRooms < 1 || o.WatchRooms > 10_000 {
		errs = append(errs, fmt.Errorf("watch rooms must be 1..10000, got %d", o.WatchRooms))
	}
	if o.Watchers > 0 && (o.WatchAt < 0 || o.WatchAt >= o.Duration) {
		errs = append(errs, fmt.Errorf("watch at %s must be within the duration (%s)", o.WatchAt, o.Duration))
	}
	if (o.StateSample > 0 || o.StallShare > 0 || o.Watchers > 0) && (o.System != SystemEllipsis || o.Mode == ModeReplay) {
		errs = append(errs, errors.New("state sample, stall share and watchers need system ellipsis in rate or idle mode"))
	}
	return errs
}

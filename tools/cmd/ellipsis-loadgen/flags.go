package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/tools/loadgen"
)

// flags are the command line.
type flags struct {
	urls        *string
	system      *string
	cfNamespace *string
	cpuPIDs     *string
	compare     *string
	loadName    *string
	mode        *string
	conns       *int
	rooms       *int
	rate        *float64
	share       *float64
	duration    *time.Duration
	settle      *time.Duration
	settleMax   *time.Duration
	warmup      *time.Duration
	ksPath      *string
	speed       *float64
	spread      *time.Duration
	seed        *uint64
	secret      *string
	dialTimeout *time.Duration
	dialConc    *int
	sourceIPs   *int
	rssPID      *int
	stack       *bool
	jsonOut     *string
	quiet       *bool
	verbose     *bool
	remote      *bool
	cpuProfile  *string
	scrape      *string
	memProfile  *string

	stateSample *int
	stallShare  *float64
	stallAt     *time.Duration
	stallFor    *time.Duration
	stallRcvBuf *int
	watchers    *int
	watchRooms  *int
	watchAt     *time.Duration
	side        *string
	sideNames   *string
	sweep       *string
	p99Target   *float64
	labels      labels
}

// defineFlags declares the flags on fs.
func defineFlags(fs *flag.FlagSet) *flags {
	f := &flags{
		urls:        fs.String("url", loadgen.DefaultURL, "gateway WebSocket endpoints, comma-separated (ignored with -stack; -system centrifugo: default "+loadgen.DefaultCentrifugoURL+")"),
		system:      fs.String("system", loadgen.SystemEllipsis, "system under test: ellipsis (its gateways) or centrifugo (Centrifugo v6, JSON protocol over WebSocket; needs -jwt-secret, its client.token.hmac_secret_key)"),
		cfNamespace: fs.String("centrifugo-namespace", loadgen.DefaultCentrifugoNamespace, "-system centrifugo: the channel namespace of the rooms (room R is channel <namespace>:R)"),
		cpuPIDs:     fs.String("cpu-pids", "", "comma-separated pids of the system's server processes (gateway, worker, NATS, Redis; or Centrifugo and its Redis): their CPU time over the run, per state change"),
		compare:     fs.String("compare", "", "ELLIPSIS.json,CENTRIFUGO.json: print the peer table of two runs' -json outputs (no run); -json writes the pair with the ratios"),
		loadName:    fs.String("load", "custom", "-compare, -sweep: the load's name in the table (L1, L2, L3)"),
		mode:        fs.String("mode", loadgen.ModeRate, "rate (fixed rate of state changes), replay (real keystrokes through the SDK timers) or idle (connect, join, send nothing)"),
		conns:       fs.Int("conns", loadgen.DefaultConns, "connections to open (one user each)"),
		rooms:       fs.Int("rooms", loadgen.DefaultRooms, "rooms to spread them over (connection i joins room i % rooms)"),
		rate:        fs.Float64("rate", loadgen.DefaultRate, "rate mode: typing state changes per second, all connections together"),
		share:       fs.Float64("typing-share", 1, "fraction of connections that type; the others only listen"),
		duration:    fs.Duration("duration", loadgen.DefaultDuration, "how long typing is driven (idle: how long connections stay open)"),
		settle:      fs.Duration("settle", loadgen.DefaultSettle, "keep reading at least this long after the last send (then while deliveries are missing and frames still arrive)"),
		warmup:      fs.Duration("warmup", 0, "after connecting, stay idle this long before driving typing; CPU and latencies are measured from its end"),
		settleMax:   fs.Duration("settle-max", loadgen.DefaultSettleMax, "keep reading at most this long after the last send"),
		ksPath:      fs.String("keystrokes", "", "replay mode: keystroke CSV (default: tools/keystrokes/data/neuroqwerty_controls_keystrokes.csv in the repository, else the embedded sample)"),
		speed:       fs.Float64("speed", 1, "replay mode: divide recorded keystroke times by this (client timers stay real time)"),
		spread:      fs.Duration("spread", loadgen.DefaultReplaySpread, "replay mode: clients start typing within this window"),
		seed:        fs.Uint64("seed", 1, "replay mode: random seed (first message, start offset)"),
		secret:      fs.String("jwt-secret", "", "mint HS256 tokens with the gateway's secret (ELLIPSIS_AUTH=jwt); default $ELLIPSIS_JWT_SECRET"),
		dialTimeout: fs.Duration("dial-timeout", loadgen.DefaultDialTimeout, "bound on each handshake and join"),
		dialConc:    fs.Int("dial-concurrency", loadgen.DefaultDialConcurrency, "handshakes in flight at once"),
		sourceIPs:   fs.Int("source-ips", loadgen.DefaultSourceIPs, "spread connections to a loopback target over this many source addresses 127.0.0.1..N (-1: kernel's choice)"),
		rssPID:      fs.Int("rss-pid", 0, "watch this process (the gateway, or the stack) in /proc: RSS before, during and after (bytes per connection), and CPU time over the run (per state change, per frame)"),
		stack:       fs.Bool("stack", false, "start an in-process stack (gateway + worker, embedded NATS, Redis on 127.0.0.1:6379 or embedded) with unique prefixes and target it; ELLIPSIS_* variables configure it"),
		jsonOut:     fs.String("json", "", "also write the summary as JSON to this file"),
		quiet:       fs.Bool("q", false, "no progress lines"),
		verbose:     fs.Bool("v", false, "log the stack and failed connections (stderr)"),
		remote:      fs.Bool("allow-remote", false, "allow targets that are not loopback addresses"),
		cpuProfile:  fs.String("cpuprofile", "", "write a CPU profile of this process (with -stack: the stack too) to this file"),
		scrape:      fs.String("scrape", "", "at the end of the run, connections still open, print the Go runtime and process lines of this /metrics URL (the gateway's admin /metrics)"),
		memProfile:  fs.String("memprofile", "", "write a heap profile of this process (with -stack: the stack too) to this file at the end of the run, connections still open"),

		stateSample: fs.Int("state-sample", 0, "big-room case: this many listeners, spread evenly, measure the delay to the state (by event or `typing` frame); the other connections only count frames"),
		stallShare:  fs.Float64("stall-share", 0, "stalled-readers case: this fraction of the listening connections stop reading for -stall-for from -stall-at, then read again"),
		stallAt:     fs.Duration("stall-at", 0, "stalled-readers case: when the stall starts after the start of the run (default a third of -duration)"),
		stallFor:    fs.Duration("stall-for", loadgen.DefaultStallFor, "stalled-readers case: how long the stalled connections do not read"),
		stallRcvBuf: fs.Int("stall-rcvbuf", loadgen.DefaultStallRcvBuf, "stalled-readers case: SO_RCVBUF of the stalled connections, bytes (-1: the kernel's)"),
		watchers:    fs.Int("watchers", 0, "watch case: extra connections (members of no room) that each watch -watch-rooms rooms"),
		watchRooms:  fs.Int("watch-rooms", loadgen.DefaultWatchRooms, "watch case: rooms each watcher watches"),
		watchAt:     fs.Duration("watch-at", 0, "watch case: when the watchers start watching after the start of the run (default half of -duration)"),
		side:        fs.String("side", "", "A.json,B.json,...: print the side-by-side table of runs' -json outputs (no run)"),
		sideNames:   fs.String("side-names", "", "-side: the columns' names, comma-separated (default the file names)"),
		sweep:       fs.String("sweep", "", "A.json,B.json,...: print the peer sweep table of runs' -json outputs (no run): each run against -p99-target, the ratios to Centrifugo at the same rate, each system's and window's capacity; -json writes it"),
		p99Target:   fs.Float64("p99-target", loadgen.DefaultSweepP99TargetMs, "-sweep: the p99 (ms) a run must stay within to count towards capacity"),
	}
	fs.Var(&f.labels, "label", "key=value (repeatable): recorded in the -json output's labels, e.g. batch_window=5ms (key: a-z, 0-9, _, up to 32 bytes; value: printable, up to 64 bytes)")
	return f
}

// parseFlags parses args into f; the error is flag.ErrHelp for -h. An
// empty -jwt-secret takes $ELLIPSIS_JWT_SECRET (not as the flag's default:
// -h would print it), and -system centrifugo without -url targets
// loadgen.DefaultCentrifugoURL.
func parseFlags(args []string) (*flags, error) {
	fs := flag.NewFlagSet("ellipsis-loadgen", flag.ContinueOnError)
	f := defineFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ellipsis-loadgen [flags]\n\nOpens -conns WebSocket connections over -rooms rooms, drives typing, and measures end-to-end latency.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *f.secret == "" {
		*f.secret = os.Getenv("ELLIPSIS_JWT_SECRET")
	}
	urlSet := false
	fs.Visit(func(fl *flag.Flag) { urlSet = urlSet || fl.Name == "url" })
	if *f.system == loadgen.SystemCentrifugo && !urlSet {
		*f.urls = loadgen.DefaultCentrifugoURL
	}
	return f, nil
}

// options turns the flags into loadgen.Options, refusing non-positive
// -speed, -rate, -typing-share or -duration and, without -stack or
// -allow-remote, a target that is not a loopback address.
func (f *flags) options() (loadgen.Options, error) {
	pids, err := parsePIDs(*f.cpuPIDs)
	if err != nil {
		return loadgen.Options{}, fmt.Errorf("-cpu-pids: %w", err)
	}
	opts := loadgen.Options{
		System: *f.system, CentrifugoNamespace: *f.cfNamespace, CPUPIDs: pids,
		URLs: splitList(*f.urls), Mode: *f.mode, Conns: *f.conns, Rooms: *f.rooms, Rate: *f.rate, TypingShare: *f.share,
		Duration: *f.duration, Settle: *f.settle, SettleMax: *f.settleMax, Warmup: *f.warmup, Speed: *f.speed, ReplaySpread: *f.spread, Seed: *f.seed,
		JWTSecret: *f.secret, DialTimeout: *f.dialTimeout, DialConcurrency: *f.dialConc, SourceIPs: *f.sourceIPs,
		RSSPID: *f.rssPID, Stack: *f.stack,
		StateSample: *f.stateSample, StallShare: *f.stallShare, StallAt: *f.stallAt, StallFor: *f.stallFor, StallRcvBuf: *f.stallRcvBuf,
		Watchers: *f.watchers, WatchRooms: *f.watchRooms, WatchAt: *f.watchAt,
	}
	if !*f.quiet {
		opts.Progress = os.Stdout
	}
	if *f.speed <= 0 || *f.rate <= 0 || *f.share <= 0 || *f.duration <= 0 {
		return opts, errors.New("-speed, -rate, -typing-share and -duration must be positive")
	}
	if !*f.stack && !*f.remote {
		for _, u := range opts.URLs {
			if err := checkLoopback(u); err != nil {
				return opts, fmt.Errorf("%w (pass -allow-remote to load another machine)", err)
			}
		}
	}
	return opts, nil
}

// stackAndReplay adds to opts the in-process stack's configuration
// (-stack: config.Dev() under the ELLIPSIS_* variables, log level warn
// unless set) and the keystroke sessions to replay (-mode replay).
func (f *flags) stackAndReplay(opts *loadgen.Options) error {
	if *f.stack {
		cfg, err := config.Load(nil, nil, os.LookupEnv, config.Dev())
		if err != nil {
			return fmt.Errorf("stack configuration: %w", err)
		}
		if !cfg.IsSet("ELLIPSIS_LOG_LEVEL") {
			cfg.LogLevel = "warn"
		}
		opts.StackConfig = &cfg
		if opts.Logger == nil {
			opts.Logger = zap.NewNop()
		}
	}
	if *f.mode == loadgen.ModeReplay {
		sessions, src, err := loadKeystrokes(*f.ksPath)
		if err != nil {
			return err
		}
		opts.Keystrokes, opts.KeystrokesSource = sessions, src
	}
	return nil
}

// labels is the repeatable -label key=value flag.
type labels map[string]string

// Label bounds: a key is a short identifier, a value a short printable
// string.
const (
	maxLabelKey   = 32
	maxLabelValue = 64
)

func (l *labels) String() string { return fmt.Sprint(map[string]string(*l)) }

// Set parses one key=value, refusing a key outside [a-z0-9_] or longer
// than 32 bytes, a value longer than 64 bytes or with a control byte, and
// a key given twice.
func (l *labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want key=value", s)
	}
	if k == "" || len(k) > maxLabelKey || strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) >= 0 {
		return fmt.Errorf("key %q: 1 to %d bytes of a-z, 0-9 and _", k, maxLabelKey)
	}
	if len(v) > maxLabelValue || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("value of %s: up to %d bytes, printable", k, maxLabelValue)
	}
	if _, dup := (*l)[k]; dup {
		return fmt.Errorf("key %s given twice", k)
	}
	if *l == nil {
		*l = labels{}
	}
	(*l)[k] = v
	return nil
}

// Package loadgen is Ellipsis's load generator: it opens many WebSocket
// connections over many rooms against one or more gateways, drives typing
// on them, and measures the end-to-end latency of every typing event from
// the sender's write to each receiver's read (see track.go for how events
// are matched to sends without any field of the sender's frame reaching
// the receivers).
//
// Modes:
//
//   - rate: a fixed rate of state changes (typing_start / typing_stop
//     toggles) spread evenly over the typing connections, with refreshes
//     when a burst outlasts the client refresh interval.
//   - replay: every typing connection replays real human keystroke timings
//     (package keystrokes: the neuroQWERTY sessions) through the SDK's
//     timer rules (package typist), which decide what is sent.
//   - idle: connect and join, send nothing; with RSSPID it reports the
//     gateway's resident memory per idle connection.
//
// It prints a progress line every second and ends with a summary table
// ([Result.WriteTable]); [Result] marshals to JSON. With Options.Stack it
// starts its own in-process stack (package devstack) first, so one command
// measures everything. cmd/ellipsis-loadgen is a thin main over [Run].
//
// Load goes only where the URLs say; the command refuses non-loopback
// targets unless told otherwise. Every run is bounded: connections, a
// duration, and a settle time, after which it closes everything.
package loadgen

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// Modes.
const (
	ModeRate   = "rate"
	ModeReplay = "replay"
	ModeIdle   = "idle"
)

// Defaults of [Options] zero values.
const (
	DefaultURL         = "ws://127.0.0.1:8080/v1/ws"
	DefaultConns       = 1000
	DefaultRooms       = 100
	DefaultRate        = 2000
	DefaultDuration    = 20 * time.Second
	DefaultSettle      = time.Second
	DefaultSettleMax   = 15 * time.Second
	DefaultDialTimeout = 10 * time.Second
	// DefaultDialConcurrency is how many handshakes (and joins) are in
	// flight at once while connecting.
	DefaultDialConcurrency = 64
	// DefaultSourceIPs is how many loopback source addresses
	// (127.0.0.1, 127.0.0.2, ...) the connections are spread over when
	// the target is a loopback address: each source address has its own
	// ~28,000 ephemeral ports towards one target.
	DefaultSourceIPs = 16
	// DefaultReplaySpread: replaying clients start within this much time,
	// so their bursts do not line up.
	DefaultReplaySpread = 10 * time.Second
	// DefaultStallFor, DefaultStallRcvBuf: see Options.StallFor,
	// Options.StallRcvBuf.
	DefaultStallFor    = 10 * time.Second
	DefaultStallRcvBuf = 4096
	// DefaultWatchRooms is the gateway's default ELLIPSIS_MAX_WATCHED_ROOMS.
	DefaultWatchRooms = 500
)

// DefaultInboundRate is the gateway's per-connection inbound limit
// (ELLIPSIS_INBOUND_RATE); rate mode refuses to exceed it per connection.
var DefaultInboundRate = config.Default().InboundRate

// Options configure [Run]. Zero values take the defaults above.
type Options struct {
	// URLs are the gateways' WebSocket endpoints; connection i goes to
	// URLs[(i / Rooms) % len(URLs)], so every room has members on every
	// gateway. Ignored with Stack. Default DefaultURL.
	URLs []string
	// Mode is ModeRate (default), ModeReplay or ModeIdle.
	Mode string
	// Conns is how many connections to open. Default DefaultConns.
	Conns int
	// Rooms is how many rooms they are spread over (connection i joins
	// room i % Rooms). Default DefaultRooms.
	Rooms int
	// Rate is the total of typing state changes per second in rate mode.
	// Default DefaultRate.
	Rate float64
	// TypingShare is the fraction of connections that type (the others
	// only listen). Zero means 1.
	TypingShare float64
	// Duration is how long typing is driven (idle: how long connections
	// stay open). Default DefaultDuration.
	Duration time.Duration
	// Settle is how long at least to keep reading after the last send, so
	// the last events arrive; reading goes on while deliveries are still
	// missing and frames keep arriving (nothing for 500 ms ends it), up to
	// SettleMax. Default DefaultSettle.
	Settle time.Duration
	// SettleMax bounds the settle. Default DefaultSettleMax.
	SettleMax time.Duration
	// Warmup is how long the connections stay open, joined and idle after
	// connecting and before typing is driven; the server CPU and the
	// latencies are measured from its end. 0 (the default): none. A
	// server still busy with the connection burst (subscriptions, the
	// garbage of 15,000 handshakes) otherwise puts that work into the
	// first seconds measured: docs/BENCHMARKS.md, "Is the harness fair to
	// Centrifugo".
	Warmup time.Duration
	// Keystrokes are the sessions replayed in replay mode. Nil means the
	// embedded sample (keystrokes.Sample); cmd/ellipsis-loadgen loads the
	// full data set.
	Keystrokes []keystrokes.Session
	// KeystrokesSource names where Keystrokes came from, for the summary.
	KeystrokesSource string
	// Speed divides the recorded keystroke times in replay mode (client
	// timers stay real time). Zero means 1.
	Speed float64
	// ReplaySpread: replaying clients start within this. Zero means
	// DefaultReplaySpread; negative means all at once.
	ReplaySpread time.Duration
	// Seed seeds the replay's random choices. Zero means 1.
	Seed uint64
	// JWTSecret, when set, mints an HS256 token per user (the stack's
	// ELLIPSIS_JWT_SECRET); otherwise the dev mode's ?user= is used.
	JWTSecret string
	// RunID is put in every room and user id, so runs never meet in a
	// shared stack. Empty means a random one.
	RunID string
	// DialTimeout bounds each handshake and join. Default
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// DialConcurrency: handshakes in flight at once. Default
	// DefaultDialConcurrency.
	DialConcurrency int
	// SourceIPs: loopback source addresses to spread over when a target is
	// a loopback address (0: DefaultSourceIPs; negative: let the kernel
	// choose).
	SourceIPs int
	// MaxPerConnRate is the highest typing frame rate per connection that
	// rate mode accepts (the gateway's inbound limit). Zero means
	// DefaultInboundRate.
	MaxPerConnRate float64
	// RSSPID, when set, is a process (the gateway, or the stack) whose
	// resident memory is read from /proc before connecting, every second,
	// and at the end, and whose CPU time over the run (connected to end of
	// settle) is reported per state change and per frame delivered.
	RSSPID int
	// System is the system under test: SystemEllipsis (default) or
	// SystemCentrifugo (centrifugo.go; needs JWTSecret, the server's
	// client.token.hmac_secret_key).
	System string
	// CentrifugoNamespace is the channel namespace of the rooms with
	// SystemCentrifugo. Default DefaultCentrifugoNamespace.
	CentrifugoNamespace string
	// CPUPIDs are the system's server processes (e.g. gateway, worker,
	// NATS, Redis): their CPU time (user + system, /proc/<pid>/stat) from
	// the end of connecting to the end of the settle is summed in
	// Result.ServerCPU.
	CPUPIDs []int
	// StateSample, when above 0, is the big-room measure (state.go): that
	// many listening connections, spread evenly, keep a view of their room
	// and measure the delay to the state (by event or by `typing` frame);
	// they alone parse frames, every other connection only counts them
	// (Result.FramesPerMemberPerSec), so that 10,000 members cost the load
	// generator little. Event latency is not measured then.
	StateSample int
	// StallShare is the fraction of the listening (not typing)
	// connections that stop reading (stop
	// calling read on the socket) for StallFor from StallAt after the
	// start of the run, then read again (stall.go). Zero: none.
	StallShare float64
	// StallAt: when the stall starts, after the start of the run. Zero
	// means Duration/3.
	StallAt time.Duration
	// StallFor: how long the stalled connections do not read. Zero means
	// DefaultStallFor.
	StallFor time.Duration
	// StallRcvBuf is the receive buffer (SO_RCVBUF, bytes) of the stalled
	// connections, so that the gateway's writes to them back up within
	// the stall as they would to a phone on a slow link. Zero means
	// DefaultStallRcvBuf; negative: the kernel's default.
	StallRcvBuf int
	// Watchers is how many extra connections (not members of any room)
	// each watch WatchRooms rooms (watch.go; docs/protocol.md "Watching
	// rooms"). Zero: none.
	Watchers int
	// WatchRooms is how many rooms each watcher watches: rooms
	// w*WatchRooms .. (w+1)*WatchRooms-1 modulo Rooms. Zero means
	// DefaultWatchRooms.
	WatchRooms int
	// WatchAt: when the watchers start watching, after the start of the
	// run, so that the gateway's CPU before and after is measured in one
	// run. Zero means Duration/2.
	WatchAt time.Duration
	// Stack starts an in-process stack (gateway, worker, embedded NATS,
	// Redis from backends) and targets it; see StackConfig.
	Stack bool
	// StackConfig is the stack's configuration (config.Load over
	// config.Dev()); its key and subject prefixes and listen addresses are
	// replaced by unique ones, MaxConns is raised to Conns. Zero value:
	// config.Dev().
	StackConfig *config.Config
	// BeforeClose, when set, is called once the run and settle are over,
	// while every connection is still open (e.g. to write a heap profile
	// of an in-process stack holding them).
	BeforeClose func()
	// Progress receives a line every second. Nil means none.
	Progress io.Writer
	// Logger receives the stack's logs. Nil means none.
	Logger *zap.Logger
}

// runner is one run.
type runner struct {
	opts     Options
	log      *zap.Logger
	clock    clock
	st       *stats
	timers   typist.Config
	ttl      time.Duration
	runID    string
	drv      driver
	clients  []*client
	byUser   map[string]*client
	messages [][]keystrokes.Message
	sources  []*net.TCPAddr
	loopback map[string]bool // target host -> is loopback
	closing  atomic.Bool
	rssPeak  atomic.Int64

	// roomTypists are the connected typing clients of each room index.
	roomTypists [][]*client
	state       *stateStats
	stall       stallWindow
	watchers    []*watcher
	watch       *watchStats

	// Checkpoints of the drive (cases.go); watchMark under caseMu.
	driveStart, driveEnd checkpoint
	caseMu               sync.Mutex
	watchMark            checkpoint
}

// Run executes one bounded run and returns its result. ctx ends it early
// (the result so far is returned with ctx's error).
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := fill(&opts); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, log: opts.Logger, st: newStats(), runID: opts.RunID, drv: newDriver(opts.System), state: newStateStats(), watch: newWatchStats()}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	res := &Result{System: opts.System, Mode: opts.Mode, Conns: opts.Conns, Rooms: opts.Rooms, RunID: r.runID}
	res.Machine = Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadAvg(), NoFileLimit: raiseNoFile(uint64(opts.Conns)*2 + 1024)}
	cpu0 := processCPU()

	if opts.Stack {
		st, desc, err := startStack(ctx, &opts, r.log)
		if err != nil {
			return nil, err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = st.Shutdown(sctx)
		}()
		r.opts = opts
		res.Stack = desc
	}
	res.URLs = r.opts.URLs
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	for _, c := range r.clients {
		if c.typing {
			res.TypingConns++
		}
	}
	res.Rate, res.Speed, res.Keystrokes = 0, 0, ""
	switch r.opts.Mode {
	case ModeRate:
		res.Rate = r.opts.Rate
	case ModeReplay:
		res.Speed, res.Keystrokes = r.opts.Speed, r.opts.KeystrokesSource
	}
	err := r.run(ctx, res)
	res.Machine.LoadAfter = loadAvg()
	res.Machine.LoadgenCPU = (processCPU() - cpu0).Seconds()
	return res, err
}

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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
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

// Result is the outcome of a run; it marshals to the JSON of -json.
type Result struct {
	System          string   `json:"system"`
	Mode            string   `json:"mode"`
	URLs            []string `json:"urls"`
	Stack           string   `json:"stack,omitempty"`
	Conns           int      `json:"conns"`
	Connected       int64    `json:"connected"`
	TypingConns     int      `json:"typing_conns"`
	Rooms           int      `json:"rooms"`
	MembersPerRoom  float64  `json:"members_per_room"`
	Rate            float64  `json:"rate,omitempty"`
	Speed           float64  `json:"speed,omitempty"`
	Keystrokes      string   `json:"keystrokes,omitempty"`
	DurationSeconds float64  `json:"duration_s"`
	SettleSeconds   float64  `json:"settle_s"`
	ConnectSeconds  float64  `json:"connect_s"`
	RunID           string   `json:"run_id"`

	Sent struct {
		Starts    int64 `json:"starts"`
		Refreshes int64 `json:"refreshes"`
		Stops     int64 `json:"stops"`
	} `json:"sent"`
	// StateChangesPerSec is (starts + stops) / duration: the offered load.
	StateChangesPerSec float64 `json:"state_changes_per_s"`
	// FramesPerSec is every frame the clients read during the run (settle
	// included), per second of Duration.
	FramesPerSec float64 `json:"frames_per_s"`
	Delivered    struct {
		Frames          int64 `json:"frames"`
		ExpectedState   int64 `json:"expected_state"`
		MatchedState    int64 `json:"matched_state"`
		LostState       int64 `json:"lost_state"`
		ExpectedRefresh int64 `json:"expected_refresh"`
		MatchedRefresh  int64 `json:"matched_refresh"`
		Unmatched       int64 `json:"unmatched"`
		// Echoes are a sender's own events read back by the sender
		// (Centrifugo delivers publications to the publisher too):
		// neither expected, matched nor lost.
		Echoes int64 `json:"echoes"`
		// Replies are command replies read (Centrifugo answers every
		// publish); Pings the server pings answered.
		Replies         int64   `json:"replies,omitempty"`
		Pings           int64   `json:"pings,omitempty"`
		ExpiredStops    int64   `json:"expired_stops"`
		OtherStops      int64   `json:"other_stops"`
		SnapshotsPushed int64   `json:"snapshots_pushed"`
		EventsPerSecond float64 `json:"events_per_s"`
	} `json:"delivered"`
	// Latency: sender's write to receiver's read of state changes (a
	// typist appears or goes); Refresh: of refreshes.
	Latency Latency          `json:"latency"`
	Refresh Latency          `json:"refresh_latency"`
	Errors  map[string]int64 `json:"errors"`
	RSS     *RSS             `json:"rss,omitempty"`
	// ServerCPU is the CPU time of Options.CPUPIDs over the run.
	ServerCPU *ServerCPU `json:"server_cpu,omitempty"`
	Machine   Machine    `json:"machine"`
}

// ServerCPU is the CPU time (user + system) the system's server processes
// used from the end of connecting to the end of the settle, read from
// /proc/<pid>/stat (utime + stime, 10 ms ticks).
type ServerCPU struct {
	// PIDs and Seconds: each process and its CPU time, in the order of
	// Options.CPUPIDs.
	PIDs    []int     `json:"pids"`
	Names   []string  `json:"names"`
	Seconds []float64 `json:"cpu_s"`
	// TotalSeconds is their sum; per state change sent (starts + stops)
	// and per frame the clients read, in microseconds.
	TotalSeconds        float64 `json:"total_cpu_s"`
	WindowSeconds       float64 `json:"window_s"`
	CPUPerStateChangeUs float64 `json:"cpu_per_state_change_us"`
	CPUPerFrameUs       float64 `json:"cpu_per_frame_us"`
}

// RSS is the resident memory of the process Options.RSSPID.
type RSS struct {
	PID         int   `json:"pid"`
	BeforeBytes int64 `json:"before_bytes"`
	AfterBytes  int64 `json:"after_bytes"`
	PeakBytes   int64 `json:"peak_bytes"`
	// PerConnBytes is (after - before) / connected.
	PerConnBytes float64 `json:"per_conn_bytes"`
	// CPUSeconds is the process's CPU time (user + system) from the end
	// of connecting to the end of the settle; per state change sent and
	// per frame the clients read, in microseconds.
	CPUSeconds          float64 `json:"cpu_s"`
	CPUPerStateChangeUs float64 `json:"cpu_per_state_change_us,omitempty"`
	CPUPerFrameUs       float64 `json:"cpu_per_frame_us,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs        int     `json:"cpus"`
	GoVersion   string  `json:"go"`
	LoadBefore  string  `json:"loadavg_before"`
	LoadAfter   string  `json:"loadavg_after"`
	NoFileLimit uint64  `json:"nofile_limit"`
	LoadgenCPU  float64 `json:"loadgen_cpu_s"`
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
}

// Run executes one bounded run and returns its result. ctx ends it early
// (the result so far is returned with ctx's error).
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := fill(&opts); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, log: opts.Logger, st: newStats(), runID: opts.RunID, drv: newDriver(opts.System)}
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

func fill(o *Options) error {
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
	o.RunID = cmp.Or(o.RunID, "lg"+strconv.FormatUint(rand.Uint64()%(1<<40), 36))
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
	if o.Rate < 0 || o.Speed < 0 || o.Duration < 0 || o.Settle < 0 || o.DialTimeout < 0 || o.DialConcurrency < 0 {
		errs = append(errs, errors.New("rate, speed, duration, settle, dial timeout and dial concurrency must not be negative"))
	}
	if o.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %s: at most 24h", o.Duration))
	}
	if o.SourceIPs > 250 {
		errs = append(errs, fmt.Errorf("source IPs must be at most 250, got %d", o.SourceIPs))
	}
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
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// typingCount is how many connections type.
func (r *runner) typingCount() int {
	if r.opts.Mode == ModeIdle {
		return 0
	}
	return max(1, int(float64(r.opts.Conns)*r.opts.TypingShare))
}

// prepare reads the client timers, the keystroke messages and builds the
// clients (not connected yet).
func (r *runner) prepare(ctx context.Context) error {
	o := &r.opts
	// Centrifugo has no typing timers: the client side uses the protocol
	// defaults (refresh, idle stop), as an Ellipsis gateway with its
	// defaults would have them.
	var cc protocol.ClientConfig
	if o.System == SystemEllipsis {
		var err error
		if cc, err = fetchClientConfig(ctx, o.URLs[0], o.DialTimeout); err != nil {
			return err
		}
	}
	def := config.Default()
	r.timers = typist.Config{Refresh: cmp.Or(cc.Refresh(), def.TypingRefresh), IdleStop: cmp.Or(cc.IdleStop(), def.TypingIdleStop)}
	r.ttl = cmp.Or(cc.TTL(), def.TypingTTL)
	probe, err := typist.New(r.timers, r.ttl)
	if err != nil {
		return fmt.Errorf("loadgen: client timers from the gateway: %w", err)
	}
	r.timers = probe.Config()
	if cc.Auth == config.AuthJWT && o.JWTSecret == "" {
		return fmt.Errorf("loadgen: the gateway at %s runs with ELLIPSIS_AUTH=jwt: pass -jwt-secret (its ELLIPSIS_JWT_SECRET)", o.URLs[0])
	}

	if o.Mode == ModeReplay {
		sessions := o.Keystrokes
		if sessions == nil {
			if sessions, err = keystrokes.Sample(); err != nil {
				return err
			}
			if o.KeystrokesSource == "" {
				o.KeystrokesSource = "embedded sample"
			}
		}
		split := keystrokes.SplitOptions{MaxGap: r.timers.IdleStop, MaxKeys: replayMaxKeys, TextOnly: true}
		for _, s := range sessions {
			if m := s.Messages(split); len(m) > 0 {
				r.messages = append(r.messages, m)
			}
		}
		if len(r.messages) == 0 {
			return errors.New("loadgen: no keystroke session has a message to replay")
		}
	}

	r.loopback = map[string]bool{}
	for _, u := range o.URLs {
		p, _ := url.Parse(u)
		host := p.Hostname()
		ip := net.ParseIP(host)
		r.loopback[u] = host == "localhost" || (ip != nil && ip.IsLoopback() && ip.To4() != nil)
	}
	if o.SourceIPs > 0 {
		for i := 0; i < o.SourceIPs; i++ {
			r.sources = append(r.sources, &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))})
		}
	}

	r.clients = buildClients(r)
	r.byUser = make(map[string]*client, len(r.clients))
	for _, c := range r.clients {
		r.byUser[c.user] = c
	}
	return nil
}

// buildClients makes the run's clients (not connected): client i is user
// <run>-u<i> in room <run>-r<i % rooms>, on URL (i / rooms) % len(URLs).
//
// Typing clients are spread over the rooms and within each room: with a
// share below 1, every room gets its share of typists. Clients are ranked
// room by room (room, then member index) and every k-th of that order
// types, so with rooms of 5 and a share of 0.5 the rooms have 3 and 2
// typists in turn (ranking by connection index alone would put all
// typists in every other room when the room count is even).
func buildClients(r *runner) []*client {
	o := &r.opts
	typing := r.typingCount()
	clients := make([]*client, o.Conns)
	perRoom := (o.Conns + o.Rooms - 1) / o.Rooms
	for i := range clients {
		c := &client{
			idx:        i,
			user:       r.runID + "-u" + strconv.Itoa(i),
			roomIdx:    i % o.Rooms,
			url:        o.URLs[(i/o.Rooms)%len(o.URLs)],
			r:          r,
			views:      map[int32]*recvState{},
			readerDone: make(chan struct{}),
		}
		c.room = r.runID + "-r" + strconv.Itoa(c.roomIdx)
		rank := int64(c.roomIdx)*int64(perRoom) + int64(i/o.Rooms)
		c.typing = typing > 0 && (rank*int64(typing))%int64(o.Conns) < int64(typing)
		clients[i] = c
	}
	return clients
}

// typist returns the client of a user id, nil when it is not one of this
// run's.
func (r *runner) typist(user string) *client { return r.byUser[user] }

// sourceAddr is the local address for client i (nil: the kernel's choice).
func (r *runner) sourceAddr(i int) *net.TCPAddr {
	c := r.clients[i]
	if len(r.sources) == 0 || !r.loopback[c.url] {
		return nil
	}
	return r.sources[i%len(r.sources)]
}

// run connects every client, drives typing for Duration, settles, fills
// res, and closes everything.
func (r *runner) run(parent context.Context, res *Result) error {
	o := &r.opts
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	r.clock = newClock()

	var rssBefore int64
	if o.RSSPID > 0 {
		v, err := readRSS(o.RSSPID)
		if err != nil {
			return fmt.Errorf("loadgen: -rss-pid: %w", err)
		}
		rssBefore = v
		r.rssPeak.Store(v)
	}

	// Progress lines, from the first dial on.
	prog := newProgress(r, o.Progress)
	progDone := make(chan struct{})
	stopProg := make(chan struct{})
	go func() {
		defer close(progDone)
		prog.loop(stopProg)
	}()
	defer func() {
		select {
		case <-stopProg:
		default:
			close(stopProg)
		}
		<-progDone
	}()

	// Connect and join, DialConcurrency at a time.
	t0 := time.Now()
	prog.setPhase("connect")
	connected := r.connectAll(ctx)
	res.ConnectSeconds = time.Since(t0).Seconds()
	res.Connected = int64(len(connected))
	defer r.closeAll(connected)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(connected) == 0 {
		return fmt.Errorf("loadgen: no connection could be opened (errors: %v)", r.st.errors())
	}
	// Receivers per send: the room's other joined members.
	members := make([]int64, o.Rooms)
	for _, c := range connected {
		members[c.roomIdx]++
	}
	for _, c := range connected {
		c.others = members[c.roomIdx] - 1
	}
	res.MembersPerRoom = float64(len(connected)) / float64(o.Rooms)
	for _, c := range connected {
		go c.readLoop()
	}
	var cpuBefore time.Duration
	if o.RSSPID > 0 {
		cpuBefore, _ = readCPU(o.RSSPID)
	}
	srvBefore, err := readCPUs(o.CPUPIDs)
	if err != nil {
		return fmt.Errorf("loadgen: -cpu-pids: %w", err)
	}
	srvStart := time.Now()

	// Drive.
	prog.setPhase("run")
	start := time.Now()
	end := start.Add(o.Duration)
	prog.startRun(start)
	var wg sync.WaitGroup
	typers := 0
	for _, c := range connected {
		if c.typing {
			typers++
		}
	}
	k := 0
	for _, c := range connected {
		if !c.typing || o.Mode == ModeIdle {
			continue
		}
		wg.Add(1)
		switch o.Mode {
		case ModeRate:
			go func(c *client, k int) {
				defer wg.Done()
				r.driveRate(ctx, c, k, typers, start, end)
			}(c, k)
		case ModeReplay:
			rng := rand.New(rand.NewPCG(o.Seed, uint64(c.idx)))
			go func(c *client) {
				defer wg.Done()
				r.driveReplay(ctx, c, rng, start, end)
			}(c)
		}
		k++
	}
	if o.Mode == ModeIdle {
		var s sleeper
		s.until(ctx, end)
	}
	wg.Wait()
	prog.setPhase("settle")
	settled := r.settle(ctx)
	srvAfter, srvErr := readCPUs(o.CPUPIDs)
	srvWindow := time.Since(srvStart)
	if o.BeforeClose != nil {
		o.BeforeClose()
	}
	r.closing.Store(true)
	prog.setPhase("done")
	close(stopProg)
	<-progDone

	// Results.
	r.st.collect()
	c := &r.st.c
	res.DurationSeconds = o.Duration.Seconds()
	res.SettleSeconds = settled.Seconds()
	res.Sent.Starts, res.Sent.Refreshes, res.Sent.Stops = c.sentStart.Load(), c.sentRefresh.Load(), c.sentStop.Load()
	res.StateChangesPerSec = float64(res.Sent.Starts+res.Sent.Stops) / o.Duration.Seconds()
	d := &res.Delivered
	d.Frames = c.framesIn.Load()
	d.ExpectedState, d.MatchedState = c.expectState.Load(), c.matchedState.Load()
	d.LostState = d.ExpectedState - d.MatchedState
	d.ExpectedRefresh, d.MatchedRefresh = c.expectRefresh.Load(), c.matchedRefr.Load()
	d.Unmatched, d.ExpiredStops, d.OtherStops, d.SnapshotsPushed = c.unmatched.Load(), c.expiredStops.Load(), c.otherStops.Load(), c.snapshots.Load()
	d.Echoes, d.Replies, d.Pings = c.echoes.Load(), c.replies.Load(), c.pings.Load()
	res.FramesPerSec = float64(d.Frames) / o.Duration.Seconds()
	d.EventsPerSecond = float64(d.MatchedState+d.MatchedRefresh) / o.Duration.Seconds()
	r.st.mu.Lock()
	res.Latency = summarize(r.st.totalState)
	res.Refresh = summarize(r.st.totalRefr)
	r.st.mu.Unlock()
	res.Errors = r.st.errors()
	if d.Unmatched > 0 {
		res.Errors["unmatched_event"] = d.Unmatched
	}
	if d.LostState > 0 {
		res.Errors["missing_delivery"] = d.LostState // not read by the end of the settle
	}
	if len(o.CPUPIDs) > 0 {
		if srvErr != nil {
			return fmt.Errorf("loadgen: -cpu-pids (a server process ended during the run?): %w", srvErr)
		}
		sc := &ServerCPU{PIDs: o.CPUPIDs, WindowSeconds: srvWindow.Seconds()}
		var total time.Duration
		for i, pid := range o.CPUPIDs {
			dt := srvAfter[i] - srvBefore[i]
			total += dt
			sc.Names = append(sc.Names, processName(pid))
			sc.Seconds = append(sc.Seconds, dt.Seconds())
		}
		sc.TotalSeconds = total.Seconds()
		if n := res.Sent.Starts + res.Sent.Stops; n > 0 {
			sc.CPUPerStateChangeUs = float64(total.Microseconds()) / float64(n)
		}
		if d.Frames > 0 {
			sc.CPUPerFrameUs = float64(total.Microseconds()) / float64(d.Frames)
		}
		res.ServerCPU = sc
	}
	if o.RSSPID > 0 {
		cpuAfter, _ := readCPU(o.RSSPID)
		after, err := readRSS(o.RSSPID)
		if err != nil {
			return fmt.Errorf("loadgen: -rss-pid: %w", err)
		}
		res.RSS = &RSS{PID: o.RSSPID, BeforeBytes: rssBefore, AfterBytes: after, PeakBytes: max(r.rssPeak.Load(), after)}
		if res.Connected > 0 {
			res.RSS.PerConnBytes = float64(after-rssBefore) / float64(res.Connected)
		}
		cpu := cpuAfter - cpuBefore
		res.RSS.CPUSeconds = cpu.Seconds()
		if n := res.Sent.Starts + res.Sent.Stops; n > 0 {
			res.RSS.CPUPerStateChangeUs = float64(cpu.Microseconds()) / float64(n)
		}
		if d.Frames > 0 {
			res.RSS.CPUPerFrameUs = float64(cpu.Microseconds()) / float64(d.Frames)
		}
	}
	return parent.Err()
}

// settle keeps reading after the last send: at least Settle, then until
// every expected delivery arrived or nothing was read for settleQuiet, and
// at most SettleMax. It returns how long it waited.
func (r *runner) settle(ctx context.Context) time.Duration {
	const settleQuiet, poll = 500 * time.Millisecond, 50 * time.Millisecond
	o := &r.opts
	c := &r.st.c
	start := time.Now()
	minEnd, maxEnd := start.Add(o.Settle), start.Add(max(o.Settle, o.SettleMax))
	last, lastChange := c.framesIn.Load(), start
	var s sleeper
	for s.until(ctx, time.Now().Add(poll)) {
		now := time.Now()
		if f := c.framesIn.Load(); f != last {
			last, lastChange = f, now
		}
		if !now.Before(maxEnd) {
			break
		}
		if now.Before(minEnd) {
			continue
		}
		complete := c.matchedState.Load() >= c.expectState.Load() && c.matchedRefr.Load() >= c.expectRefresh.Load()
		if complete || now.Sub(lastChange) >= settleQuiet {
			break
		}
	}
	return time.Since(start)
}

// connectAll dials and joins every client, DialConcurrency at a time,
// and returns those that joined (in index order).
func (r *runner) connectAll(ctx context.Context) []*client {
	o := &r.opts
	jobs := make(chan *client) // unbuffered: a dialer takes the next client when free
	var wg sync.WaitGroup
	ok := make([]bool, len(r.clients))
	for w := 0; w < min(o.DialConcurrency, len(r.clients)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				if err := c.dial(ctx); err != nil {
					var ke *kindError
					if errors.As(err, &ke) {
						r.st.fail(ke.kind)
					} else {
						r.st.fail("dial:other")
					}
					r.log.Debug("connection failed", zap.String("user", c.user), zap.Error(err))
					continue
				}
				ok[c.idx] = true
				r.st.c.connected.Add(1)
				r.st.c.open.Add(1)
			}
		}()
	}
feed:
	for _, c := range r.clients {
		select {
		case jobs <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	var out []*client
	for i, c := range r.clients {
		if ok[i] {
			out = append(out, c)
		}
	}
	return out
}

// closeAll stops the bursts still on, closes every connection (normal
// closure) and waits for the readers, bounded.
func (r *runner) closeAll(cs []*client) {
	r.closing.Store(true)
	sem := make(chan struct{}, 256) // closes in flight; full: wait
	var wg sync.WaitGroup
	for _, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func(c *client) {
			defer func() { <-sem; wg.Done() }()
			c.endBurst()
			c.close()
		}(c)
	}
	wg.Wait()
	deadline := time.After(5 * time.Second)
	for _, c := range cs {
		select {
		case <-c.readerDone:
		case <-deadline:
			return
		}
	}
}

// fetchClientConfig reads the gateway's GET /v1/config; a gateway without
// it gives the zero ClientConfig (the protocol defaults).
func fetchClientConfig(ctx context.Context, wsURL string, timeout time.Duration) (protocol.ClientConfig, error) {
	var cc protocol.ClientConfig
	u, err := url.Parse(wsURL)
	if err != nil {
		return cc, fmt.Errorf("loadgen: %w", err)
	}
	if u.Scheme == "wss" {
		u.Scheme = "https"
	} else {
		u.Scheme = "http"
	}
	u.Path, u.RawQuery = "/v1/config", ""
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return cc, fmt.Errorf("loadgen: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cc, fmt.Errorf("loadgen: cannot reach the gateway at %s: %w (start one, e.g. `make run`, or pass -stack)", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return cc, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&cc); err != nil {
		return protocol.ClientConfig{}, fmt.Errorf("loadgen: GET %s: %w", u, err)
	}
	return cc, nil
}

// readCPUs reads the CPU time of every pid (see readCPU).
func readCPUs(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		v, err := readCPU(pid)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// processName is /proc/<pid>/comm ("" when unreadable).
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
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

// loadAvg returns /proc/loadavg's first three fields ("" when unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

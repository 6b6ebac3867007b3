// Package agent is a platform service that shows an activity while it
// works, e.g. an LLM agent that is "thinking" for the length of a
// generation (docs/protocol.md, "Typing commands" and "Threads and
// activities"). Asked to answer in a room, or in a thread of it, it
// publishes on <prefix>.typing.v1.cmd
//
//	{"v":1,"op":"start","room":"42","thread":"t-9","user":"assistant","name":"Assistant",
//	 "conn":"assistant-5f3c9a01:1","activity":"thinking","ttl_ms":30000,"seq":1,"ts_ms":1764480000000}
//
// with a conn of its own per answer and its own ttl_ms (a platform
// service's, up to the workers' ELLIPSIS_SERVICE_MAX_TTL), refreshes it
// while it works, and when its reply is posted sends the platform's
// "message posted" stop in the same scope,
//
//	{"v":1,"op":"stop","room":"42","thread":"t-9","user":"assistant"}
//
// which ends the indicator at once on every device. An answer given up
// (its context canceled: the process shuts down) ends with a stop of its
// own conn only.
//
// [Agent.Show] is the indicator; [Agent.Answer] the whole hook: show,
// think, post the reply, stop. The dev stack's chat assistant
// (examples/go/chat) and the command examples/go/cmd/agent are built on it.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Defaults of [Options].
const (
	// DefaultUser and DefaultName are the agent's user id and display name.
	DefaultUser = "assistant"
	DefaultName = "Assistant"
	// DefaultTTL is the ttl_ms of the agent's starts: half the workers'
	// default ELLIPSIS_SERVICE_MAX_TTL (60 s), so one refresh every
	// DefaultTTL/2 keeps the indicator up with room for a late refresh.
	DefaultTTL = 30 * time.Second
	// DefaultMaxTTL is the workers' default ELLIPSIS_SERVICE_MAX_TTL: a
	// worker refuses a start whose ttl_ms is above its setting (counted in
	// ellipsis_worker_invalid_payloads_total{field="ttl_ms"}, never shown),
	// so [New] refuses a TTL above Options.MaxTTL instead.
	DefaultMaxTTL = 60 * time.Second
	// DefaultTimeout bounds each NATS call (a publish and its flush).
	DefaultTimeout = 2 * time.Second
	// StopGuard is the workers' guard after a stop without conn: a start
	// sent within it after the user's last such stop in the scope is
	// dropped as superseded (docs/protocol.md, "Typing commands"). The
	// first refresh of a [Showing] comes after it, so an answer begun just
	// after another one's reply in the same scope shows all the same.
	StopGuard = 500 * time.Millisecond
)

// maxConnPrefixBytes leaves room in a conn id (protocol.MaxIDBytes) for
// ":" and the 20 digits of a uint64 counter.
const maxConnPrefixBytes = protocol.MaxIDBytes - 21

// Scope is where the agent answers: Room, and Thread of it ("" = the room
// itself). Both are ids: 1..256 bytes of UTF-8 without control characters.
type Scope struct {
	Room   string
	Thread string
}

// Validate returns a *protocol.FieldError naming "room" or "thread".
func (s Scope) Validate() error {
	if err := protocol.ValidateID("room", s.Room); err != nil {
		return err
	}
	if s.Thread != "" {
		return protocol.ValidateID("thread", s.Thread)
	}
	return nil
}

// String is "room R" or "thread T of room R", ids quoted.
func (s Scope) String() string {
	if s.Thread == "" {
		return fmt.Sprintf("room %q", s.Room)
	}
	return fmt.Sprintf("thread %q of room %q", s.Thread, s.Room)
}

// Options configures [New]; the zero value is the defaults above.
type Options struct {
	// Prefix is the deployment's ELLIPSIS_SUBJECT_PREFIX ("" = "ellipsis").
	Prefix string
	// User and Name are the agent's user id and display name ("" =
	// DefaultUser, DefaultName).
	User string
	Name string
	// Activity is what the indicator says the agent does ("" =
	// "thinking"); the workers accept the standard activities and
	// ELLIPSIS_ACTIVITIES.
	Activity string
	// TTL is the ttl_ms of each start (0 = DefaultTTL): 1 ms..MaxTTL,
	// whole ms. The agent refreshes every TTL/2.
	TTL time.Duration
	// MaxTTL is the deployment's ELLIPSIS_SERVICE_MAX_TTL (0 =
	// DefaultMaxTTL).
	MaxTTL time.Duration
	// Timeout bounds each NATS call when its context has no earlier
	// deadline (0 = DefaultTimeout).
	Timeout time.Duration
	// ConnPrefix starts the conn of each answer, "<ConnPrefix>:<n>" ("" =
	// "<User>-<8 random hex digits>", unique per Agent). It must not look
	// like a gateway's ("gw-...").
	ConnPrefix string
	// OnRefreshError, when set, hears a refresh that failed (the next one
	// is tried all the same; the indicator ends at its ttl if none gets
	// through).
	OnRefreshError func(Scope, error)
}

// Agent publishes an agent's typing commands. It is safe for concurrent
// use: each [Agent.Show] has its own conn.
type Agent struct {
	nc   *nats.Conn
	opts Options
	cmd  string // the command subject
	n    atomic.Uint64
}

// New returns an agent publishing through nc. Errors (a *protocol.FieldError
// naming the option's wire field): an invalid User, Name, Activity or
// ConnPrefix, or a TTL outside 1 ms..MaxTTL.
func New(nc *nats.Conn, opts Options) (*Agent, error) {
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Activity == "" {
		opts.Activity = protocol.ActivityThinking
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxTTL == 0 {
		opts.MaxTTL = DefaultMaxTTL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ConnPrefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		opts.ConnPrefix = opts.User + "-" + hex.EncodeToString(b[:])
	}
	if err := protocol.ValidateID("user", opts.User); err != nil {
		return nil, err
	}
	if err := protocol.ValidateName("name", opts.Name); err != nil {
		return nil, err
	}
	if err := protocol.ValidateActivity("activity", opts.Activity); err != nil {
		return nil, err
	}
	if err := protocol.ValidateID("conn", opts.ConnPrefix); err != nil {
		return nil, err
	}
	if len(opts.ConnPrefix) > maxConnPrefixBytes || strings.HasPrefix(opts.ConnPrefix, "gw-") {
		return nil, &protocol.FieldError{Field: "conn", Reason: fmt.Sprintf("prefix must be at most %d bytes (room for \":<n>\") and not start with \"gw-\" (a gateway's), got %q", maxConnPrefixBytes, opts.ConnPrefix)}
	}
	if opts.TTL < time.Millisecond || opts.TTL > opts.MaxTTL || opts.TTL%time.Millisecond != 0 {
		return nil, &protocol.FieldError{Field: "ttl_ms", Reason: fmt.Sprintf("must be whole ms in 1..%d (ELLIPSIS_SERVICE_MAX_TTL), got %s", opts.MaxTTL.Milliseconds(), opts.TTL)}
	}
	return &Agent{nc: nc, opts: opts, cmd: names.New("", opts.Prefix).CommandSubject()}, nil
}

// User is the agent's user id.
func (a *Agent) User() string { return a.opts.User }

// Name is the agent's display name.
func (a *Agent) Name() string { return a.opts.Name }

// TTL is the ttl of the agent's starts.
func (a *Agent) TTL() time.Duration { return a.opts.TTL }

// publish sends cmd and flushes it to the server, bounded by ctx and the
// agent's Timeout.
func (a *Agent) publish(ctx context.Context, cmd protocol.Command) error {
	if err := cmd.Validate(); err != nil {
		return err
	}
	payload, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	if err := a.nc.Publish(a.cmd, payload); err != nil {
		return fmt.Errorf("publish %s on %s: %w", cmd.Op, a.cmd, err)
	}
	if err := a.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("%s on %s: flush to the NATS server: %w", cmd.Op, a.cmd, err)
	}
	return nil
}

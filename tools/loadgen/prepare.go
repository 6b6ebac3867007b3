package loadgen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/tools/keystrokes"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

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
	if err := r.clientTimers(ctx); err != nil {
		return err
	}
	if r.opts.Mode == ModeReplay {
		if err := r.loadMessages(); err != nil {
			return err
		}
	}
	r.sourceAddrs()
	r.clients = buildClients(r)
	r.watchers = buildWatchers(r)
	r.byUser = make(map[string]*client, len(r.clients))
	for _, c := range r.clients {
		r.byUser[c.user] = c
	}
	return nil
}

// clientTimers sets the typist's timers and the ttl from the gateway's
// GET /v1/config, and refuses a JWT gateway without a secret to mint
// tokens with. Centrifugo has no typing timers: the client side uses the
// protocol defaults (refresh, idle stop), as an Ellipsis gateway with its
// defaults would have them.
func (r *runner) clientTimers(ctx context.Context) error {
	o := &r.opts
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
	return nil
}

// loadMessages cuts the replayed sessions (Options.Keystrokes, else the
// embedded sample) into messages.
func (r *runner) loadMessages() error {
	o := &r.opts
	sessions := o.Keystrokes
	if sessions == nil {
		var err error
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
	return nil
}

// sourceAddrs notes which targets are loopback and lists the loopback
// source addresses to spread their connections over (Options.SourceIPs).
func (r *runner) sourceAddrs() {
	o := &r.opts
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
		c.matchEvents = o.StateSample == 0 // else the sampled ones (assignCases)
		clients[i] = c
	}
	if o.StallShare > 0 {
		pickStalled(r, clients)
	}
	return clients
}

// typist returns the client of a user id, nil when it is not one of this
// run's.
func (r *runner) typist(user string) *client { return r.byUser[user] }

// sourceAddr is the local address for client c (nil: the kernel's choice).
func (r *runner) sourceAddr(c *client) *net.TCPAddr {
	if len(r.sources) == 0 || !r.loopback[c.url] {
		return nil
	}
	return r.sources[c.idx%len(r.sources)]
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

// pickStalled gives every client a view (the final-state check) and
// picks Options.StallShare of the listening ones, spread evenly, to
// stall; stalled ones are not matched (their events are conflated).
// Typists do not stall: one the gateway closed would have to type again
// after it reconnects to keep the room's state, which the case does not
// measure.
func pickStalled(r *runner, clients []*client) {
	listeners := 0
	for _, c := range clients {
		if !c.typing {
			listeners++
		}
	}
	j := 0
	for _, c := range clients {
		c.view, c.tracked, c.stateOut = newView(), []int{c.roomIdx}, r.state
		if c.typing {
			continue
		}
		c.stall = pickShare(j, listeners, r.opts.StallShare)
		c.matchEvents = !c.stall
		j++
	}
}

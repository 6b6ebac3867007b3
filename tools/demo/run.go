package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// member is one connected user during a run.
type member struct {
	u      User
	conn   *websocket.Conn
	tp     *typist.Typist
	events chan protocol.ServerFrame // reader -> watcher; 64 frames; full: the reader waits (the watcher only updates a map)
	res    UserResult
	// readerDone is closed when the reader goroutine has returned.
	readerDone chan struct{}
}

// run connects and joins everyone, then plays the scripts: per member a
// reader, a watcher and a driver. When the drivers are done it lets the
// last stops reach every view, closes the connections and counts.
func (r *runner) run(parent context.Context) (*Result, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	members, err := r.connectAll(ctx) // before the clock starts
	if err != nil {
		return nil, err
	}
	r.announce(members)
	t0 := time.Now()
	r.out.start(t0)
	p := &play{closing: make(chan struct{}), watchers: make(chan struct{}), cancel: cancel}
	r.startReaders(ctx, p, members)
	r.driveAll(ctx, p, members, t0)
	if ctx.Err() == nil {
		select {
		case <-time.After(r.opts.Settle):
		case <-ctx.Done():
		}
	}
	elapsed := time.Since(t0)
	r.closeAll(p, members)

	res := &Result{Room: r.opts.Room, Speed: r.opts.Speed, Elapsed: elapsed}
	for _, m := range members {
		m.res.Sent = m.tp.Stats()
		res.Users = append(res.Users, m.res)
	}
	if p.firstErr != nil {
		return res, p.firstErr
	}
	return res, parent.Err()
}

// play is the goroutines of a run and its first failure.
type play struct {
	closing  chan struct{} // closed when the demo closes the sockets on purpose
	watchers chan struct{} // closed to stop the watchers
	cancel   context.CancelFunc
	errOnce  sync.Once
	firstErr error
	readers  sync.WaitGroup
	watching sync.WaitGroup
}

// fail records the run's first error and ends the run.
func (p *play) fail(err error) {
	p.errOnce.Do(func() { p.firstErr = err; p.cancel() })
}

// connectAll dials and joins every user in turn; on a failure it closes
// those connected and returns the error.
func (r *runner) connectAll(ctx context.Context) ([]*member, error) {
	members := make([]*member, 0, len(r.opts.Users))
	for _, u := range r.opts.Users {
		m, err := r.connect(ctx, u)
		if err == nil {
			members = append(members, m)
			err = r.join(m)
		}
		if err != nil {
			for _, m := range members {
				m.conn.Close()
			}
			return nil, err
		}
	}
	return members, nil
}

// connect dials u and gives it its typist.
func (r *runner) connect(ctx context.Context, u User) (*member, error) {
	c, err := dialUser(ctx, r.ws, u, r.tokens[u.ID], r.opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 10)
	tp, err := typist.New(r.timers, r.ttl)
	if err != nil { // checked in prepare
		c.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	return &member{u: u, conn: c, tp: tp, events: make(chan protocol.ServerFrame, 64), readerDone: make(chan struct{}),
		res: UserResult{ID: u.ID, Name: u.Name}}, nil
}

// announce prints who joined where, with the client timing.
func (r *runner) announce(members []*member) {
	var names []string
	for _, m := range members {
		names = append(names, m.u.Name)
	}
	fmt.Fprintf(r.opts.Out, "%s joined room %q at %s and type (speed %g×, client timers: refresh %s, idle stop %s, ttl %s).\nEach line is what one of them sees, when it changes.\n\n",
		joinNames(names), r.opts.Room, r.ws.Redacted(), r.opts.Speed, r.timers.Refresh, r.timers.IdleStop, r.ttl)
}

// startReaders starts each member's watcher and reader.
func (r *runner) startReaders(ctx context.Context, p *play, members []*member) {
	for _, m := range members {
		p.watching.Add(1)
		go func() { defer p.watching.Done(); r.watch(m, p.watchers) }()
		p.readers.Add(1)
		go func() {
			defer p.readers.Done()
			defer close(m.readerDone)
			if err := r.read(ctx, m, p.closing); err != nil {
				p.fail(err)
			}
		}()
	}
}

// driveAll runs each member's driver on its script and waits for them.
func (r *runner) driveAll(ctx context.Context, p *play, members []*member, t0 time.Time) {
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.drive(ctx, m, t0, r.scripts[i]); err != nil && ctx.Err() == nil {
				p.fail(err)
			}
		}()
	}
	wg.Wait()
}

// closeAll closes every connection normally (waiting up to 2 s each for
// the gateway to answer the close), then stops the readers and watchers.
func (r *runner) closeAll(p *play, members []*member) {
	close(p.closing)
	for _, m := range members {
		_ = m.conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, "demo done"), time.Now().Add(time.Second))
	}
	for _, m := range members {
		select {
		case <-m.readerDone: // the gateway answered the close
		case <-time.After(2 * time.Second):
		}
		m.conn.Close()
	}
	p.readers.Wait()
	close(p.watchers)
	p.watching.Wait()
}

// join sends join and waits for joined (applying its snapshot), failing on
// an error frame or after DialTimeout.
func (r *runner) join(m *member) error {
	if err := r.send(m, map[string]string{"type": "join", "room": r.opts.Room, "id": "join"}); err != nil {
		return err
	}
	_ = m.conn.SetReadDeadline(time.Now().Add(r.opts.DialTimeout))
	defer m.conn.SetReadDeadline(time.Time{})
	for {
		_, data, err := m.conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("%s: no answer to join %q: %w", m.u.ID, r.opts.Room, err)
		}
		var ev protocol.ServerFrame
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("%s: unreadable frame from the gateway: %w", m.u.ID, err)
		}
		switch {
		case ev.Type == "joined" && ev.ID == "join":
			m.events <- ev // buffered and empty: the watcher applies it once started
			return nil
		case ev.Type == "error" && ev.ID == "join":
			return fmt.Errorf("%s: join %q refused: %s: %s", m.u.ID, r.opts.Room, ev.Code, ev.Message)
		}
	}
}

// send writes one JSON frame. Only the member's driver writes after join.
func (r *runner) send(m *member, v any) error {
	_ = m.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := m.conn.WriteJSON(v); err != nil {
		return fmt.Errorf("%s: send %v: %w", m.u.ID, v, err)
	}
	return nil
}

// read is the member's reader goroutine: frames go to the watcher, error
// frames are printed. It returns nil once the demo closes the socket on
// purpose, or an error when the connection drops before.
func (r *runner) read(ctx context.Context, m *member, closing <-chan struct{}) error {
	for {
		_, data, err := m.conn.ReadMessage()
		if err != nil {
			select {
			case <-closing:
				return nil
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: connection to the stack lost: %w", m.u.ID, err)
		}
		var ev protocol.ServerFrame
		if err := json.Unmarshal(data, &ev); err != nil {
			r.log.Debug("unreadable frame", zap.String("user_id", m.u.ID), zap.Error(err))
			continue
		}
		select {
		case m.events <- ev:
		case <-ctx.Done():
			return nil
		}
	}
}

// watch owns the member's view: it applies frames, expires entries locally
// and prints the line whenever it changes, until stop is closed.
func (r *runner) watch(m *member, stop <-chan struct{}) {
	v := newView(m.u.ID, r.opts.Room, r.ttl)
	last := Nobody
	tick := time.NewTicker(viewTick)
	defer tick.Stop()
	for {
		select {
		case ev := <-m.events:
			switch ev.Type {
			case "typing_start", "typing_stop", "typing":
				m.res.Received++
			case "error":
				m.res.Errors++
				r.out.errorFrame(m.u.ID, ev, time.Now())
			}
			v.apply(ev, time.Now())
		case now := <-tick.C:
			v.expire(now)
		case <-stop:
			return
		}
		if line := v.line(); line != last {
			last = line
			m.res.Lines++
			r.out.sees(m.u.ID, line, time.Now())
		}
	}
}

// drive is the member's driver goroutine: it plays the script, feeds the
// typist, sends its frames, ticks it at its deadlines (refreshes, idle
// stops), and at the end cancels a draft still being typed.
func (r *runner) drive(ctx context.Context, m *member, t0 time.Time, steps []step) error {
	for _, st := range steps {
		if err := r.waitUntil(ctx, m, t0.Add(st.at)); err != nil {
			return err
		}
		now := time.Now()
		var acts []typist.Action
		switch st.kind {
		case stepKey:
			acts = m.tp.Keystroke(now)
		case stepSend:
			acts = m.tp.MessageSent(now)
		}
		if err := r.act(m, acts, now); err != nil {
			return err
		}
	}
	if r.opts.Duration > 0 {
		if err := r.waitUntil(ctx, m, t0.Add(r.opts.Duration)); err != nil {
			return err
		}
	}
	now := time.Now()
	return r.act(m, m.tp.Cancel(now), now)
}

// waitUntil sleeps until at, sending the typist's refreshes and idle stop
// on the way when they fall due.
func (r *runner) waitUntil(ctx context.Context, m *member, at time.Time) error {
	for {
		next, due := at, false
		if d, ok := m.tp.Deadline(); ok && d.Before(at) {
			next, due = d, true
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		if !due {
			return nil
		}
		now := time.Now()
		if err := r.act(m, m.tp.Tick(now), now); err != nil {
			return err
		}
	}
}

func (r *runner) act(m *member, acts []typist.Action, now time.Time) error {
	for _, a := range acts {
		if err := r.send(m, map[string]string{"type": a.Frame(), "room": r.opts.Room}); err != nil {
			return err
		}
		if r.opts.Verbose {
			r.out.sent(m.u.ID, a, now)
		}
	}
	return nil
}

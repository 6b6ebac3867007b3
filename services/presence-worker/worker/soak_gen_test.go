package worker

import (
	"fmt"
	"slices"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// The soak's actions: what gateways and the platform send for churned
// connections of users with several devices. Every choice comes from the
// model's seeded source, never from the clock, so a seed replays the same
// actions (the clock only stamps ts_ms).

const (
	soakMaxConns     = 16 // open connections at once
	soakConnsPerUser = 3  // devices of one user at once
)

// next returns the commands of one step, stamped ts (unix ms), and
// whether they must leave in order (a toggle); otherwise each gets its
// own delay, and a step's commands of one connection (a pair, a start
// right before a disconnect) reach the workers in either order.
func (m *soakModel) next(ts int64) (cmds []protocol.Command, ordered bool) {
	w := m.rnd.IntN(100)
	if w < 8 || len(m.conns) == 0 {
		m.connect()
		return nil, false
	}
	c := m.conns[m.rnd.IntN(len(m.conns))]
	switch {
	case w < 40:
		return []protocol.Command{m.start(c, m.join(c), m.thread(), ts)}, false
	case w < 48:
		return m.pair(c, m.join(c), m.thread(), ts), false
	case w < 53:
		return m.toggle(c, m.join(c), m.thread(), ts), true
	}
	return m.other(c, w, ts), false
}

// other is one of the rarer actions of connection c (w as in next).
func (m *soakModel) other(c *soakConn, w int, ts int64) []protocol.Command {
	switch {
	case w < 66:
		if len(c.rooms) == 0 {
			return nil
		}
		return []protocol.Command{m.stop(c, c.rooms[m.rnd.IntN(len(c.rooms))], m.thread(), protocol.OpStop, ts)}
	case w < 71:
		if len(c.rooms) == 0 {
			return nil
		}
		r := c.rooms[m.rnd.IntN(len(c.rooms))]
		c.rooms = slices.DeleteFunc(c.rooms, func(x string) bool { return x == r })
		return []protocol.Command{m.stop(c, r, "", protocol.OpLeave, ts)}
	case w < 77:
		// The platform's stop (a message posted): no conn, no seq, no ts_ms.
		u := m.users[m.rnd.IntN(len(m.users))]
		return []protocol.Command{{V: 1, Op: protocol.OpStop, Room: m.rooms[m.rnd.IntN(len(m.rooms))], Thread: m.thread(), User: u}}
	case w < 83:
		return m.disconnect(c, ts)
	case w < 86:
		m.close(c) // vanished: no disconnect ever comes
	}
	return nil
}

// connect opens a connection for a random user, if there is room.
func (m *soakModel) connect() {
	if len(m.conns) >= soakMaxConns {
		return
	}
	u := m.users[m.rnd.IntN(len(m.users))]
	n := 0
	for _, c := range m.conns {
		if c.user == u {
			n++
		}
	}
	if n >= soakConnsPerUser {
		return
	}
	m.made++
	m.conns = append(m.conns, &soakConn{id: fmt.Sprintf("gw%d-soak:%d", m.made%3, m.made), user: u})
}

// join picks a room for c, joining it if need be (a join sends no command).
func (m *soakModel) join(c *soakConn) string {
	r := m.rooms[m.rnd.IntN(len(m.rooms))]
	if i, found := slices.BinarySearch(c.rooms, r); !found {
		c.rooms = slices.Insert(c.rooms, i, r)
	}
	return r
}

// thread picks the scope of a command: the room itself half the time,
// else one of its threads (soakThreads).
func (m *soakModel) thread() string {
	if m.rnd.IntN(2) == 0 {
		return ""
	}
	return soakThreads[1+m.rnd.IntN(len(soakThreads)-1)]
}

func (m *soakModel) start(c *soakConn, room, th string, ts int64) protocol.Command {
	c.seq++
	return protocol.Command{V: 1, Op: protocol.OpStart, Room: room, Thread: th, User: c.user, Name: "N" + c.user, Conn: c.id, Seq: c.seq, TsMs: ts}
}

func (m *soakModel) stop(c *soakConn, room, th, op string, ts int64) protocol.Command {
	c.seq++
	return protocol.Command{V: 1, Op: op, Room: room, Thread: th, User: c.user, Conn: c.id, Seq: c.seq, TsMs: ts}
}

// toggle is a user typing and stopping faster than the event rate limit:
// 5 to 9 commands, start first, alternating.
func (m *soakModel) toggle(c *soakConn, room, th string, ts int64) []protocol.Command {
	var out []protocol.Command
	for i := range 5 + m.rnd.IntN(5) {
		if i%2 == 0 {
			out = append(out, m.start(c, room, th, ts))
		} else {
			out = append(out, m.stop(c, room, th, protocol.OpStop, ts))
		}
	}
	return out
}

// pair is a start and a stop of c in room, in either order, sent at once
// (a keystroke and the message sent).
func (m *soakModel) pair(c *soakConn, room, th string, ts int64) []protocol.Command {
	if m.rnd.IntN(2) == 0 {
		a := m.start(c, room, th, ts)
		return []protocol.Command{a, m.stop(c, room, th, protocol.OpStop, ts)}
	}
	a := m.stop(c, room, th, protocol.OpStop, ts)
	return []protocol.Command{a, m.start(c, room, th, ts)}
}

// disconnect closes c as its gateway does: one disconnect of every room it
// joined (none when it joined none), half the time right after a start
// (typing while the connection closes).
func (m *soakModel) disconnect(c *soakConn, ts int64) []protocol.Command {
	m.close(c)
	if len(c.rooms) == 0 {
		return nil
	}
	var out []protocol.Command
	if m.rnd.IntN(2) == 0 {
		out = append(out, m.start(c, c.rooms[m.rnd.IntN(len(c.rooms))], m.thread(), ts))
	}
	c.seq++
	return append(out, protocol.Command{V: 1, Op: protocol.OpDisconnect, Rooms: slices.Clone(c.rooms), User: c.user, Conn: c.id, Seq: c.seq, TsMs: ts})
}

func (m *soakModel) close(c *soakConn) {
	m.conns = slices.DeleteFunc(m.conns, func(x *soakConn) bool { return x == c })
}

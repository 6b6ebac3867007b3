package demo

import (
	"strconv"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Nobody is the indicator line when nobody else is typing.
const Nobody = "(nobody)"

// Indicator renders the English "who is typing" line for names in the order
// given: "Alice is typing…", "Alice and Bob are typing…", "Alice, Bob and
// Carol are typing…", and beyond three "Alice, Bob and 2 others are
// typing…". No names gives [Nobody].
func Indicator(names []string) string {
	switch n := len(names); {
	case n == 0:
		return Nobody
	case n == 1:
		return names[0] + " is typing…"
	case n == 2:
		return names[0] + " and " + names[1] + " are typing…"
	case n == 3:
		return names[0] + ", " + names[1] + " and " + names[2] + " are typing…"
	default:
		return names[0] + ", " + names[1] + " and " + strconv.Itoa(n-2) + " others are typing…"
	}
}

type shown struct {
	user    string
	name    string
	expires time.Time
}

// view is what one user's screen shows: the other users typing in the
// room, in the order they started, each until its local expiry (ttl after
// the last start or refresh). One goroutine owns it.
type view struct {
	self string
	room string
	ttl  time.Duration // for snapshot entries and events without ttl_ms
	list []shown       // in order of appearance
}

func newView(self, room string, ttl time.Duration) *view {
	return &view{self: self, room: room, ttl: ttl}
}

func (v *view) find(user string) int {
	for i, s := range v.list {
		if s.user == user {
			return i
		}
	}
	return -1
}

func (v *view) upsert(user, name string, expires time.Time) {
	if user == "" || user == v.self { // self filter, defensively
		return
	}
	if i := v.find(user); i >= 0 {
		v.list[i].expires = expires
		if name != "" {
			v.list[i].name = name
		}
		return
	}
	v.list = append(v.list, shown{user: user, name: name, expires: expires})
}

func (v *view) remove(user string) {
	if i := v.find(user); i >= 0 {
		v.list = append(v.list[:i], v.list[i+1:]...)
	}
}

// replace sets the view to a snapshot, keeping the order of users already
// shown.
func (v *view) replace(users []protocol.Typist, now time.Time) {
	keep := map[string]protocol.Typist{}
	for _, u := range users {
		keep[u.User] = u
	}
	kept := v.list[:0]
	for _, s := range v.list {
		if u, ok := keep[s.user]; ok {
			s.expires = now.Add(v.ttl)
			if u.Name != "" {
				s.name = u.Name
			}
			kept = append(kept, s)
			delete(keep, s.user)
		}
	}
	v.list = kept
	for _, u := range users {
		if _, ok := keep[u.User]; ok {
			v.upsert(u.User, u.Name, now.Add(v.ttl))
		}
	}
}

// apply updates the view with a server frame received at now. Frames of
// other rooms are ignored.
func (v *view) apply(ev protocol.ServerFrame, now time.Time) {
	if ev.Room != "" && ev.Room != v.room {
		return
	}
	switch ev.Type {
	case "joined":
		v.replace(ev.Typing, now)
	case "typing":
		v.replace(ev.Users, now)
	case "typing_start":
		ttl := v.ttl
		if ev.TTLMs > 0 {
			ttl = time.Duration(ev.TTLMs) * time.Millisecond
			v.ttl = ttl
		}
		v.upsert(ev.User, ev.Name, now.Add(ttl))
	case "typing_stop":
		v.remove(ev.User)
	}
}

// expire drops the users whose local expiry has passed at now.
func (v *view) expire(now time.Time) {
	kept := v.list[:0]
	for _, s := range v.list {
		if now.Before(s.expires) {
			kept = append(kept, s)
		}
	}
	v.list = kept
}

// line is the indicator line of the view now.
func (v *view) line() string {
	names := make([]string, len(v.list))
	for i, s := range v.list {
		names[i] = s.name
		if names[i] == "" {
			names[i] = s.user
		}
	}
	return Indicator(names)
}

// label pads a user id for the timeline.
func label(id string, width int) string {
	if len(id) >= width {
		return id
	}
	return id + strings.Repeat(" ", width-len(id))
}

package pubsub

import "fmt"

// Confirmation of subscriptions.
//
// Redis answers a connection's commands in order, so the PONG of the PING
// token that follows a round of (S)SUBSCRIBEs comes after every reply to
// them: a subscribe reply per channel when a command was accepted, one
// error reply when it was refused (an ACL refuses the whole command when
// any of its channels is outside the user's channel patterns: "-NOPERM
// ... no permissions to access one of the channels"). At that PONG each
// channel of the round is therefore settled from what was read before it
// (judge):
//
//   - acknowledged (its subscribe reply was read): confirmed;
//   - not acknowledged, and an error reply was read in the round: refused
//     when its command carried it alone; when the command carried other
//     channels too, which one the server refused is unknown, so each is
//     sent again in a command of its own (solo) and settled by the next
//     round's PONG;
//   - not acknowledged and no error reply: sent again with the next
//     round (a routing reply, MOVED or CROSSSLOT, moved it meanwhile).

// sentSub is one channel's (S)SUBSCRIBE on the current connection.
type sentSub struct {
	seq     uint64 // the PING token that follows its command
	grouped bool   // its command carried other channels too
}

// batch is what the PONG of one PING token settles.
type batch struct {
	seq   uint64
	chans []*channel // unconfirmed channels of the link when it was sent
	probe string     // the link's probe channel sent in this round (refusal.go), or ""
}

// verdict is the outcome of one channel at the PONG of its round.
type verdict int

const (
	verdictConfirm verdict = iota // subscribed
	verdictRefuse                 // refused: its waiters fail, it is sent again on a later round
	verdictAlone                  // its group was refused: sent again alone at once
	verdictRetry                  // no reply either way: sent again on a later round
)

// judge settles one channel subscribed before a PONG: acked is whether its
// subscribe reply was read, grouped whether its command carried other
// channels, refusal the first error reply of the round ("" when none).
func judge(acked, grouped bool, refusal string) verdict {
	switch {
	case acked:
		return verdictConfirm
	case refusal == "":
		return verdictRetry
	case grouped:
		return verdictAlone
	default:
		return verdictRefuse
	}
}

// settled is what one PONG settled, for the caller to report outside
// r.mu.
type settled struct {
	confirmed []*channel
	refused   []string // channels refused (the probe included)
	reason    string   // the round's error reply
	// refusing / accepting: the link started refusing subscriptions, or
	// stopped (refusal.go), at this PONG.
	refusing, accepting bool
}

// settleLocked settles the channels and the probe of b at its PONG on l
// (see the package's confirmation rules above); r.mu is held.
func (r *Redis) settleLocked(l *link, b *batch) settled {
	st := settled{reason: l.batchErr}
	l.batchErr = ""
	kick := false
	for _, c := range b.chans {
		s, ok := l.sent[c.name]
		if c.link != l || c.confirmed || !ok || s.seq > b.seq {
			continue // moved, settled already, or sent after this token
		}
		switch judge(l.acked[c.name], s.grouped, st.reason) {
		case verdictConfirm:
			c.confirmLocked()
			st.confirmed = append(st.confirmed, c)
		case verdictAlone:
			c.solo = true
			delete(l.sent, c.name)
			kick = true
		case verdictRefuse:
			delete(l.sent, c.name)
			c.refuseLocked(fmt.Errorf("%w: %w: redis pubsub link %s: %s", ErrUnavailable, ErrRefused, l.name(), st.reason))
			st.refused = append(st.refused, c.name)
			r.met.RedisSubscribeRefused.Room.Inc()
		case verdictRetry:
			delete(l.sent, c.name)
		}
	}
	var accepted, probeRefused bool
	if b.probe != "" {
		var k bool
		accepted, probeRefused, k = l.settleProbeLocked(b.probe, st.reason)
		kick = kick || k
		if probeRefused {
			st.refused = append(st.refused, b.probe)
			r.met.RedisSubscribeRefused.Probe.Inc()
		}
	}
	l.noteLocked(l.check, &st, accepted, probeRefused)
	if st.accepting { // subscribe the refused channels still wanted
		for _, c := range l.chans {
			c.refused = false
		}
		kick = true
	}
	if kick {
		l.kickLocked()
	}
	return st
}

package pubsub

import (
	"cmp"
	"strings"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/names"
)

// Refused subscriptions.
//
// A room channel's (S)SUBSCRIBE refused by the server (an ACL without the
// room channels' pattern, "&chat:room:*" with the key prefix in front)
// fails the Subscribes waiting on it with [ErrRefused]; the channel is
// sent again when a later Subscribe or round asks, alone in its command so
// that it cannot fail other channels' (confirm.go). Each refusal counts in
// ellipsis_gateway_redis_subscribe_refused_total and is logged at most
// once a minute per channel (the limiter remembers ratelog.MaxKinds
// channels, then limits the rest together).
//
// Refusals persist when refusalsUnhealthy subscriptions in a row on a
// link were refused with none confirmed between, or when the link's probe
// was refused. The link then counts as down for [Redis.Health] (/readyz
// 503, redis_pubsub_links_down) while joins keep trying, and every health
// round (ELLIPSIS_PUBSUB_PING_INTERVAL) SUBSCRIBEs the probe, then
// UNSUBSCRIBEs it: the link's check channel ([RedisOptions.CheckChannel];
// slotCheck on Cluster), or else the last refused channel. The first confirmed subscription, probe or join, ends it. The
// probe also runs on the first round of every connection when
// CheckChannel is set, so that a gateway with a misconfigured ACL is
// never ready.

// slotCheck is the check channel of a Cluster master's link opened for
// channel: check + ":" + channel's hash tag ("{...}", or the whole name in
// braces when it has none), so that it hashes to channel's slot, which
// that master serves. "" when check is "" or the slots differ (a channel
// with braces but no tag). A MOVED reply to it (the slot moved on) is no
// refusal (confirm.go).
func slotCheck(check, channel string) string {
	if check == "" {
		return ""
	}
	tag := "{" + channel + "}"
	if i := strings.IndexByte(channel, '{'); i >= 0 {
		if j := strings.IndexByte(channel[i+1:], '}'); j > 0 {
			tag = channel[i : i+j+2]
		}
	}
	c := check + ":" + tag
	if names.Slot(c) != names.Slot(channel) {
		return ""
	}
	return c
}

// refusalsUnhealthy is how many subscriptions refused in a row, none
// confirmed between, make a link refusing: one refusal may be a room the
// ACL leaves out on purpose, three with none accepted is the ACL.
const refusalsUnhealthy = 3

// refusals is a link's refusal state; under Redis.mu. It outlives the
// link's connections (the ACL does), except probing.
type refusals struct {
	run      int    // subscriptions refused in a row, none confirmed between
	refusing string // non-empty while refusals persist: the server's error reply
	probe    string // the channel health rounds SUBSCRIBE while refusing
	probing  string // the probe sent on the current connection, not settled yet
}

// probeLocked returns the channel to probe in a writer round ("" for
// none): the probe on a connection's first round and on health rounds
// while refusing, the check channel on a first round otherwise. A channel
// assigned to the link is not probed: its own subscription tells. r.mu is
// held.
func (l *link) probeLocked(check string, first, liveness bool) string {
	var p string
	switch {
	case l.probing != "":
	case l.refusing != "" && (first || liveness):
		p = l.probe
	case first:
		p = check
	}
	if p == "" || l.chans[p] != nil {
		return ""
	}
	if _, sent := l.sent[p]; sent {
		return ""
	}
	return p
}

// settleProbeLocked settles the probe at its round's PONG: whether the
// server accepted or refused it (neither: no reply either way), and
// whether the writer must run again (to UNSUBSCRIBE an accepted probe, or
// to subscribe a refused one that a join wants meanwhile). r.mu is held.
func (l *link) settleProbeLocked(probe, reason string) (accepted, refused, kick bool) {
	l.probing = ""
	wanted := l.chans[probe] != nil
	if l.acked[probe] {
		return true, false, !wanted
	}
	delete(l.sent, probe) // a join of it meanwhile sends it again
	return false, reason != "", wanted
}

// noteLocked updates l's refusal state from one PONG's outcome: any
// confirmation (accepted: the probe's) ends refusing; refusals count
// towards refusalsUnhealthy, and a refused probe (probeRefused) makes the
// link refusing at once. r.mu is held.
func (l *link) noteLocked(check string, st *settled, accepted, probeRefused bool) {
	switch {
	case len(st.confirmed) > 0 || accepted:
		l.run = 0
		if l.refusing != "" {
			l.refusing, l.probe = "", ""
			st.accepting = true
		}
	case len(st.refused) > 0:
		l.run += len(st.refused)
		if l.refusing != "" {
			l.refusing = st.reason
		} else if l.run >= refusalsUnhealthy || probeRefused {
			l.refusing = st.reason
			l.probe = cmp.Or(check, st.refused[len(st.refused)-1])
			st.refusing = true
		}
	}
}

// reportSettled logs one PONG's refusals (rate-limited per channel) and
// the link's refusing transitions; r.mu is not held.
func (r *Redis) reportSettled(l *link, st settled) {
	for _, name := range st.refused {
		r.refusedLog.Warn("subscribe-refused\x00"+name, "redis refused a room channel subscription; its joins answer unavailable (logged at most once a minute per channel)",
			zap.String("link", l.name()), zap.String("channel", name), zap.String("reply", st.reason))
	}
	if st.refusing {
		r.refusedLog.Error("refusing\x00"+l.name(), "redis keeps refusing room channel subscriptions (check the gateway user's ACL channel patterns); /readyz reports the link down until one is accepted",
			zap.String("link", l.name()), zap.String("reply", st.reason))
	}
	if st.accepting {
		if ok, _ := r.refusedLog.Allow("accepting\x00" + l.name()); ok {
			r.log.Info("redis accepts room channel subscriptions again", zap.String("link", l.name()))
		}
	}
}

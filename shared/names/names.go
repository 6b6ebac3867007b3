// Package names builds every Redis key, Redis Pub/Sub channel and NATS subject
// that Ellipsis uses, in one place, from ids encoded with [Enc].
//
// The layout is the one in docs/protocol.md ("Redis" and "NATS"):
//
//	typing:user:{enc(room)}:enc(user)   hash, the user's state in the room (scripts/lib.lua)
//	typing:users:{enc(room)}            sorted set, enc(user) -> latest expiry (unix ms, Redis TIME)
//	typing:pending:{enc(room)}          sorted set, enc(user) -> when the sweeper settles a coalesced transition (unix ms)
//	typing:gone:{enc(room)}             sorted set, conn -> when a reader's tombstone ends (unix ms)
//	typing:goneseq:{enc(room)}          hash, conn -> the seq of a reader's tombstone
//	typing:gonetyped:{enc(room)}        sorted set, conn -> when a typist's tombstone ends (unix ms)
//	typing:gonetypedseq:{enc(room)}     hash, conn -> the seq of a typist's tombstone
//	typing:sweep:{s<k>}                 16 sorted sets (SweepBuckets), member enc(room), score = when the room is next due for an expiry sweep
//	typing:{enc(room)}:enc(user)        seed pattern 1 (store "keys"): one TTL key per typist
//	chat:room:{enc(room)}               Pub/Sub channel of normalized room events
//
// Every key and channel of a room carries the room in a hash tag, so with
// Redis Cluster a room's keys and channel share one hash slot. Keys and
// channels get the configured key prefix in front; subjects start with the
// configured subject prefix.
package names

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// needsEscape reports whether b must be percent-encoded by [Enc]: '%', ':',
// '{', '}', '*', '?', '[', ']', '\\', bytes below 0x21 (space and controls)
// and 0x7F (docs/protocol.md, "Redis").
func needsEscape(b byte) bool {
	switch b {
	case '%', ':', '{', '}', '*', '?', '[', ']', '\\', 0x7F:
		return true
	}
	return b < 0x21
}

const upperHex = "0123456789ABCDEF"

// Enc percent-encodes s for use inside a Redis name: the bytes listed in
// docs/protocol.md ("Redis") become %XX (upper-case hex), every other byte (UTF-8 included)
// is kept. The result contains no ':' (so it is a safe field separator), no
// '{' or '}' (so it never changes a hash tag) and no glob characters (so it
// never widens a SCAN MATCH pattern). Enc is injective: [Dec] inverts it.
func Enc(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// ErrBadEncoding is returned by [Dec] for a string that [Enc] cannot have
// produced.
var ErrBadEncoding = errors.New("names: not an enc() string")

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Dec inverts [Enc]. It accepts exactly the strings Enc produces: a '%' must be
// followed by two upper-case hex digits naming a byte that Enc escapes, and
// every byte that Enc escapes must appear escaped. Otherwise it returns an
// error wrapping [ErrBadEncoding].
func Dec(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		for i := 0; i < len(s); i++ {
			if needsEscape(s[i]) {
				return "", fmt.Errorf("%w: raw byte 0x%02X at %d", ErrBadEncoding, s[i], i)
			}
		}
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if needsEscape(c) {
				return "", fmt.Errorf("%w: raw byte 0x%02X at %d", ErrBadEncoding, c, i)
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: truncated escape at %d", ErrBadEncoding, i)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: bad escape at %d", ErrBadEncoding, i)
		}
		v := hi<<4 | lo
		if !needsEscape(v) {
			return "", fmt.Errorf("%w: needless escape %%%02X at %d", ErrBadEncoding, v, i)
		}
		b = append(b, v)
		i += 2
	}
	return string(b), nil
}

// Defaults for [Names].
const (
	// DefaultSubjectPrefix is the first token of every NATS subject.
	DefaultSubjectPrefix = "ellipsis"
	// QueueGroup is the NATS queue group of presence workers on the command
	// and snapshot subjects (docs/protocol.md, "NATS").
	QueueGroup = "presence-worker"
)

// Names builds keys, channels and subjects for one deployment. The zero
// value uses no key prefix and the subject prefix "" (invalid): use [New].
type Names struct {
	keyPrefix     string
	subjectPrefix string
}

// New returns the names for a key prefix (prepended verbatim to every Redis
// key and channel; may be empty) and a subject prefix (the first NATS subject
// token; empty means [DefaultSubjectPrefix]).
func New(keyPrefix, subjectPrefix string) Names {
	if subjectPrefix == "" {
		subjectPrefix = DefaultSubjectPrefix
	}
	return Names{keyPrefix: keyPrefix, subjectPrefix: subjectPrefix}
}

// KeyPrefix returns the prefix prepended to every Redis key and channel.
func (n Names) KeyPrefix() string { return n.keyPrefix }

// SubjectPrefix returns the first token of every NATS subject.
func (n Names) SubjectPrefix() string { return n.subjectPrefix }

// RoomTag returns "{enc(room)}", the hash tag shared by all of a room's keys.
func RoomTag(room string) string { return "{" + Enc(room) + "}" }

// UserKeyPrefix is "typing:user:{enc(room)}:", what precedes enc(user) in
// [Names.UserKey]; the sweep and snapshot scripts append enc(user)
// themselves.
func (n Names) UserKeyPrefix(room string) string {
	return n.keyPrefix + "typing:user:" + RoomTag(room) + ":"
}

// UserKey is the hash of user's state in room,
// "typing:user:{enc(room)}:enc(user)": its connections' expiries and seq
// records, display name, what receivers were last told, the refresh window
// and the event rate limit (scripts/lib.lua).
func (n Names) UserKey(room, user string) string { return n.UserKeyPrefix(room) + Enc(user) }

// UsersKey is the room's users sorted set, "typing:users:{enc(room)}":
// member enc(user), score = the user's latest expiry (unix ms).
func (n Names) UsersKey(room string) string { return n.roomKey("typing:users:", room) }

// PendingKey is the room's held transitions, "typing:pending:{enc(room)}":
// member enc(user), score = when the sweeper publishes the coalesced user's
// final state (unix ms).
func (n Names) PendingKey(room string) string { return n.roomKey("typing:pending:", room) }

// GoneKey is "typing:gone:{enc(room)}", when the room's readers'
// tombstones end (member conn, score unix ms): of connections that left it
// or disconnected without a record in their user hash (scripts/lib.lua,
// bury).
func (n Names) GoneKey(room string) string { return n.roomKey("typing:gone:", room) }

// GoneSeqKey is "typing:goneseq:{enc(room)}", the seq of each of the room's
// readers' tombstones (field conn).
func (n Names) GoneSeqKey(room string) string { return n.roomKey("typing:goneseq:", room) }

// GoneTypedKey is "typing:gonetyped:{enc(room)}", when the room's typists'
// tombstones end: of connections that had a record (a seq record or an
// entry) in their user hash when they left or disconnected.
func (n Names) GoneTypedKey(room string) string { return n.roomKey("typing:gonetyped:", room) }

// GoneTypedSeqKey is "typing:gonetypedseq:{enc(room)}", the seq of each of
// the room's typists' tombstones (field conn).
func (n Names) GoneTypedSeqKey(room string) string { return n.roomKey("typing:gonetypedseq:", room) }

// roomKey is the key prefix, kind and the room's hash tag.
func (n Names) roomKey(kind, room string) string { return n.keyPrefix + kind + RoomTag(room) }

// SweepBuckets is how many sorted sets the sweep index is split into. The
// index cannot be one key: on Redis Cluster a key lives on one shard, and
// the workers' scripts may touch keys of one hash slot only. Bucket b holds
// the rooms whose hash slot lies in the b-th sixteenth of the slot space,
// and its own key hashes into that same sixteenth, so with slots split
// evenly between masters (what redis-cli --cluster create does) a room's
// bucket usually lives on the room's own shard. 16 keeps the sweeper's
// per-tick reads small (16 ZRANGEBYSCOREs) while spreading the index over
// up to 16 shards.
const SweepBuckets = 16

// clusterSlots is the number of Redis Cluster hash slots (Redis Cluster
// specification, "Key distribution model").
const clusterSlots = 16384

// sweepTags are the hash tags of the sweep buckets: sweepTags[b] is the
// first "s<k>" (k = 0, 1, ...) whose slot is in [b*1024, (b+1)*1024). It is
// computed once and never written after.
var sweepTags = func() [SweepBuckets]string {
	var tags [SweepBuckets]string
	found := 0
	for k := 0; found < SweepBuckets; k++ {
		tag := "s" + strconv.Itoa(k)
		b := Slot(tag) * SweepBuckets / clusterSlots
		if tags[b] == "" {
			tags[b] = tag
			found++
		}
	}
	return tags
}()

// Slot is the Redis Cluster hash slot of key, 0..16383: CRC16 (XMODEM) of
// the key's hash tag (the bytes between the first '{' and the next '}',
// when not empty) or of the whole key, mod 16384 (Redis Cluster
// specification, "Hash tags").
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}

// SweepBucket is the sweep bucket of room, 0..SweepBuckets-1: the sixteenth
// of the slot space its keys hash into.
func SweepBucket(room string) int {
	return Slot(RoomTag(room)) * SweepBuckets / clusterSlots
}

// SweepKey is sweep bucket b of the index, "typing:sweep:{s<k>}" (see
// SweepBuckets): member enc(room), score = unix ms at which the room may
// next hold an expired entry, or a sweeper's claim (10^13 + the claim's
// end, above every due time) while a worker sweeps it. b must be in 0..SweepBuckets-1.
func (n Names) SweepKey(b int) string { return n.keyPrefix + "typing:sweep:{" + sweepTags[b] + "}" }

// SweepKeys is every sweep bucket key, index b = bucket b.
func (n Names) SweepKeys() []string {
	keys := make([]string, SweepBuckets)
	for b := range keys {
		keys[b] = n.SweepKey(b)
	}
	return keys
}

// TypistKey is seed pattern 1's key for one typist:
// "typing:{enc(room)}:enc(user)".
func (n Names) TypistKey(room, user string) string {
	return n.keyPrefix + "typing:" + RoomTag(room) + ":" + Enc(user)
}

// TypistPattern is the SCAN MATCH pattern for seed pattern 1's keys of room:
// "typing:{enc(room)}:*". Because enc() escapes glob characters, the pattern
// matches that room's keys and no other's. The key prefix is glob-escaped.
func (n Names) TypistPattern(room string) string {
	return globEscape(n.keyPrefix) + "typing:" + RoomTag(room) + ":*"
}

func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RoomChannel is the room's Pub/Sub channel: "chat:room:{enc(room)}".
func (n Names) RoomChannel(room string) string { return n.roomKey("chat:room:", room) }

// RoomFromChannel inverts [Names.RoomChannel]; ok is false for any other
// string.
func (n Names) RoomFromChannel(channel string) (room string, ok bool) {
	p := n.keyPrefix + "chat:room:{"
	if !strings.HasPrefix(channel, p) || !strings.HasSuffix(channel, "}") {
		return "", false
	}
	r, err := Dec(channel[len(p) : len(channel)-1])
	if err != nil {
		return "", false
	}
	return r, true
}

// CommandSubject is where typing commands go: "<prefix>.typing.v1.cmd".
func (n Names) CommandSubject() string { return n.subjectPrefix + ".typing.v1.cmd" }

// SnapshotSubject answers "who is typing": "<prefix>.typing.v1.snapshot".
func (n Names) SnapshotSubject() string { return n.subjectPrefix + ".typing.v1.snapshot" }

// AuthzJoinSubject is the optional join authorisation hook:
// "<prefix>.authz.v1.join".
func (n Names) AuthzJoinSubject() string { return n.subjectPrefix + ".authz.v1.join" }

// RoomToken is room as one NATS subject token: every byte outside
// [A-Za-z0-9_-] becomes %XX (upper-case hex), UTF-8 included, so the token
// holds no '.', '*', '>' or white space, and is printable ASCII
// (docs/protocol.md, "NATS room events"). It is injective ([RoomFromToken]
// inverts it) and empty only for the empty room, which is no valid room id.
func RoomToken(room string) string {
	n := 0
	for i := 0; i < len(room); i++ {
		if !tokenSafe(room[i]) {
			n++
		}
	}
	if n == 0 {
		return room
	}
	b := make([]byte, 0, len(room)+2*n)
	for i := 0; i < len(room); i++ {
		c := room[i]
		if tokenSafe(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', upperHex[c>>4], upperHex[c&15])
	}
	return string(b)
}

// tokenSafe reports whether b stays as is in a [RoomToken]: [A-Za-z0-9_-].
func tokenSafe(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// RoomFromToken inverts [RoomToken]. It accepts exactly the tokens RoomToken
// produces (a '%' followed by two upper-case hex digits naming a byte
// outside [A-Za-z0-9_-]; no other byte outside that set) and otherwise
// returns an error wrapping [ErrBadEncoding].
func RoomFromToken(token string) (string, error) {
	b := make([]byte, 0, len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != '%' {
			if !tokenSafe(c) {
				return "", fmt.Errorf("%w: raw byte 0x%02X at %d of a room token", ErrBadEncoding, c, i)
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("%w: truncated escape at %d of a room token", ErrBadEncoding, i)
		}
		hi, ok1 := unhex(token[i+1])
		lo, ok2 := unhex(token[i+2])
		if !ok1 || !ok2 || tokenSafe(hi<<4|lo) {
			return "", fmt.Errorf("%w: bad escape at %d of a room token", ErrBadEncoding, i)
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

// RoomEventSubject is where the worker also publishes room's events when
// ELLIPSIS_NATS_EVENTS is on: "<prefix>.typing.v1.room.<RoomToken(room)>".
func (n Names) RoomEventSubject(room string) string {
	return n.RoomEventSubjectPrefix() + RoomToken(room)
}

// RoomEventSubjectPrefix is "<prefix>.typing.v1.room.", what precedes the
// room token in [Names.RoomEventSubject].
func (n Names) RoomEventSubjectPrefix() string { return n.subjectPrefix + ".typing.v1.room." }

// RoomEventsWildcard subscribes to the events of every room:
// "<prefix>.typing.v1.room.>".
func (n Names) RoomEventsWildcard() string { return n.RoomEventSubjectPrefix() + ">" }

// RoomFromEventSubject inverts [Names.RoomEventSubject]; ok is false for any
// other subject.
func (n Names) RoomFromEventSubject(subject string) (room string, ok bool) {
	tok, found := strings.CutPrefix(subject, n.RoomEventSubjectPrefix())
	if !found || tok == "" {
		return "", false
	}
	r, err := RoomFromToken(tok)
	if err != nil {
		return "", false
	}
	return r, true
}

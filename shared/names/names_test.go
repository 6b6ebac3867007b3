package names

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// contractIDs are docs/protocol.md's example ids ("Terms and ids"): every one must work.
var contractIDs = []string{"42", "room:42", "!abc:matrix.org", "a*b?c[d]", "{x}", "café ☕", "a b", `back\slash`, "100%", "\x7f"}

func TestEncEscapesExactlyTheContractBytes(t *testing.T) {
	for b := 0; b < 256; b++ {
		s := string([]byte{byte(b)})
		got := Enc(s)
		want := s
		if strings.IndexByte(`%:{}*?[]\`, byte(b)) >= 0 || b < 0x21 || b == 0x7F {
			want = "%" + strings.ToUpper(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15]))
		}
		if got != want {
			t.Errorf("Enc(0x%02X) = %q, want %q", b, got, want)
		}
	}
}

func TestEncExamples(t *testing.T) {
	cases := map[string]string{
		"42":              "42",
		"room:42":         "room%3A42",
		"!abc:matrix.org": "!abc%3Amatrix.org",
		"a*b?c[d]":        "a%2Ab%3Fc%5Bd%5D",
		"{x}":             "%7Bx%7D",
		"café ☕":          "café%20☕",
		"a b":             "a%20b",
		"50%":             "50%25",
	}
	for in, want := range cases {
		if got := Enc(in); got != want {
			t.Errorf("Enc(%q) = %q, want %q", in, got, want)
		}
		back, err := Dec(want)
		if err != nil || back != in {
			t.Errorf("Dec(%q) = %q, %v; want %q", want, back, err, in)
		}
	}
}

func TestDecRejectsWhatEncNeverProduces(t *testing.T) {
	for _, s := range []string{"%", "%4", "%zz", "%4a", "%41", "a:b", "{x}", "a b", "*"} {
		if _, err := Dec(s); !errors.Is(err, ErrBadEncoding) {
			t.Errorf("Dec(%q) err = %v, want ErrBadEncoding", s, err)
		}
	}
}

func TestRoomNamesAreDistinctAndHashTagged(t *testing.T) {
	n := New("p:", "")
	owner := map[string]string{} // name -> the (room, user) or room it belongs to
	claim := func(name, who, room string) {
		t.Helper()
		if prev, dup := owner[name]; dup && prev != who {
			t.Fatalf("name %q shared by %q and %q", name, prev, who)
		}
		owner[name] = who
		// The hash tag is the first {...} and it is exactly enc(room).
		open, end := strings.IndexByte(name, '{'), strings.IndexByte(name, '}')
		if open < 0 || end < open || name[open+1:end] != Enc(room) {
			t.Fatalf("name %q: hash tag is not {enc(%q)}", name, room)
		}
	}
	for _, room := range contractIDs {
		for _, name := range roomNames(n, room) {
			claim(name, "room "+room, room)
		}
		for _, user := range contractIDs {
			pair := "pair " + room + "\x00" + user
			claim(n.UserKey(room, user), pair, room)
			claim(n.TypistKey(room, user), pair, room)
		}
	}
	if n.UserKey("a:b", "c") == n.UserKey("a", "b:c") {
		t.Fatal("user keys collide across the room/user boundary")
	}
}

// roomNames are every key and the channel of room, one per kind.
func roomNames(n Names, room string) []string {
	return []string{n.UsersKey(room), n.PendingKey(room), n.GoneKey(room), n.GoneSeqKey(room),
		n.GoneTypedKey(room), n.GoneTypedSeqKey(room), n.RoomChannel(room)}
}

func TestRoomNamesMatchTheContract(t *testing.T) {
	n := New("p:", "")
	want := []string{"p:typing:users:{room%3A42}", "p:typing:pending:{room%3A42}", "p:typing:gone:{room%3A42}",
		"p:typing:goneseq:{room%3A42}", "p:typing:gonetyped:{room%3A42}", "p:typing:gonetypedseq:{room%3A42}",
		"p:chat:room:{room%3A42}"}
	if got := roomNames(n, "room:42"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("room names %q, want %q (docs/protocol.md, \"Redis\")", got, want)
	}
	if got := n.UserKey("room:42", "a b"); got != "p:typing:user:{room%3A42}:a%20b" {
		t.Errorf("UserKey = %q", got)
	}
	if got := n.TypistKey("room:42", "a b"); got != "p:typing:{room%3A42}:a%20b" {
		t.Errorf("TypistKey = %q", got)
	}
}

func TestRoomFromChannel(t *testing.T) {
	n := New("pre*fix:", "x")
	for _, room := range contractIDs {
		got, ok := n.RoomFromChannel(n.RoomChannel(room))
		if !ok || got != room {
			t.Errorf("RoomFromChannel(RoomChannel(%q)) = %q, %v", room, got, ok)
		}
	}
	for _, ch := range []string{"chat:room:{x}", "pre*fix:chat:room:x", "pre*fix:chat:room:{a b}"} {
		if _, ok := n.RoomFromChannel(ch); ok {
			t.Errorf("RoomFromChannel(%q) accepted", ch)
		}
	}
}

func TestTypistPatternMatchesOnlyItsRoom(t *testing.T) {
	n := New("k*", "")
	p := n.TypistPattern("a*")
	if !strings.HasPrefix(p, `k\*typing:{a%2A}:`) {
		t.Fatalf("pattern %q does not escape the prefix or the room", p)
	}
}

func TestSubjects(t *testing.T) {
	n := New("", "")
	if n.CommandSubject() != "ellipsis.typing.v1.cmd" || n.SnapshotSubject() != "ellipsis.typing.v1.snapshot" || n.AuthzJoinSubject() != "ellipsis.authz.v1.join" {
		t.Fatal("default subjects differ from docs/protocol.md")
	}
	if New("", "t1").CommandSubject() != "t1.typing.v1.cmd" {
		t.Fatal("subject prefix not applied")
	}
}

// FuzzEnc checks that Dec inverts Enc, that the output holds no byte Enc must
// escape (so it is a safe field, glob-safe and never changes a hash tag), and
// that Enc is injective (via the round trip).
func FuzzEnc(f *testing.F) {
	for _, s := range contractIDs {
		f.Add(s)
	}
	f.Add("%25")
	f.Add("\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		e := Enc(s)
		for i := 0; i < len(e); i++ {
			if e[i] != '%' && needsEscape(e[i]) {
				t.Fatalf("Enc(%q) = %q holds raw byte 0x%02X", s, e, e[i])
			}
		}
		d, err := Dec(e)
		if err != nil || d != s {
			t.Fatalf("Dec(Enc(%q)) = %q, %v", s, d, err)
		}
		if utf8.ValidString(s) && !utf8.ValidString(e) {
			t.Fatalf("Enc(%q) = %q broke UTF-8", s, e)
		}
		// Any string Dec accepts re-encodes to itself (canonical form).
		if d2, err := Dec(s); err == nil && Enc(d2) != s {
			t.Fatalf("Enc(Dec(%q)) = %q", s, Enc(d2))
		}
	})
}

// hashTag is what Redis Cluster hashes for a key: the bytes between the
// first '{' and the first '}' after it, when that is not empty; else the
// whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// FuzzNames checks, for any two (room, user) pairs, that every key, the
// channel of a pair hash on exactly enc(room) (so a room's
// names share one slot and ids cannot move them), that different pairs
// never share a name, and that seed pattern 1's SCAN pattern for a room is
// a literal prefix plus one trailing '*': it matches the keys of that room
// only, whatever glob characters the ids hold.
func FuzzNames(f *testing.F) {
	f.Add("{x}", "u", "x", "u")
	f.Add("a*b?c[d]", "alice", "aXbYcd", "alice")
	f.Add("a", "b:c", "a:b", "c")
	f.Add("room", "}", "room}", "")
	f.Add("%7B", "x", "{", "x")
	f.Fuzz(func(t *testing.T, r1, u1, r2, u2 string) {
		if r1 == "" || r2 == "" {
			return // not a valid room id (an empty tag "{}" is no tag)
		}
		n := New("pre*fix[:", "")
		keys := func(r, u string) []string {
			return append(roomNames(n, r), n.UserKey(r, u), n.TypistKey(r, u))
		}
		k1, k2 := keys(r1, u1), keys(r2, u2)
		for i := range k1 {
			// The key prefix holds no brace (config.Validate refuses them).
			if tag := hashTag(k1[i]); tag != Enc(r1) {
				t.Fatalf("%q hashes on %q, want enc(room) %q", k1[i], tag, Enc(r1))
			}
			same := r1 == r2 && (u1 == u2 || i < len(k1)-2) // the last two are the pair's
			if (k1[i] == k2[i]) != same {
				t.Fatalf("names %q and %q for (%q,%q) and (%q,%q)", k1[i], k2[i], r1, u1, r2, u2)
			}
		}
		p := n.TypistPattern(r1)
		lit, ok := strings.CutSuffix(p, "*")
		if !ok {
			t.Fatalf("pattern %q does not end in *", p)
		}
		// Unescape the prefix; what follows it holds no glob character.
		rest, ok := strings.CutPrefix(lit, globEscape(n.KeyPrefix()))
		if !ok || strings.ContainsAny(rest, `*?[]\`) {
			t.Fatalf("pattern %q is not a literal prefix plus *", p)
		}
		key2 := n.TypistKey(r2, u2)
		if strings.HasPrefix(key2, n.KeyPrefix()+rest) != (r1 == r2) {
			t.Fatalf("pattern %q and key %q (rooms %q, %q)", p, key2, r1, r2)
		}
	})
}

func TestSlotMatchesRedisClusterSpec(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"123456789":            12739, // the spec's CRC16 check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": Slot("user1000"),
		"foo{}{bar}":           Slot("foo{}{bar}"),
		"":                     0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("{user1000}.following") != Slot("{user1000}.followers") {
		t.Error("hash tags ignored")
	}
}

func TestSweepBucketsCoLocateWithRooms(t *testing.T) {
	n := New("p:", "")
	seen := map[string]bool{}
	for b := 0; b < SweepBuckets; b++ {
		k := n.SweepKey(b)
		if seen[k] {
			t.Fatalf("bucket key %s twice", k)
		}
		seen[k] = true
		if got := Slot(k) * SweepBuckets / clusterSlots; got != b {
			t.Fatalf("bucket %d key %s hashes into sixteenth %d", b, k, got)
		}
	}
	for _, room := range []string{"a", "room:42", "general", "x{y}z"} {
		b := SweepBucket(room)
		if lo, hi := b*clusterSlots/SweepBuckets, (b+1)*clusterSlots/SweepBuckets; Slot(n.UsersKey(room)) < lo || Slot(n.UsersKey(room)) >= hi {
			t.Fatalf("room %q in bucket %d outside its slot range", room, b)
		}
	}
}

func TestRoomEventSubject(t *testing.T) {
	n := New("", "")
	for room, want := range map[string]string{
		"42":         "ellipsis.typing.v1.room.42",
		"team-7_a":   "ellipsis.typing.v1.room.team-7_a",
		"a.b":        "ellipsis.typing.v1.room.a%2Eb",
		"*":          "ellipsis.typing.v1.room.%2A",
		">":          "ellipsis.typing.v1.room.%3E",
		"a b":        "ellipsis.typing.v1.room.a%20b",
		"100%":       "ellipsis.typing.v1.room.100%25",
		"café":       "ellipsis.typing.v1.room.caf%C3%A9",
		"team/7:{x}": "ellipsis.typing.v1.room.team%2F7%3A%7Bx%7D",
	} {
		if got := n.RoomEventSubject(room); got != want {
			t.Errorf("RoomEventSubject(%q) = %q, want %q", room, got, want)
		}
		if r, ok := n.RoomFromEventSubject(want); !ok || r != room {
			t.Errorf("RoomFromEventSubject(%q) = %q, %v", want, r, ok)
		}
	}
	if got := New("", "t1").RoomEventsWildcard(); got != "t1.typing.v1.room.>" {
		t.Errorf("RoomEventsWildcard = %q", got)
	}
	for _, bad := range []string{"ellipsis.typing.v1.room.", "ellipsis.typing.v1.room.a.b", "ellipsis.typing.v1.room.%41", "ellipsis.typing.v1.room.%2e", "ellipsis.typing.v1.room.%2", "ellipsis.typing.v1.cmd", "x.typing.v1.room.a"} {
		if r, ok := n.RoomFromEventSubject(bad); ok {
			t.Errorf("RoomFromEventSubject(%q) = %q, accepted", bad, r)
		}
	}
}

// FuzzRoomToken checks that a room token is one NATS subject token of the
// contract's bytes only ([A-Za-z0-9_%-]: no '.', '*', '>' or white space),
// that RoomFromToken inverts it (so distinct rooms never share a subject),
// that bytes already safe are kept, and that any token RoomFromToken
// accepts re-encodes to itself (one subject per room).
func FuzzRoomToken(f *testing.F) {
	for _, s := range contractIDs {
		f.Add(s)
	}
	f.Add("a.b*c>d e%f")
	f.Add("%2E")
	f.Add("\x00\xff\xc3\xa9")
	f.Fuzz(func(t *testing.T, s string) {
		tok := RoomToken(s)
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c != '%' && !tokenSafe(c) {
				t.Fatalf("RoomToken(%q) = %q holds 0x%02X", s, tok, c)
			}
		}
		if (tok == "") != (s == "") {
			t.Fatalf("RoomToken(%q) = %q", s, tok)
		}
		if d, err := RoomFromToken(tok); err != nil || d != s {
			t.Fatalf("RoomFromToken(RoomToken(%q)) = %q, %v", s, d, err)
		}
		safe := strings.Count(tok, "%") == 0
		for i := 0; i < len(s); i++ {
			safe = safe && tokenSafe(s[i])
		}
		if safe != (tok == s) && s != "" {
			t.Fatalf("RoomToken(%q) = %q: safe bytes must be kept, others escaped", s, tok)
		}
		if d, err := RoomFromToken(s); err == nil && RoomToken(d) != s {
			t.Fatalf("RoomToken(RoomFromToken(%q)) = %q", s, RoomToken(d))
		}
		n := New("", "p")
		subj := n.RoomEventSubject(s)
		if s != "" && strings.Count(subj, ".") != 4 {
			t.Fatalf("RoomEventSubject(%q) = %q is not 5 tokens", s, subj)
		}
		if r, ok := n.RoomFromEventSubject(subj); s != "" && (!ok || r != s) {
			t.Fatalf("RoomFromEventSubject(%q) = %q, %v", subj, r, ok)
		}
	})
}

package keystrokes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const header = "session,subject,visit,seq,key,press_ms,release_ms,press_imputed\n"

func TestSample(t *testing.T) {
	ss, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 3 {
		t.Fatalf("sample has %d sessions, want 3", len(ss))
	}
	wantIDs := []int{15, 23, 51}
	for i, s := range ss {
		if s.ID != wantIDs[i] {
			t.Errorf("session %d: id %d, want %d", i, s.ID, wantIDs[i])
		}
		if len(s.Keys) != 400 {
			t.Errorf("session %d: %d keys, want 400", s.ID, len(s.Keys))
		}
		if s.Keys[0].Seq != 1 || s.Keys[399].Seq != 400 {
			t.Errorf("session %d: seq %d..%d", s.ID, s.Keys[0].Seq, s.Keys[399].Seq)
		}
		if d := s.Duration(); d < 90*time.Second || d > 220*time.Second {
			t.Errorf("session %d: duration %s", s.ID, d)
		}
	}
	// First row of the sample: "15,85,1,1,...".
	if ss[0].Subject != 85 || ss[0].Visit != 1 {
		t.Errorf("session 15: subject %d visit %d", ss[0].Subject, ss[0].Visit)
	}
	if len(SampleCSV()) > 60_000 {
		t.Errorf("sample is %d bytes, keep it under 60 KB", len(SampleCSV()))
	}
}

func TestParseValid(t *testing.T) {
	// Columns in another order, an imputed press, an empty key.
	in := "key,session,subject,visit,seq,press_ms,release_ms,press_imputed\n" +
		"a,7,3,2,1,100,180,0\n" +
		"b,7,3,2,2,350,400,1\n" +
		",7,3,2,3,350,420,0\n" +
		"Return,9,4,1,1,5,60,0\n"
	ss, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].ID != 7 || ss[1].ID != 9 {
		t.Fatalf("sessions = %+v", ss)
	}
	k := ss[0].Keys[1]
	if k.Key != "b" || k.Press != 350*time.Millisecond || k.Release != 400*time.Millisecond || !k.Imputed || k.Seq != 2 {
		t.Fatalf("key = %+v", k)
	}
	if ss[0].Subject != 3 || ss[0].Visit != 2 || ss[0].Keys[2].Key != "" {
		t.Fatalf("session = %+v", ss[0])
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "line 1: empty input"},
		{"header only", header, "no data rows"},
		{"missing column", "session,subject,visit,seq,key,press_ms,release_ms\n1,1,1,1,a,1,2\n", `missing column "press_imputed"`},
		{"unknown column", strings.TrimSuffix(header, "\n") + ",extra\n", `column 9: unknown column "extra"`},
		{"duplicate column", "session,session,visit,seq,key,press_ms,release_ms,press_imputed\n", `column 2: duplicate column "session"`},
		{"field count", header + "1,1,1,1,a,1,2\n", "line 2: 7 fields, want 8"},
		{"not an integer", header + "1,1,1,1,a,x,2,0\n", `line 2, column press_ms: not an integer: "x"`},
		{"negative", header + "1,1,1,1,a,-5,2,0\n", "line 2, column press_ms: must be at least 0, got -5"},
		{"visit", header + "1,1,3,1,a,1,2,0\n", "line 2, column visit: must be 1 or 2, got 3"},
		{"imputed", header + "1,1,1,1,a,1,2,yes\n", `line 2, column press_imputed: must be 0 or 1, got "yes"`},
		{"seq gap", header + "1,1,1,1,a,1,2,0\n1,1,1,3,b,5,6,0\n", "line 3, column seq: got 3 after 1, want 2"},
		{"press backwards", header + "1,1,1,1,a,10,20,0\n1,1,1,2,b,5,6,0\n", "line 3, column press_ms: 5 goes back in time"},
		{"not contiguous", header + "1,1,1,1,a,1,2,0\n2,2,1,1,b,1,2,0\n1,1,1,2,c,3,4,0\n", "line 4, column session: session 1 appears again"},
		{"subject changes", header + "1,1,1,1,a,1,2,0\n1,2,1,2,b,3,4,0\n", "line 3, column subject: session 1 changes subject/visit"},
		{"bad quoting", header + "1,1,1,1,\"a,1,2,0\n", "keystrokes: line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	_, err := Parse(strings.NewReader(header + "1,1,1,1,a,x,2,0\n"))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Column != "press_ms" {
		t.Fatalf("err = %#v, want a *ParseError at line 2, press_ms", err)
	}
	if _, err := Parse(strings.NewReader(header)); !errors.Is(err, ErrNoRows) {
		t.Fatalf("header only: %v, want ErrNoRows", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k.csv")
	if err := os.WriteFile(p, SampleCSV(), 0o600); err != nil {
		t.Fatal(err)
	}
	ss, err := Load(p)
	if err != nil || len(ss) != 3 {
		t.Fatalf("Load = %d sessions, %v", len(ss), err)
	}
	if _, err := Load(filepath.Join(dir, "missing.csv")); err == nil || !strings.Contains(err.Error(), "missing.csv") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte(header+"1,1,1,1,a,x,2,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "bad.csv: keystrokes: line 2, column press_ms") {
		t.Fatalf("bad file: %v", err)
	}
}

// TestLoadFull reads the full data set committed in data/.
func TestLoadFull(t *testing.T) {
	const full = "data/neuroqwerty_controls_keystrokes.csv"
	if _, err := os.Stat(full); err != nil {
		t.Fatalf("the full keystroke data set is part of the repository: %v", err)
	}
	ss, err := Load(full)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		n += len(s.Keys)
	}
	if len(ss) != 56 || n != 91641 {
		t.Fatalf("full file: %d sessions, %d keys; want 56, 91641", len(ss), n)
	}
}

func ks(spec string) Session {
	// spec: "key@ms key@ms ..."
	var s Session
	s.ID = 1
	for i, f := range strings.Fields(spec) {
		key, ms, _ := strings.Cut(f, "@")
		var v int
		for _, c := range ms {
			v = v*10 + int(c-'0')
		}
		s.Keys = append(s.Keys, Keystroke{Seq: i + 1, Key: key, Press: time.Duration(v) * time.Millisecond})
	}
	return s
}

func summary(ms []Message) string {
	var parts []string
	for _, m := range ms {
		var keys []string
		for _, k := range m.Keys {
			keys = append(keys, k.Key)
		}
		parts = append(parts, strings.Join(keys, "")+"/"+m.End.String()+"@"+m.EndAt.String()+"+"+m.GapAfter.String())
	}
	return strings.Join(parts, " ")
}

func TestMessages(t *testing.T) {
	s := ks("h@0 i@200 Return@400 Return@500 Shift_L@4000 y@4100 o@4300 u@8000 Left@8100 x@8200")
	tests := []struct {
		name string
		opts SplitOptions
		want string
	}{
		{
			name: "default gap 3s",
			opts: SplitOptions{},
			// "Return@500" is an empty line: no message. Shift_L@4000 is 3.5 s
			// after the Return but the message was already closed.
			want: "hi/send@400ms+3.6s Shift_Lyo/gap@4.3s+3.7s uLeftx/session_end@8.2s+0s",
		},
		{
			name: "text only drops modifiers and navigation",
			opts: SplitOptions{TextOnly: true},
			want: "hi/send@400ms+3.7s yo/gap@4.3s+3.7s ux/session_end@8.2s+0s",
		},
		{
			name: "gap splitting off",
			opts: SplitOptions{MaxGap: -1, TextOnly: true},
			want: "hi/send@400ms+3.7s youx/session_end@8.2s+0s",
		},
		{
			name: "max keys",
			opts: SplitOptions{MaxKeys: 2, MaxGap: -1, TextOnly: true},
			want: "hi/send@400ms+3.7s yo/max_keys@4.3s+3.7s ux/max_keys@8.2s+0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(s.Messages(tt.opts)); got != tt.want {
				t.Errorf("\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestMessagesMaxKeysThenSend(t *testing.T) {
	// A cut at MaxKeys followed at once by Return is a sent message.
	s := ks("a@0 b@100 Return@300 c@400")
	got := summary(s.Messages(SplitOptions{MaxKeys: 2}))
	if want := "ab/send@300ms+100ms c/session_end@400ms+0s"; got != want {
		t.Fatalf("\n got: %s\nwant: %s", got, want)
	}
}

func TestMessagesSample(t *testing.T) {
	ss, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		ms := s.Messages(SplitOptions{MaxKeys: 40, TextOnly: true})
		if len(ms) < 5 {
			t.Errorf("session %d: only %d messages", s.ID, len(ms))
		}
		total := 0
		for i, m := range ms {
			if len(m.Keys) == 0 || len(m.Keys) > 40 {
				t.Errorf("session %d message %d: %d keys", s.ID, i, len(m.Keys))
			}
			for j := 1; j < len(m.Keys); j++ {
				if gap := m.Keys[j].Press - m.Keys[j-1].Press; gap > DefaultMaxGap {
					t.Errorf("session %d message %d: gap %s inside a message", s.ID, i, gap)
				}
			}
			if m.GapAfter < 0 || m.Duration() < 0 {
				t.Errorf("session %d message %d: negative times %+v", s.ID, i, m)
			}
			total += len(m.Keys)
		}
		text := 0
		for _, k := range s.Keys {
			if IsText(k.Key) {
				text++
			}
		}
		if total != text {
			t.Errorf("session %d: messages hold %d keys, session has %d text keys", s.ID, total, text)
		}
	}
}

func TestIsText(t *testing.T) {
	for _, k := range []string{"a", "E", "space", "BackSpace", "Delete", "comma", "period", "ntilde", "exclamdown", "acute", "P_Add", "P_7"} {
		if !IsText(k) {
			t.Errorf("IsText(%q) = false", k)
		}
	}
	for _, k := range []string{"", "Shift_L", "Shift_R", "Caps_Lock", "Num_Lock", "Left", "Up", "P_Left", "P_Next", "P_Enter", "Return", "Tab", "[65105]", "F5", "Escape"} {
		if IsText(k) {
			t.Errorf("IsText(%q) = true", k)
		}
	}
	for _, k := range []string{"Return", "P_Enter", "KP_Enter"} {
		if !IsSend(k) {
			t.Errorf("IsSend(%q) = false", k)
		}
	}
}

// Package keystrokes reads real human keystroke timings (the neuroQWERTY
// MIT-CSXPD healthy-control cut, see data/README.md) and splits typing
// sessions into chat-sized messages, so the demo and the load generator can
// drive typing_start / typing_stop from real human rhythm.
//
// The CSV format is the one of data/README.md (header row,
// comma-separated, one row per key press):
//
//	session,subject,visit,seq,key,press_ms,release_ms,press_imputed
//
// A small sample (three sessions, the first 400 key presses of each) is
// embedded, see [Sample]; [Load] reads the full file from a path.
package keystrokes

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

//go:embed data/sample.csv
var sampleCSV []byte

// Columns lists the CSV columns, in the order the source file writes them.
// [Parse] requires each exactly once, in any order; other columns are an
// error too, so a wrong file is not half read.
var Columns = [...]string{"session", "subject", "visit", "seq", "key", "press_ms", "release_ms", "press_imputed"}

// ErrNoRows is returned by [Parse] for a file with a header and no data rows.
var ErrNoRows = errors.New("keystrokes: no data rows")

// Keystroke is one key press of a session.
type Keystroke struct {
	// Seq is the 1-based position of the press in its session.
	Seq int
	// Key is the X11 key name: "a", "E", "space", "BackSpace", "Return",
	// "Shift_L", "comma", "[65105]" (a dead or unnamed key), ... It may be
	// empty (two rows of the full file: a key the logger did not name).
	Key string
	// Press is the key-down time since the session's recording started
	// (millisecond resolution).
	Press time.Duration
	// Release is the key-up time since the same origin. Presses overlap
	// (rollover, Shift held), so releases are not ordered.
	Release time.Duration
	// Imputed reports that the logger lost the key-down and Press was
	// imputed as Release minus the session's median hold time.
	Imputed bool
}

// Session is one recorded typing session, its keystrokes ordered by Press.
type Session struct {
	// ID is the session id of the CSV (1..56 in the full file).
	ID int
	// Subject is the data set's opaque participant number.
	Subject int
	// Visit is 1 or 2: the subject's first or second recording.
	Visit int
	// Keys are the key presses in press order.
	Keys []Keystroke
}

// ParseError is a row or header that cannot be read. Line is 1-based and
// counts the header; Column is the CSV column name ("" for the whole row).
type ParseError struct {
	Line   int
	Column string
	Err    error
}

func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("keystrokes: line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("keystrokes: line %d, column %s: %v", e.Line, e.Column, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Sample returns the embedded sample sessions (see data/README.md for what
// was cut and the attribution it requires). Each call parses afresh, so
// callers may modify the result.
func Sample() ([]Session, error) {
	s, err := Parse(bytes.NewReader(sampleCSV))
	if err != nil {
		return nil, fmt.Errorf("embedded sample: %w", err)
	}
	return s, nil
}

// SampleCSV returns a copy of the embedded sample's raw CSV bytes.
func SampleCSV() []byte { return bytes.Clone(sampleCSV) }

// Load reads a keystroke CSV file, e.g. the full
// neuroqwerty_controls_keystrokes.csv (about 3 MB, 56 sessions).
func Load(path string) ([]Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keystrokes: %w", err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads the CSV format described in the package comment. It checks
// the header (every column of [Columns] exactly once), every field
// (integers, visit 1 or 2, seq from 1 upwards, press_imputed 0 or 1, times
// not negative), that a session's rows are contiguous, and that press times
// never go backwards within a session. Errors are *[ParseError]s naming the
// line and column.
func Parse(r io.Reader) ([]Session, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // checked here, with a better message
	idx, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	var b sessionBuilder
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, csvError(err, line)
		}
		if len(rec) != len(Columns) {
			return nil, &ParseError{Line: line, Err: fmt.Errorf("%d fields, want %d", len(rec), len(Columns))}
		}
		row, err := parseRow(rec, idx, line)
		if err != nil {
			return nil, err
		}
		if err := b.add(row, line); err != nil {
			return nil, err
		}
	}
	if len(b.sessions) == 0 {
		return nil, ErrNoRows
	}
	return b.sessions, nil
}

// readHeader reads the header row (line 1) and returns the index of each
// of [Columns] in it.
func readHeader(cr *csv.Reader) (map[string]int, error) {
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &ParseError{Line: 1, Err: errors.New("empty input, want a header row")}
	}
	if err != nil {
		return nil, csvError(err, 1)
	}
	idx, err := columnIndex(header)
	if err != nil {
		return nil, &ParseError{Line: 1, Err: err}
	}
	return idx, nil
}

// row is one data row: its session's fields and its keystroke.
type row struct {
	session, subject, visit int
	stroke                  Keystroke
}

// parseRow checks the fields of rec (on line, columns at idx) in column
// order and returns them.
func parseRow(rec []string, idx map[string]int, line int) (row, error) {
	field := func(name string) string { return rec[idx[name]] }
	var err error
	num := func(name string, min int) int {
		if err != nil {
			return 0
		}
		v, e := strconv.Atoi(field(name))
		switch {
		case e != nil:
			err = &ParseError{Line: line, Column: name, Err: fmt.Errorf("not an integer: %q", field(name))}
		case v < min:
			err = &ParseError{Line: line, Column: name, Err: fmt.Errorf("must be at least %d, got %d", min, v)}
		}
		return v
	}
	r := row{session: num("session", 1), subject: num("subject", 0), visit: num("visit", 1)}
	if err == nil && r.visit > 2 {
		return row{}, &ParseError{Line: line, Column: "visit", Err: fmt.Errorf("must be 1 or 2, got %d", r.visit)}
	}
	r.stroke.Seq = num("seq", 1)
	r.stroke.Key = field("key") // may be empty: 2 rows of the full file name no key
	r.stroke.Press = time.Duration(num("press_ms", 0)) * time.Millisecond
	r.stroke.Release = time.Duration(num("release_ms", 0)) * time.Millisecond
	if err != nil {
		return row{}, err
	}
	switch field("press_imputed") {
	case "0":
	case "1":
		r.stroke.Imputed = true
	default:
		return row{}, &ParseError{Line: line, Column: "press_imputed", Err: fmt.Errorf("must be 0 or 1, got %q", field("press_imputed"))}
	}
	return r, nil
}

// sessionBuilder collects rows into sessions, checking that a session's
// rows are contiguous, keep its subject and visit, number seq from 1
// upwards and never move press time backwards.
type sessionBuilder struct {
	sessions []Session
	seen     map[int]bool // session ids already started
	cur      *Session
}

// add appends r (from line) to its session, starting one when r's session
// id differs from the previous row's.
func (b *sessionBuilder) add(r row, line int) error {
	if b.cur == nil || b.cur.ID != r.session {
		if b.seen[r.session] {
			return &ParseError{Line: line, Column: "session", Err: fmt.Errorf("session %d appears again after other sessions; rows of a session must be contiguous", r.session)}
		}
		if b.seen == nil {
			b.seen = map[int]bool{}
		}
		b.seen[r.session] = true
		b.sessions = append(b.sessions, Session{ID: r.session, Subject: r.subject, Visit: r.visit})
		b.cur = &b.sessions[len(b.sessions)-1]
	} else if b.cur.Subject != r.subject || b.cur.Visit != r.visit {
		return &ParseError{Line: line, Column: "subject", Err: fmt.Errorf("session %d changes subject/visit from %d/%d to %d/%d", r.session, b.cur.Subject, b.cur.Visit, r.subject, r.visit)}
	}
	if n := len(b.cur.Keys); n > 0 {
		prev := b.cur.Keys[n-1]
		if r.stroke.Seq != prev.Seq+1 {
			return &ParseError{Line: line, Column: "seq", Err: fmt.Errorf("got %d after %d, want %d", r.stroke.Seq, prev.Seq, prev.Seq+1)}
		}
		if r.stroke.Press < prev.Press {
			return &ParseError{Line: line, Column: "press_ms", Err: fmt.Errorf("%d goes back in time (previous press %d)", r.stroke.Press.Milliseconds(), prev.Press.Milliseconds())}
		}
	}
	b.cur.Keys = append(b.cur.Keys, r.stroke)
	return nil
}

func columnIndex(header []string) (map[string]int, error) {
	want := map[string]bool{}
	for _, c := range Columns {
		want[c] = true
	}
	idx := map[string]int{}
	var errs []error
	for i, h := range header {
		if _, dup := idx[h]; dup {
			errs = append(errs, fmt.Errorf("column %d: duplicate column %q", i+1, h))
			continue
		}
		if !want[h] {
			errs = append(errs, fmt.Errorf("column %d: unknown column %q", i+1, h))
			continue
		}
		idx[h] = i
	}
	for _, c := range Columns {
		if _, ok := idx[c]; !ok {
			errs = append(errs, fmt.Errorf("missing column %q", c))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("bad header (want %v): %w", Columns, errors.Join(errs...))
	}
	return idx, nil
}

func csvError(err error, line int) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Line: pe.Line, Err: pe.Err}
	}
	return &ParseError{Line: line, Err: err}
}

// Duration is the time from the session's first to its last key press.
func (s Session) Duration() time.Duration {
	if len(s.Keys) == 0 {
		return 0
	}
	return s.Keys[len(s.Keys)-1].Press - s.Keys[0].Press
}

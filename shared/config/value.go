package config

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// value is a setting's binding to its Config field: it parses text into the
// field, shows the field as text, resets it to the default and runs the
// setting's own checks. Built by the constructors below (str, dur, integer,
// float, boolean, list).
type value interface {
	set(s string) error // parse s into the field; the error does not name the variable
	String() string     // the field's value as the variable would spell it
	reset()             // the field takes its default
	check() []error     // the setting's own checks; errors do not name the variable
	valid() string      // what the checks accept, for docs/configuration.md ("1..500"), "" when anything
	// limits spells the smallest and largest values the setting's own
	// range checks accept (atLeast, atMost, between, notNegative), as the
	// variable would ("10ms", "500ms"); "" for a side no check closes.
	// Rules across settings (settings.go) may narrow them further.
	limits() (lo, hi string)
}

// check is one rule on a single value: desc is what it accepts, for
// docs/configuration.md's table ("1..500"), fn returns why v is refused
// ("must be 1..500, got 0") or nil. lo and hi, when set, are the ends of the range fn
// accepts, both included (the range checks set them; see limits).
type check[T any] struct {
	desc   string
	fn     func(v T) error
	lo, hi *T
}

type field[T any] struct {
	p      *T
	def    T
	parse  func(string) (T, error)
	format func(T) string
	checks []check[T]
}

func (f *field[T]) set(s string) error {
	v, err := f.parse(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}

func (f *field[T]) String() string { return f.format(*f.p) }
func (f *field[T]) reset()         { *f.p = f.def }

func (f *field[T]) check() []error {
	var errs []error
	for _, c := range f.checks {
		if err := c.fn(*f.p); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (f *field[T]) valid() string {
	var d []string
	for _, c := range f.checks {
		if c.desc != "" {
			d = append(d, c.desc)
		}
	}
	return strings.Join(d, "; ")
}

func (f *field[T]) limits() (lo, hi string) {
	var l, h *T
	for _, c := range f.checks {
		if c.lo != nil && (l == nil || f.less(*l, *c.lo)) {
			l = c.lo
		}
		if c.hi != nil && (h == nil || f.less(*c.hi, *h)) {
			h = c.hi
		}
	}
	if l != nil {
		lo = f.format(*l)
	}
	if h != nil {
		hi = f.format(*h)
	}
	return lo, hi
}

// less orders two values of a numeric field (only range checks, which
// exist for numbers alone, call it).
func (f *field[T]) less(a, b T) bool {
	switch a := any(a).(type) {
	case time.Duration:
		return a < any(b).(time.Duration)
	case int:
		return a < any(b).(int)
	case float64:
		return a < any(b).(float64)
	}
	panic(fmt.Sprintf("config: a range check on a %T field", a))
}

// str binds a string field.
func str(p *string, def string, checks ...check[string]) value {
	return &field[string]{p: p, def: def, parse: func(s string) (string, error) { return s, nil },
		format: func(v string) string { return v }, checks: checks}
}

// dur binds a time.Duration field ("5s", "250ms").
func dur(p *time.Duration, def time.Duration, checks ...check[time.Duration]) value {
	return &field[time.Duration]{p: p, def: def, parse: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("not a duration like 5s or 250ms: %q", s)
		}
		return d, nil
	}, format: time.Duration.String, checks: checks}
}

// integer binds an int field.
func integer(p *int, def int, checks ...check[int]) value {
	return &field[int]{p: p, def: def, parse: func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("not an integer: %q", s)
		}
		return n, nil
	}, format: strconv.Itoa, checks: checks}
}

// float binds a float64 field.
func float(p *float64, def float64, checks ...check[float64]) value {
	return &field[float64]{p: p, def: def, parse: func(s string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("not a finite number: %q", s)
		}
		return f, nil
	}, format: func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }, checks: checks}
}

// boolean binds a bool field (true/false, 1/0).
func boolean(p *bool, def bool) value {
	return &field[bool]{p: p, def: def, parse: func(s string) (bool, error) {
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return false, fmt.Errorf("not a boolean (true/false): %q", s)
		}
		return b, nil
	}, format: strconv.FormatBool}
}

// list binds a comma-separated list; items are trimmed, empty ones dropped.
// Its default is always empty (nil).
func list(p *[]string, checks ...check[[]string]) value {
	return &field[[]string]{p: p, parse: func(s string) ([]string, error) {
		var out []string
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
		return out, nil
	}, format: func(v []string) string { return strings.Join(v, ",") }, checks: checks}
}

// Checks shared by several settings. Their messages follow the form
// "must be 1..500, got 0" (the variable's name is prefixed by Validate).

type number interface {
	~int | ~int64 | ~float64
}

func positive[T number]() check[T] {
	return check[T]{desc: "> 0", fn: func(v T) error {
		if v <= 0 {
			return fmt.Errorf("must be positive, got %v", v)
		}
		return nil
	}}
}

func notNegative[T number]() check[T] {
	var zero T
	return check[T]{desc: "≥ 0", lo: &zero, fn: func(v T) error {
		if v < 0 {
			return fmt.Errorf("must not be negative, got %v", v)
		}
		return nil
	}}
}

func atLeast[T number](lo T) check[T] {
	return check[T]{desc: fmt.Sprintf("≥ %v", lo), lo: &lo, fn: func(v T) error {
		if v < lo {
			return fmt.Errorf("must be at least %v, got %v", lo, v)
		}
		return nil
	}}
}

func atMost[T number](hi T) check[T] {
	return check[T]{desc: fmt.Sprintf("≤ %v", hi), hi: &hi, fn: func(v T) error {
		if v > hi {
			return fmt.Errorf("must be at most %v, got %v", hi, v)
		}
		return nil
	}}
}

// between accepts lo..hi, both included.
func between[T cmp.Ordered](lo, hi T) check[T] {
	return check[T]{desc: fmt.Sprintf("%v..%v", lo, hi), lo: &lo, hi: &hi, fn: func(v T) error {
		if v < lo || v > hi {
			return fmt.Errorf("must be %v..%v, got %v", lo, hi, v)
		}
		return nil
	}}
}

// oneOf accepts the listed words ("" for empty); the message lists them:
// `"x" must be none, claims or nats`.
func oneOf(allowed ...string) check[string] {
	words := make([]string, len(allowed))
	for i, a := range allowed {
		words[i] = cmp.Or(a, "empty")
	}
	text := words[0]
	if n := len(words); n > 1 {
		text = strings.Join(words[:n-1], ", ") + " or " + words[n-1]
	}
	return check[string]{desc: text, fn: func(v string) error {
		for _, a := range allowed {
			if v == a {
				return nil
			}
		}
		return fmt.Errorf("%q must be %s", v, text)
	}}
}

// listenAddr accepts host:port (":8080"); empty only when optional.
func listenAddr(optional bool) check[string] {
	desc := "host:port"
	if optional {
		desc += " or empty"
	}
	return check[string]{desc: desc, fn: func(v string) error {
		if v == "" {
			if optional {
				return nil
			}
			return fmt.Errorf("is required")
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("not a host:port listen address: %q", v)
		}
		return nil
	}}
}

// rule is a check on a single value written inline: desc for
// docs/configuration.md, fn returning why v is refused.
func rule[T any](desc string, fn func(v T) error) check[T] { return check[T]{desc: desc, fn: fn} }

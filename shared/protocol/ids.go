package protocol

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Id limits (docs/protocol.md, "Terms and ids").
const (
	// MaxIDBytes is the longest room, user or conn id, in bytes.
	MaxIDBytes = 256
	// MaxNameBytes is the longest display name, in bytes.
	MaxNameBytes = 256
	// MaxRequestIDBytes is the longest client request id ("id" in a frame),
	// in bytes.
	MaxRequestIDBytes = 128
)

// FieldError is a validation failure of one field. Its message names the
// field and the limit, e.g. `room: must be 1..256 bytes, got 300`.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func checkText(field, s string, min, max int) error {
	if len(s) < min || len(s) > max {
		if min == 0 {
			return &FieldError{field, fmt.Sprintf("must be at most %d bytes, got %d", max, len(s))}
		}
		if len(s) == 0 {
			return &FieldError{field, "is required"}
		}
		return &FieldError{field, fmt.Sprintf("must be %d..%d bytes, got %d", min, max, len(s))}
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return &FieldError{field, fmt.Sprintf("invalid UTF-8 at byte %d", i)}
			}
		}
		if unicode.IsControl(r) {
			return &FieldError{field, fmt.Sprintf("control character U+%04X at byte %d", r, i)}
		}
	}
	return nil
}

// ValidateID checks a room, user or conn id: 1..[MaxIDBytes] bytes of valid
// UTF-8 without control characters (docs/protocol.md, "Terms and ids"). field names the id
// in the error ("room", "user", "conn"). It returns a *[FieldError] or nil.
func ValidateID(field, id string) error { return checkText(field, id, 1, MaxIDBytes) }

// ValidateName checks an optional display name: at most [MaxNameBytes] bytes
// of valid UTF-8 without control characters. Empty is allowed.
func ValidateName(field, name string) error { return checkText(field, name, 0, MaxNameBytes) }

// ValidateRequestID checks an optional client request id: at most
// [MaxRequestIDBytes] bytes of valid UTF-8 without control characters.
func ValidateRequestID(id string) error { return checkText("id", id, 0, MaxRequestIDBytes) }

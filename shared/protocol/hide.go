package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// HideTypingFrom is the name of the per-viewer hide list, both as a JWT
// claim and as a field of the join authoriser's reply (docs/protocol.md,
// "Per-viewer filters"): the users whose typing a connection never gets.
const HideTypingFrom = "hide_typing_from"

// MaxHideTypingFrom is the most user ids one hide list may hold (the claim
// and each room's authoriser reply alike; duplicates count).
const MaxHideTypingFrom = 1000

// DecodeUserIDs decodes raw, one JSON value, as a hide list: an array of
// at most [MaxHideTypingFrom] user ids, each valid by [ValidateID]. field
// names the list in errors ("hide_typing_from"). Absent (empty raw) and
// null are no list (nil, nil); [] is an empty list. Duplicates are kept as
// sent. Errors are *[FieldError]s naming the field and the rule:
//
//	hide_typing_from: must be an array of user ids, got "bob"
//	hide_typing_from: at most 1000 user ids, got 1001
//	hide_typing_from[3]: must be a user id string, got 7
//	hide_typing_from[3]: must be 1..256 bytes, got 300
func DecodeUserIDs(field string, raw []byte) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, &FieldError{field, "must be an array of user ids, got " + shortJSON(raw)}
	}
	if len(elems) > MaxHideTypingFrom {
		return nil, &FieldError{field, fmt.Sprintf("at most %d user ids, got %d", MaxHideTypingFrom, len(elems))}
	}
	ids := make([]string, len(elems))
	for i, e := range elems {
		name := field + "[" + strconv.Itoa(i) + "]"
		if len(e) == 0 || e[0] != '"' || json.Unmarshal(e, &ids[i]) != nil {
			return nil, &FieldError{name, "must be a user id string, got " + shortJSON(e)}
		}
		if err := ValidateID(name, ids[i]); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// ValidateUserIDs checks ids as a hide list (the rules of
// [DecodeUserIDs]) and returns a *[FieldError] or nil.
func ValidateUserIDs(field string, ids []string) error {
	if len(ids) > MaxHideTypingFrom {
		return &FieldError{field, fmt.Sprintf("at most %d user ids, got %d", MaxHideTypingFrom, len(ids))}
	}
	for i, id := range ids {
		if err := ValidateID(field+"["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
	}
	return nil
}

// shortJSON quotes a JSON value from outside for an error message, cut to
// 32 bytes.
func shortJSON(raw []byte) string {
	if len(raw) > 32 {
		return string(raw[:32]) + "..."
	}
	return string(raw)
}

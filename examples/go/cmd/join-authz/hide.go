package main

import (
	"fmt"
	"strings"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// ParseHide reads the -hide flag, "alice=bob,carol;dave=eve", into user →
// the users whose typing they do not get (alice: bob and carol). A user
// named twice gets both lists, in order; empty parts (";;", a trailing
// ",") are skipped. Each list is checked with the rules the gateway
// applies to the authoriser's reply (protocol.ValidateUserIDs: at most
// protocol.MaxHideTypingFrom ids, each valid by protocol.ValidateID), and
// each user with protocol.ValidateID. Errors name the part and the rule:
//
//	-hide "alice": no "=" between the user and the hidden users
//	-hide "=bob": user: is required
//	-hide "alice=": no hidden users after "="
//	-hide "alice": hide_typing_from: at most 1000 user ids, got 1001
//	-hide "alice": hide_typing_from[0]: control character U+0007 at byte 1
func ParseHide(s string) (map[string][]string, error) {
	out := map[string][]string{}
	var users []string // in order of first mention, for the first error
	for _, part := range strings.Split(s, ";") {
		if part == "" {
			continue
		}
		user, list, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("-hide %q: no \"=\" between the user and the hidden users", part)
		}
		if err := protocol.ValidateID("user", user); err != nil {
			return nil, fmt.Errorf("-hide %q: %w", part, err)
		}
		n, seen := len(out[user]), out[user] != nil
		if !seen {
			users = append(users, user)
		}
		for _, id := range strings.Split(list, ",") {
			if id != "" {
				out[user] = append(out[user], id)
			}
		}
		if len(out[user]) == n {
			return nil, fmt.Errorf("-hide %q: no hidden users after \"=\"", part)
		}
	}
	for _, user := range users {
		if err := protocol.ValidateUserIDs(protocol.HideTypingFrom, out[user]); err != nil {
			return nil, fmt.Errorf("-hide %q: %w", user, err)
		}
	}
	return out, nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
)

// postTimeout bounds the reply's POST to the chat service.
const postTimeout = 5 * time.Second

// postReply posts text as the agent's message in scope to the chat
// service at base (examples/go/chat: POST <base>/rooms/{room}/messages,
// answered 201).
func postReply(ctx context.Context, base string, s agent.Scope, user, name, text string) error {
	body, _ := json.Marshal(map[string]string{"user": user, "name": name, "text": text, "thread": s.Thread})
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	u := strings.TrimSuffix(base, "/") + "/rooms/" + url.PathEscape(s.Room) + "/messages"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post the reply: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("post the reply: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("post the reply to %s: HTTP %d: %s", u, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

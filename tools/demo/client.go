package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// hintNotRunning ends every error that means nothing serves the URL.
const hintNotRunning = "is `make run` running?"

// httpURL maps the WebSocket URL to the http(s) URL of path on the same
// host: ws://localhost:8080/v1/ws -> http://localhost:8080/v1/config.
func httpURL(ws *url.URL, path string) string {
	u := *ws
	switch u.Scheme {
	case "wss":
		u.Scheme = "https"
	default:
		u.Scheme = "http"
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = path, "", "", ""
	return u.String()
}

// fetchConfig asks the gateway for its client timing. found is false when
// the server answers but has no /v1/config (an older or other gateway): the
// caller then uses the protocol defaults. A server that does not answer is
// an error that says to start the stack.
func fetchConfig(ctx context.Context, ws *url.URL, timeout time.Duration) (cfg protocol.ClientConfig, found bool, err error) {
	target := httpURL(ws, "/v1/config")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return cfg, false, fmt.Errorf("demo: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cfg, false, fmt.Errorf("cannot reach the Ellipsis stack at %s: %w (%s)", target, err, hintNotRunning)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return cfg, false, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&cfg); err != nil {
		return cfg, false, fmt.Errorf("GET %s: unreadable JSON: %w", target, err)
	}
	return cfg, true, nil
}

// dialUser opens a WebSocket for a user: with a token (Bearer header) when
// given, else with the dev mode's ?user=&name=.
func dialUser(ctx context.Context, ws *url.URL, u User, token string, timeout time.Duration) (*websocket.Conn, error) {
	target := *ws
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	} else {
		q := target.Query()
		q.Set("user", u.ID)
		q.Set("name", u.Name)
		target.RawQuery = q.Encode()
	}
	d := websocket.Dialer{HandshakeTimeout: timeout, Proxy: http.ProxyFromEnvironment}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, resp, err := d.DialContext(ctx, target.String(), h)
	if err == nil {
		return c, nil
	}
	if resp == nil {
		return nil, fmt.Errorf("cannot reach the Ellipsis stack at %s: %w (%s)", ws.Redacted(), err, hintNotRunning)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	msg := strings.TrimSpace(string(body))
	var apiErr struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(body, &apiErr) == nil && apiErr.Error.Message != "" {
		msg = apiErr.Error.Code + ": " + apiErr.Error.Message
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		hint = " (the stack wants a JWT, ELLIPSIS_AUTH=jwt: pass -jwt-secret with the stack's ELLIPSIS_JWT_SECRET, or -token)"
	case http.StatusForbidden:
		hint = " (check the stack's ELLIPSIS_ALLOWED_ORIGINS)"
	case http.StatusNotFound:
		hint = " (is -url the gateway's /v1/ws?)"
	}
	return nil, fmt.Errorf("%s: the WebSocket handshake with %s was refused: HTTP %d: %s%s", u.ID, ws.Redacted(), resp.StatusCode, msg, hint)
}

// MintHS256 returns an HS256 JWT for a demo user (sub, name, iat, exp =
// now + ttl), signed with golang-jwt, as the gateway accepts with
// ELLIPSIS_AUTH=jwt and ELLIPSIS_JWT_SECRET=secret. For development and
// demos only (ellipsis-token mints tokens with every claim and algorithm).
func MintHS256(secret []byte, sub, name string, now time.Time, ttl time.Duration) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("demo: empty JWT secret")
	}
	c := jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
	if name != "" {
		c["name"] = name
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("demo: sign the JWT: %w", err)
	}
	return tok, nil
}

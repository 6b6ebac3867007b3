package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ellipsis-chat/ellipsis/services/gateway/token"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

const secret = "a-dev-secret-of-more-than-32-bytes!"

func runTool(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

// -gen-key writes a private key and its JWKS; tokens minted with -key
// name the JWKS's kid and verify with the key. (The gateway's own check of
// such tokens is services/gateway/token's test.)
func TestGenKeyThenMint(t *testing.T) {
	dir := t.TempDir()
	for _, alg := range []string{"rs256", "es256", "eddsa"} {
		keyPath, jwksPath := filepath.Join(dir, alg+".pem"), filepath.Join(dir, alg+".jwks.json")
		code, out, errOut := runTool(t, nil, "-gen-key", alg, "-key-out", keyPath, "-jwks-out", jwksPath)
		if code != 0 || out != "" || !strings.Contains(errOut, "ELLIPSIS_JWKS_FILE="+jwksPath) {
			t.Fatalf("%s: -gen-key: %d %q %q", alg, code, out, errOut)
		}
		if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: private key file %v %v", alg, st.Mode(), err)
		}
		if code, _, errOut := runTool(t, nil, "-gen-key", alg, "-key-out", keyPath, "-jwks-out", jwksPath+"2"); code == 0 || !strings.Contains(errOut, "exists") {
			t.Fatalf("%s: overwrote a key: %d %s", alg, code, errOut)
		}
		var set struct {
			Keys []struct{ KID, Alg, Use string }
		}
		raw, _ := os.ReadFile(jwksPath)
		if err := json.Unmarshal(raw, &set); err != nil || len(set.Keys) != 1 || set.Keys[0].Use != "sig" || !strings.EqualFold(set.Keys[0].Alg, alg) {
			t.Fatalf("%s: JWKS %s %v", alg, raw, err)
		}

		code, out, errOut = runTool(t, nil, "-key", keyPath, "-sub", "alice", "-name", "Alice", "-rooms", "lobby, team-7/*", "-exp", "10m")
		if code != 0 || errOut != "" {
			t.Fatalf("%s: mint: %d %q", alg, code, errOut)
		}
		pemData, _ := os.ReadFile(keyPath)
		priv, _ := token.ParsePrivateKeyPEM(pemData)
		var c struct {
			jwt.RegisteredClaims
			Name        string   `json:"name"`
			Rooms       []string `json:"rooms"`
			ShareTyping *bool    `json:"share_typing"`
		}
		tok, err := jwt.ParseWithClaims(strings.TrimSpace(out), &c, func(*jwt.Token) (any, error) { return priv.Public(), nil },
			jwt.WithValidMethods([]string{set.Keys[0].Alg}), jwt.WithExpirationRequired())
		if err != nil {
			t.Fatalf("%s: minted token: %v", alg, err)
		}
		if tok.Header["kid"] != set.Keys[0].KID || c.Subject != "alice" || c.Name != "Alice" || !slices.Equal(c.Rooms, []string{"lobby", "team-7/*"}) || c.ShareTyping != nil {
			t.Errorf("%s: header %v claims %+v", alg, tok.Header, c)
		}
		if d := time.Until(c.ExpiresAt.Time); d < 9*time.Minute || d > 11*time.Minute {
			t.Errorf("%s: exp in %s, want 10m", alg, d)
		}
	}
}

// HS256 takes the secret from $ELLIPSIS_JWT_SECRET or -secret-file, never
// from a flag, and never prints it.
func TestHS256(t *testing.T) {
	env := map[string]string{"ELLIPSIS_JWT_SECRET": secret}
	code, out, errOut := runTool(t, env, "-sub", "bob", "-share-typing=false", "-iss", "https://id.example", "-aud", "ellipsis,other")
	if code != 0 {
		t.Fatalf("%d %s", code, errOut)
	}
	var c struct {
		jwt.RegisteredClaims
		ShareTyping *bool `json:"share_typing"`
	}
	if _, err := jwt.ParseWithClaims(strings.TrimSpace(out), &c, func(*jwt.Token) (any, error) { return []byte(secret), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("https://id.example"), jwt.WithAudience("ellipsis")); err != nil {
		t.Fatal(err)
	}
	if c.Subject != "bob" || c.ShareTyping == nil || *c.ShareTyping {
		t.Errorf("claims %+v", c)
	}

	file := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(file, []byte(secret+"\n"), 0o600)
	code, out, _ = runTool(t, nil, "-secret-file", file, "-sub", "bob")
	if _, err := jwt.Parse(strings.TrimSpace(out), func(*jwt.Token) (any, error) { return []byte(secret), nil }); code != 0 || err != nil {
		t.Fatalf("-secret-file: %d %v", code, err)
	}

	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		"no sub":         {env, nil, 2, "-sub is required"},
		"no key":         {nil, []string{"-sub", "a"}, 1, "no key"},
		"secret flag":    {nil, []string{"-secret", secret, "-sub", "a"}, 2, "not defined"},
		"short secret":   {map[string]string{"ELLIPSIS_JWT_SECRET": "s3cret"}, []string{"-sub", "a"}, 1, "too short"},
		"alg mismatch":   {env, []string{"-sub", "a", "-alg", "RS256"}, 2, "signs HS256"},
		"key and secret": {nil, []string{"-sub", "a", "-key", "k.pem", "-secret-file", file}, 1, "one of them"},
		"no exp":         {env, []string{"-sub", "a", "-exp", "0s"}, 1, "TTL must be positive"},
		"bad gen-key":    {nil, []string{"-gen-key", "hs256"}, 1, "rs256, es256 or eddsa"},
	} {
		code, out, errOut := runTool(t, tc.env, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: %d %q %q, want %d and %q", name, code, out, errOut, tc.code, tc.want)
		}
		if strings.Contains(errOut, secret) || strings.Contains(errOut, "s3cret") {
			t.Errorf("%s: the secret is printed: %s", name, errOut)
		}
	}
}

// -hide-typing-from, repeated and comma-separated, writes the
// hide_typing_from claim in order, which the gateway's decoder
// (protocol.DecodeUserIDs) reads back; a list it would refuse is refused
// with the rule.
func TestHideTypingFrom(t *testing.T) {
	env := map[string]string{"ELLIPSIS_JWT_SECRET": secret}
	code, out, errOut := runTool(t, env, "-sub", "alice", "-hide-typing-from", "bob, carol", "-hide-typing-from", "mallory,")
	if code != 0 {
		t.Fatalf("%d %s", code, errOut)
	}
	var c struct {
		jwt.RegisteredClaims
		Hide json.RawMessage `json:"hide_typing_from"`
	}
	if _, err := jwt.ParseWithClaims(strings.TrimSpace(out), &c, func(*jwt.Token) (any, error) { return []byte(secret), nil },
		jwt.WithValidMethods([]string{"HS256"})); err != nil {
		t.Fatal(err)
	}
	ids, err := protocol.DecodeUserIDs(protocol.HideTypingFrom, c.Hide)
	if err != nil || !slices.Equal(ids, []string{"bob", "carol", "mallory"}) {
		t.Fatalf("hide_typing_from %s: %v %v", c.Hide, ids, err)
	}
	// Without the flag the claim is not written.
	code, out, _ = runTool(t, env, "-sub", "alice")
	c.Hide = nil
	if _, err := jwt.ParseWithClaims(strings.TrimSpace(out), &c, func(*jwt.Token) (any, error) { return []byte(secret), nil }); code != 0 || err != nil || c.Hide != nil {
		t.Fatalf("no flag: %d %v, claim %s", code, err, c.Hide)
	}

	for want, args := range map[string][]string{
		"hide_typing_from: at most 1000 user ids, got 1001":       {"-hide-typing-from", strings.Repeat("b,", 1000), "-hide-typing-from", "one-more"},
		"hide_typing_from[1]: control character U+0007 at byte 1": {"-hide-typing-from", "bob,c\x07"},
		"hide_typing_from[0]: must be 1..256 bytes, got 257":      {"-hide-typing-from", strings.Repeat("x", 257)},
	} {
		code, out, errOut := runTool(t, env, append([]string{"-sub", "alice"}, args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%.40q: %d %q %q, want exit 1 and %q", args, code, out, errOut, want)
		}
	}
}

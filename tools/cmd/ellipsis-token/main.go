// Command ellipsis-token mints JSON Web Tokens the gateway accepts with
// ELLIPSIS_AUTH=jwt, and makes signing keys with their JWK Set, so the
// gateway can run in JWT mode end to end without an identity provider (for
// development, tests and demos; in production the identity provider issues
// the tokens).
//
// HS256, with the gateway's ELLIPSIS_JWT_SECRET (from the environment or
// -secret-file; never a flag value, which would sit in the shell history
// and the process list):
//
//	ELLIPSIS_JWT_SECRET=... go run ./tools/cmd/ellipsis-token -sub alice -name Alice
//
// RS256, ES256 or EdDSA: make a key once, point the gateway at its JWKS,
// then mint with the private key (the kid is the key's RFC 7638
// thumbprint, the same in the token and the JWKS):
//
//	go run ./tools/cmd/ellipsis-token -gen-key es256 -key-out dev-es256.pem -jwks-out jwks.json
//	ELLIPSIS_AUTH=jwt ELLIPSIS_JWKS_FILE=jwks.json make run
//	go run ./tools/cmd/ellipsis-token -key dev-es256.pem -sub alice -rooms 'lobby,team-7/*'
//
// -hide-typing-from writes the hide_typing_from claim, the users whose
// typing alice's connections never get (docs/protocol.md, "Per-viewer
// filters"); repeat it or give a comma list (ids holding a comma cannot be
// given), checked with the gateway's rules (at most 1,000 user ids, each
// 1..256 bytes of UTF-8 without control characters):
//
//	ELLIPSIS_JWT_SECRET=... go run ./tools/cmd/ellipsis-token -sub alice -hide-typing-from bob,carol -hide-typing-from mallory
//
// The token goes to stdout (one line); everything else to stderr.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ellipsis-chat/ellipsis/services/gateway/token"
	"github.com/ellipsis-chat/ellipsis/shared/buildinfo"
)

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr)) }

// run is the command; it returns the exit code: 0 done, 1 failed, 2 bad
// usage.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if buildinfo.HandleFlag("ellipsis-token", args, stdout) {
		return 0
	}
	fs := flag.NewFlagSet("ellipsis-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sub         = fs.String("sub", "", "user id (sub claim), required to mint")
		name        = fs.String("name", "", "display name (name claim)")
		rooms       = fs.String("rooms", "", "rooms the user may join with ELLIPSIS_AUTHZ=claims (rooms claim), comma-separated; \"prefix*\" patterns allowed")
		hide        listFlag
		shareTyping = fs.Bool("share-typing", true, "share_typing claim; -share-typing=false opts the user out (the claim is only written when the flag is given)")
		exp         = fs.Duration("exp", time.Hour, "lifetime: exp = now + this")
		iss         = fs.String("iss", "", "issuer (iss claim); must equal the gateway's ELLIPSIS_JWT_ISSUER when that is set")
		aud         = fs.String("aud", "", "audiences (aud claim), comma-separated; one must be in the gateway's ELLIPSIS_JWT_AUDIENCE when that is set")
		kid         = fs.String("kid", "", "kid header (default: none for HS256, the key's RFC 7638 thumbprint for -key)")
		alg         = fs.String("alg", "", "expected algorithm (HS256, RS256, ES256, EdDSA); default: from -key, else HS256")
		keyFile     = fs.String("key", "", "private key PEM file (PKCS#8, PKCS#1 or SEC 1): RS256, ES256 or EdDSA by key type")
		secretFile  = fs.String("secret-file", "", "file holding the HS256 secret (default: $ELLIPSIS_JWT_SECRET); trailing newlines are dropped")
		genKey      = fs.String("gen-key", "", "instead of minting, make a key: rs256, es256 or eddsa")
		keyOut      = fs.String("key-out", "", "-gen-key: private key PEM file to write (default ellipsis-<alg>.pem); never overwritten")
		jwksOut     = fs.String("jwks-out", "jwks.json", "-gen-key: JWK Set file to write (for ELLIPSIS_JWKS_FILE); never overwritten")
	)
	fs.Var(&hide, "hide-typing-from", "users whose typing the user never gets (hide_typing_from claim), comma-separated; repeatable; at most 1000")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ellipsis-token -sub ID [-name N] [-rooms a,b] [-hide-typing-from u,v] [-exp 1h] [-iss I] [-aud A] [-key FILE | -secret-file FILE | $ELLIPSIS_JWT_SECRET]")
		fmt.Fprintln(stderr, "       ellipsis-token -gen-key rs256|es256|eddsa [-key-out FILE] [-jwks-out FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ellipsis-token: unexpected argument %q (flags only)\n", fs.Arg(0))
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "ellipsis-token: "+format+"\n", a...)
		return code
	}
	if *genKey != "" {
		if err := generate(*genKey, *keyOut, *jwksOut, stderr); err != nil {
			return fail(1, "%v", err)
		}
		return 0
	}

	if *sub == "" {
		return fail(2, "-sub is required (the user id)")
	}
	signer, err := newSigner(*keyFile, *secretFile, *kid, getenv)
	if err != nil {
		return fail(1, "%v", err)
	}
	if *alg != "" && !strings.EqualFold(*alg, signer.Alg()) {
		return fail(2, "-alg %s does not match the key, which signs %s", *alg, signer.Alg())
	}
	c := token.Claims{Subject: *sub, Name: *name, TTL: *exp, Issuer: *iss, Rooms: splitList(*rooms), HideTypingFrom: hide, Audience: splitList(*aud)}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "share-typing" {
			c.ShareTyping = shareTyping
		}
	})
	tok, err := signer.Mint(c)
	if err != nil {
		return fail(1, "%v", err)
	}
	fmt.Fprintln(stdout, tok)
	return 0
}

// newSigner picks the key: -key, else -secret-file, else
// $ELLIPSIS_JWT_SECRET.
func newSigner(keyFile, secretFile, kid string, getenv func(string) string) (*token.Signer, error) {
	switch {
	case keyFile != "" && secretFile != "":
		return nil, errors.New("-key and -secret-file: give one of them")
	case keyFile != "":
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("-key: %w", err)
		}
		priv, err := token.ParsePrivateKeyPEM(data)
		if err != nil {
			return nil, fmt.Errorf("-key %s: %w", keyFile, err)
		}
		if kid == "" {
			if kid, err = token.Thumbprint(priv.Public()); err != nil {
				return nil, fmt.Errorf("-key %s: %w", keyFile, err)
			}
		}
		return token.NewSigner(priv, kid)
	case secretFile != "":
		data, err := os.ReadFile(secretFile)
		if err != nil {
			return nil, fmt.Errorf("-secret-file: %w", err)
		}
		s, err := token.NewHS256([]byte(strings.TrimRight(string(data), "\r\n")), kid)
		if err != nil {
			return nil, fmt.Errorf("-secret-file %s: %w", secretFile, err)
		}
		return s, nil
	default:
		secret := getenv("ELLIPSIS_JWT_SECRET")
		if secret == "" {
			return nil, errors.New("no key: give -key FILE (RS256/ES256/EdDSA), -secret-file FILE or $ELLIPSIS_JWT_SECRET (HS256)")
		}
		s, err := token.NewHS256([]byte(secret), kid)
		if err != nil {
			return nil, fmt.Errorf("$ELLIPSIS_JWT_SECRET: %w (make one with: openssl rand -hex 32)", err)
		}
		return s, nil
	}
}

// generate writes a new private key and its JWK Set, refusing to replace
// existing files.
func generate(alg, keyOut, jwksOut string, stderr io.Writer) error {
	k, err := token.GenerateKey(alg)
	if err != nil {
		return err
	}
	if keyOut == "" {
		keyOut = "ellipsis-" + strings.ToLower(alg) + ".pem"
	}
	if err := writeNew(keyOut, k.PrivatePEM, 0o600); err != nil {
		return fmt.Errorf("-key-out: %w", err)
	}
	if err := writeNew(jwksOut, k.JWKS, 0o644); err != nil {
		os.Remove(keyOut) // a key without its JWKS is of no use
		return fmt.Errorf("-jwks-out: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s (%s private key; keep it secret) and %s (its public JWK Set, kid %s)\n", keyOut, k.Alg, jwksOut, k.KID)
	fmt.Fprintf(stderr, "run the gateway with:  ELLIPSIS_AUTH=jwt ELLIPSIS_JWKS_FILE=%s\n", jwksOut)
	fmt.Fprintf(stderr, "mint a token with:     ellipsis-token -key %s -sub alice -name Alice\n", keyOut)
	return nil
}

// writeNew creates path with data; it fails if path exists.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// listFlag is a repeatable flag of comma-separated values, in order (each
// trimmed, empty ones dropped, as splitList).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

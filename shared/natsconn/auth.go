package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The settings [Auth] reads (shared/config; docs/configuration.md).
const (
	EnvURL     = "ELLIPSIS_NATS_URL"
	EnvCreds   = "ELLIPSIS_NATS_CREDS"
	EnvNKey    = "ELLIPSIS_NATS_NKEY"
	EnvTLSCert = "ELLIPSIS_NATS_TLS_CERT"
	EnvTLSKey  = "ELLIPSIS_NATS_TLS_KEY"
	EnvTLSCA   = "ELLIPSIS_NATS_TLS_CA"
)

// maxFileBytes bounds every credentials, key and certificate file read
// (a .creds file is about 1 KiB, a CA bundle some hundred KiB).
const maxFileBytes = 4 << 20

// Auth is how a connection proves who it is, besides a user/password or a
// token in the URL (nats://user:pass@host, nats://token@host). Every field
// is a file path; empty means not used. The files are parsed by [Auth.Check]
// at start and re-read at every (re)connect, so a rotated .creds file,
// TLS certificate, key or CA (a Kubernetes Secret update) is picked up
// without a restart. An NKey seed file is the exception: nats.go presents
// the public key read at start, so a changed seed needs a restart (until
// then reconnects fail with an error saying so; [nkeyOption]).
type Auth struct {
	// CredsFile is a NATS .creds file: a user JWT and its NKey seed
	// (operator / decentralised auth, nats.UserCredentials).
	// ELLIPSIS_NATS_CREDS. Not with NKeyFile or user info in the URL.
	CredsFile string
	// NKeyFile holds a user NKey seed ("SU..."; as nats.NkeyOptionFromSeed).
	// ELLIPSIS_NATS_NKEY. A changed seed needs a restart. Not with CredsFile or user info in the URL.
	NKeyFile string
	// TLSCert and TLSKey are the PEM client certificate and its private
	// key for mutual TLS; one needs the other. ELLIPSIS_NATS_TLS_CERT,
	// ELLIPSIS_NATS_TLS_KEY.
	TLSCert string
	TLSKey  string
	// TLSCA is a PEM file of the CAs trusted for the server's certificate,
	// in place of the system's. ELLIPSIS_NATS_TLS_CA.
	//
	// Any of TLSCert, TLSKey or TLSCA makes TLS required, also for
	// nats:// URLs.
	TLSCA string
}

// TLS reports whether a TLS setting is given (the connection then
// requires TLS).
func (a Auth) TLS() bool { return a.TLSCert != "" || a.TLSKey != "" || a.TLSCA != "" }

// Check reads and parses every file a names, and checks the settings
// against each other and against urls (ELLIPSIS_NATS_URL, split). It
// reports every problem at once (errors.Join), each naming its setting
// and file but never a file's content: a missing, unreadable or malformed
// file; a .creds file without a user JWT or seed, with a seed of another
// user, or whose JWT has expired; an NKey seed that is not a user's;
// a certificate without its key (or the reverse), a key that does not
// match, an expired certificate; a CA file with no certificate; CredsFile
// with NKeyFile, or either with user info in a URL. It is
// [CheckCredsFile], [CheckNKeyFile] and [CheckCAFile] (each error prefixed
// with its setting) and [Auth.CheckTogether].
func (a Auth) Check(urls []string) error {
	var errs []error
	for _, f := range []struct {
		env, path string
		check     func(string) error
	}{{EnvCreds, a.CredsFile, CheckCredsFile}, {EnvNKey, a.NKeyFile, CheckNKeyFile}, {EnvTLSCA, a.TLSCA, CheckCAFile}} {
		if err := f.check(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.env, err))
		}
	}
	if err := a.CheckTogether(urls); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckTogether is the part of [Auth.Check] that involves more than one
// setting (shared/config's rules): CredsFile with NKeyFile, either with
// user info in a URL, TLSCert without TLSKey (or the reverse), and the
// certificate and key read as a pair (a key that does not match, an
// expired certificate). Every problem at once (errors.Join), each error
// naming every setting it involves.
func (a Auth) CheckTogether(urls []string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if a.CredsFile != "" && a.NKeyFile != "" {
		bad("%s and %s: set one of them, not both", EnvCreds, EnvNKey)
	}
	if a.CredsFile != "" || a.NKeyFile != "" {
		for _, u := range urls {
			if p, err := parseURL(u); err == nil && p.User != nil {
				bad("%s: %s has a user or token, and %s: use one way to authenticate", EnvURL, RedactURL(u), authEnv(a))
			}
		}
	}
	switch {
	case a.TLSCert != "" && a.TLSKey == "":
		bad("%s: set, but %s (its private key) is empty", EnvTLSCert, EnvTLSKey)
	case a.TLSKey != "" && a.TLSCert == "":
		bad("%s: set, but %s (the client certificate) is empty", EnvTLSKey, EnvTLSCert)
	case a.TLSCert != "":
		if _, err := loadClientCert(a.TLSCert, a.TLSKey); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckCredsFile parses a .creds file (ELLIPSIS_NATS_CREDS); empty path:
// nil. The error names the path and the problem, not the setting, never
// the content ("/run/nats.creds: no such file").
func CheckCredsFile(path string) error {
	if path == "" {
		return nil
	}
	if err := checkCreds(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// CheckNKeyFile parses a user NKey seed file (ELLIPSIS_NATS_NKEY); empty
// path: nil. Errors as [CheckCredsFile]'s.
func CheckNKeyFile(path string) error {
	if path == "" {
		return nil
	}
	if err := checkNKey(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// CheckCAFile parses a PEM file of CA certificates (ELLIPSIS_NATS_TLS_CA);
// empty path: nil. Errors as [CheckCredsFile]'s.
func CheckCAFile(path string) error {
	if path == "" {
		return nil
	}
	_, err := readCA(path)
	return err
}

func authEnv(a Auth) string {
	if a.CredsFile != "" {
		return EnvCreds
	}
	return EnvNKey
}

// options returns the nats.go options for a, after [Auth.Check] passed.
// The .creds and TLS files are re-read at every (re)connect; the NKey
// seed file too, but its public key is the one read here (see
// [nkeyOption]).
func (a Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.CredsFile != "" {
		opts = append(opts, credsOption(a.CredsFile))
	}
	if a.NKeyFile != "" {
		o, err := nkeyOption(a.NKeyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	if a.TLS() {
		var certCB nats.TLSCertHandler
		var caCB nats.RootCAsHandler
		if a.TLSCert != "" {
			certCB = func() (tls.Certificate, error) { return loadClientCert(a.TLSCert, a.TLSKey) }
		}
		if a.TLSCA != "" {
			caCB = func() (*x509.CertPool, error) { return loadCA(a.TLSCA) }
		}
		if certCB == nil && caCB == nil {
			// Cannot happen after Check (TLSKey alone is refused), but
			// nats.ClientTLSConfig needs one of them.
			return nil, fmt.Errorf("%s: set without %s", EnvTLSKey, EnvTLSCert)
		}
		opts = append(opts, nats.ClientTLSConfig(certCB, caCB))
	}
	return opts, nil
}

// credsOption is nats.UserCredentials reading the file through readFile
// (regular files only, bounded) at every (re)connect: nats.go reads it
// with os.ReadFile while it holds its connection lock, so a .creds file
// replaced by a FIFO after start blocked every Publish of the service.
// Errors name the setting and the path, never the content.
func credsOption(path string) nats.Option {
	bad := func(err error) error { return fmt.Errorf("%s: %s: %w", EnvCreds, path, err) }
	userJWT := func() (string, error) {
		b, err := readFile(path)
		if err != nil {
			return "", bad(err)
		}
		defer wipe(b)
		// Without the block, ParseDecoratedJWT returns the whole file,
		// which nats.go would send as the JWT.
		if !strings.Contains(string(b), "-----BEGIN NATS USER JWT-----") {
			return "", bad(errors.New("not a NATS .creds file: no \"-----BEGIN NATS USER JWT-----\" block"))
		}
		token, err := nkeys.ParseDecoratedJWT(b)
		if err != nil {
			return "", bad(errors.New("not a NATS .creds file: its user JWT block cannot be read"))
		}
		return token, nil
	}
	sign := func(nonce []byte) ([]byte, error) {
		b, err := readFile(path)
		if err != nil {
			return nil, bad(err)
		}
		defer wipe(b)
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			return nil, bad(errors.New("no user NKey seed block in it (\"-----BEGIN USER NKEY SEED-----\")"))
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	}
	return nats.UserJWT(userJWT, sign)
}

// nkeyOption is nats.NkeyOptionFromSeed with a clear error for a changed
// seed. nats.go takes the public key once (nats.Nkey has no per-connect
// hook for it) and calls the returned signature callback at every
// (re)connect; the callback re-reads the seed file and, if its key is no
// longer the one read at start, refuses to sign ("... changed since
// start: restart"), instead of signing with a key the server would
// refuse under the old name. So an NKey seed change needs a restart.
func nkeyOption(path string) (nats.Option, error) {
	bad := func(err error) error { return fmt.Errorf("%s: %s: %w", EnvNKey, path, err) }
	kp, err := readNKey(path)
	if err != nil {
		return nil, bad(err)
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		return nil, bad(err)
	}
	sign := func(nonce []byte) ([]byte, error) {
		kp, err := readNKey(path)
		if err != nil {
			return nil, bad(err)
		}
		defer kp.Wipe()
		if now, err := kp.PublicKey(); err != nil || now != pub {
			return nil, bad(fmt.Errorf("the seed changed since start (user %s, started as %s); "+
				"an NKey seed is read at start only: restart to use the new one", now, pub))
		}
		return kp.Sign(nonce)
	}
	return nats.Nkey(pub, sign), nil
}

// readNKey reads a user NKey seed file (bare or decorated) into a key
// pair, which the caller wipes. Errors as [CheckNKeyFile]'s, without the
// path.
func readNKey(path string) (nkeys.KeyPair, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, errors.New("no NKey seed in it (want one line starting with SU, as made by `nk -gen user`)")
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		kp.Wipe()
		return nil, errors.New("its NKey seed is not a user seed (SU...)")
	}
	return kp, nil
}

// readFile reads path, at most maxFileBytes, opening it once: a path that
// is not a regular file (a directory, a FIFO, /dev/zero) is refused
// without reading it (opened non-blocking, so a FIFO without a writer
// does not hang), and the read stops after maxFileBytes+1 bytes, so a
// file that grows after the check cannot make it read more. Its errors
// name the problem and the limit, never the content; the callers prefix
// the setting and the path.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fileErr(err)
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, fileErr(err)
	case st.IsDir():
		return nil, errors.New("is a directory, not a file")
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("is not a regular file (%s)", st.Mode().Type())
	case st.Size() > maxFileBytes:
		return nil, fmt.Errorf("is %d bytes, more than the %d bytes a credentials file can be", st.Size(), maxFileBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		wipe(b)
		return nil, fileErr(err)
	}
	if len(b) > maxFileBytes {
		wipe(b)
		return nil, fmt.Errorf("is more than the %d bytes a credentials file can be", maxFileBytes)
	}
	return b, nil
}

// fileErr names what went wrong opening or reading a file.
func fileErr(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file")
	case errors.Is(err, os.ErrPermission):
		return errors.New("not readable: permission denied")
	}
	return fmt.Errorf("not readable: %w", err)
}

// wipe overwrites b (a file holding a seed) once it is parsed.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// checkCreds parses a .creds file: a decorated user JWT (signature checked,
// not expired) and the user's decorated NKey seed.
func checkCreds(path string) error {
	b, err := readFile(path)
	if err != nil {
		return err
	}
	defer wipe(b)
	if !strings.Contains(string(b), "-----BEGIN NATS USER JWT-----") {
		return errors.New("not a NATS .creds file: no \"-----BEGIN NATS USER JWT-----\" block (make one with `nsc generate creds`)")
	}
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return errors.New("not a NATS .creds file: its user JWT block cannot be read")
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return errors.New("its user JWT is malformed or its signature does not verify")
	}
	if claims.Expires > 0 && time.Unix(claims.Expires, 0).Before(time.Now()) {
		return fmt.Errorf("its user JWT expired at %s", time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return errors.New("no user NKey seed block in it (\"-----BEGIN USER NKEY SEED-----\")")
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return errors.New("its NKey seed is not a user seed (SU...)")
	}
	if pub != claims.Subject {
		return fmt.Errorf("its NKey seed is user %s but its JWT is for user %s", pub, claims.Subject)
	}
	return nil
}

// checkNKey parses a file holding a user NKey seed (bare or decorated).
func checkNKey(path string) error {
	kp, err := readNKey(path)
	if err != nil {
		return err
	}
	kp.Wipe()
	return nil
}

// loadClientCert loads a PEM certificate and key; errors name the setting.
func loadClientCert(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %s: %w", EnvTLSCert, certFile, err)
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %s: %w", EnvTLSKey, keyFile, err)
	}
	defer wipe(keyPEM)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls's messages name the problem, never the key.
		return tls.Certificate{}, fmt.Errorf("%s and %s: %s and %s are not a PEM certificate and its private key: %w", EnvTLSCert, EnvTLSKey, certFile, keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s: %s: %w", EnvTLSCert, certFile, err)
		}
		cert.Leaf = leaf
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%s: %s: the certificate expired at %s", EnvTLSCert, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// loadCA loads a PEM file of one or more CA certificates; errors name the
// setting.
func loadCA(path string) (*x509.CertPool, error) {
	pool, err := readCA(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvTLSCA, err)
	}
	return pool, nil
}

// readCA is loadCA without the setting's name in its errors.
func readCA(path string) (*x509.CertPool, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// RedactURL hides the user info of a NATS URL, which is a password or a
// token: nats://alice:s3cret@h:4222 and nats://s3cret@h:4222 both become
// nats://xxxxx@h:4222 (url.URL.Redacted keeps a token, which is the user
// name). A URL without "://" is read as nats.go reads it, with nats://
// in front, and returned without it (alice:s3cret@h:4222 becomes
// xxxxx@h:4222; url.Parse alone would take "alice" for the scheme and
// keep the password). A string that is not a URL is returned as
// "(unparsable URL)" when it holds an '@', else unchanged.
func RedactURL(raw string) string {
	u, err := parseURL(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return "(unparsable URL)"
		}
		return raw
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if s := strings.TrimSpace(raw); !strings.Contains(s, "://") {
		return strings.TrimPrefix(u.String(), "nats://")
	}
	return u.String()
}

// parseURL parses one NATS URL as nats.go does: without "://" it is
// nats://raw (so alice:s3cret@h:4222 has user alice, not scheme alice).
func parseURL(raw string) (*url.URL, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	return url.Parse(s)
}

// RedactURLs applies [RedactURL] to each URL of a comma-separated list
// (ELLIPSIS_NATS_URL) and joins them again with ",".
func RedactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = RedactURL(p)
	}
	return strings.Join(parts, ",")
}

package natsconn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// waitFor is how long a test waits for a connection or an error to show
// (polled; the machine is noisy, nothing is timed as a pass condition).
const waitFor = 20 * time.Second

func newLogger() (*zap.Logger, *testkit.SyncBuffer) {
	buf := &testkit.SyncBuffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), buf, zapcore.DebugLevel)
	return zap.New(core), buf
}

// startServer runs an embedded nats-server with o (port and logging set
// here) until the test ends.
func startServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.Port = "127.0.0.1", -1
	o.NoLog, o.NoSigs = true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(waitFor) {
		s.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func addr(s *server.Server) string { return s.Addr().(*net.TCPAddr).String() }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// connectOK connects with o (capturing logs), waits until connected and
// checks that a message published reaches a subscriber on the same
// connection, through the server.
func connectOK(t *testing.T, o Options) (*Conn, *testkit.SyncBuffer) {
	t.Helper()
	log, buf := newLogger()
	o.Log, o.Name = log, "natsconn-test"
	c, err := Connect(o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.NC.Close)
	deadline := time.Now().Add(waitFor)
	for !c.Connected() {
		if time.Now().After(deadline) {
			t.Fatalf("not connected within %s: %s; logs:\n%s", waitFor, c.Status(), buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sub, err := c.NC.SubscribeSync("natsconn.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.NC.Publish("natsconn.test", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(waitFor)
	if err != nil || string(msg.Data) != "hello" {
		t.Fatalf("pub/sub: %v %v", msg, err)
	}
	if !strings.Contains(buf.String(), "nats connected") {
		t.Fatalf("no connect log line:\n%s", buf)
	}
	return c, buf
}

// refused connects with o to a server that must refuse it, and returns
// what the service would show: the status, the logs and Probe's error.
// want must appear in the status and in Probe's error.
func refused(t *testing.T, o Options, want string) (status, logs string, probeErr error) {
	t.Helper()
	log, buf := newLogger()
	o.Log, o.Name = log, "natsconn-test"
	c, err := Connect(o)
	if err != nil {
		t.Fatalf("Connect with valid files but wrong credentials must return at once and retry, got %v", err)
	}
	defer c.NC.Close()
	deadline := time.Now().Add(waitFor)
	for {
		status = c.Status()
		if strings.Contains(strings.ToLower(status), want) {
			break
		}
		if c.Connected() {
			t.Fatalf("connected with wrong credentials")
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %q never showed %q; logs:\n%s", status, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
	probeErr = Probe(o.URLs, o.Auth, "natsconn-test probe", 5*time.Second)
	if probeErr == nil || !strings.Contains(strings.ToLower(probeErr.Error()), want) {
		t.Fatalf("Probe: got %v, want an error with %q", probeErr, want)
	}
	// The log says what is wrong, also when the service never connected
	// (nats.go reports no async error before the first connect).
	for !strings.Contains(strings.ToLower(buf.String()), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line says %q:\n%s", want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return status, buf.String(), probeErr
}

// noSecrets fails when any of secrets appears in any of texts.
func noSecrets(t *testing.T, texts []string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if len(s) < 6 {
			t.Fatalf("secret %q too short to search for", s)
		}
		for _, txt := range texts {
			if strings.Contains(txt, s) {
				t.Errorf("secret %.8s... leaked in %q", s, txt)
			}
		}
	}
}

func TestTokenAndPassword(t *testing.T) {
	const token = "t0ken-s3cret-value"
	s := startServer(t, &server.Options{Authorization: token})
	c, logs := connectOK(t, Options{URLs: []string{"nats://" + token + "@" + addr(s)}})
	status, badLogs, perr := refused(t, Options{URLs: []string{"nats://wrong-t0ken-value@" + addr(s)}}, "authorization violation")
	noSecrets(t, []string{logs.String(), c.Status(), badLogs, status, perr.Error()}, token, "wrong-t0ken-value")
	if !strings.Contains(badLogs, "refused the credentials") {
		t.Errorf("no log line says the credentials were refused:\n%s", badLogs)
	}

	const pass = "pa55word-s3cret"
	s2 := startServer(t, &server.Options{Username: "ellipsis", Password: pass})
	c2, logs2 := connectOK(t, Options{URLs: []string{"nats://ellipsis:" + pass + "@" + addr(s2)}})
	status, badLogs, perr = refused(t, Options{URLs: []string{"nats://ellipsis:wrong-pa55word@" + addr(s2)}}, "authorization violation")
	noSecrets(t, []string{logs2.String(), c2.Status(), badLogs, status, perr.Error()}, pass, "wrong-pa55word")
}

func TestNKey(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	s := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	seedFile := writeFile(t, "user.nk", string(seed)+"\n")
	c, logs := connectOK(t, Options{URLs: []string{"nats://" + addr(s)}, Auth: Auth{NKeyFile: seedFile}})

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	status, badLogs, perr := refused(t, Options{URLs: []string{"nats://" + addr(s)}, Auth: Auth{NKeyFile: writeFile(t, "other.nk", string(otherSeed))}}, "authorization violation")
	noSecrets(t, []string{logs.String(), c.Status(), badLogs, status, perr.Error()}, string(seed), string(otherSeed))
}

// TestNKeyRotation: nats.go presents the public key read at start, so a
// changed seed file cannot be used before a restart; reconnects then fail
// with an error that says so (not a bare "authorization violation", which
// is what signing with the new key under the old name gives), although
// the server knows both users, and work again once the old seed is back.
func TestNKeyRotation(t *testing.T) {
	oldKP, _ := nkeys.CreateUser()
	oldPub, _ := oldKP.PublicKey()
	oldSeed, _ := oldKP.Seed()
	newKP, _ := nkeys.CreateUser()
	newPub, _ := newKP.PublicKey()
	newSeed, _ := newKP.Seed()
	s := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: oldPub}, {Nkey: newPub}}})
	seedFile := writeFile(t, "user.nk", string(oldSeed)+"\n")
	c, logs := connectOK(t, Options{URLs: []string{"nats://" + addr(s)}, Auth: Auth{NKeyFile: seedFile}})

	if err := os.WriteFile(seedFile, append(newSeed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.NC.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for st := c.Status(); !strings.Contains(st, "restart"); st = c.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status %q never said the seed changed; logs:\n%s", st, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.Status(); !strings.Contains(st, EnvNKey) || !strings.Contains(st, seedFile) {
		t.Errorf("status %q does not name %s and the file", st, EnvNKey)
	}

	if err := os.WriteFile(seedFile, oldSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	for !c.Connected() {
		if time.Now().After(deadline.Add(waitFor)) {
			t.Fatalf("not reconnected with the old seed back: %s", c.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	noSecrets(t, []string{logs.String(), c.Status()}, string(oldSeed), string(newSeed))
}

// operator makes an operator, an account and a server trusting them
// (operator mode, memory resolver); user mints .creds files for users of
// the account.
type operator struct {
	srv     *server.Server
	account nkeys.KeyPair
}

func newOperator(t *testing.T) *operator {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "ellipsis-test"
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ocd, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "APP"
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{ocd}, AccountResolver: res})
	return &operator{srv: s, account: akp}
}

// creds returns a .creds file's content for a new user signed by signer
// (the account, or another key to make a user the server does not know),
// expiring at exp (zero: never), and the user's JWT and seed.
func creds(t *testing.T, signer nkeys.KeyPair, exp time.Time) (content, userJWT, seed string) {
	t.Helper()
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "gateway"
	if !exp.IsZero() {
		uc.Expires = exp.Unix()
	}
	ujwt, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), ujwt, string(useed)
}

func TestCreds(t *testing.T) {
	op := newOperator(t)
	url := "nats://" + addr(op.srv)
	content, ujwt, seed := creds(t, op.account, time.Now().Add(time.Hour))
	c, logs := connectOK(t, Options{URLs: []string{url}, Auth: Auth{CredsFile: writeFile(t, "user.creds", content)}})

	// A user of an account the server does not know.
	stranger, _ := nkeys.CreateAccount()
	badContent, badJWT, badSeed := creds(t, stranger, time.Time{})
	status, badLogs, perr := refused(t, Options{URLs: []string{url}, Auth: Auth{CredsFile: writeFile(t, "stranger.creds", badContent)}}, "authorization violation")
	noSecrets(t, []string{logs.String(), c.Status(), badLogs, status, perr.Error()}, ujwt, seed, badJWT, badSeed)
}

// pki is a test CA with a server and a client certificate.
type pki struct {
	caPEM, serverCert, serverKey, clientCert, clientKey []byte
	pool                                                *x509.CertPool
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP, notAfter time.Time) ([]byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.serverCert, p.serverKey = leaf(2, "nats", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now().Add(time.Hour))
	p.clientCert, p.clientKey = leaf(3, "ellipsis-gateway", x509.ExtKeyUsageClientAuth, nil, time.Now().Add(time.Hour))
	return p
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t, "platform")
	sc, err := tls.X509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &server.Options{
		TLS: true, TLSVerify: true, TLSTimeout: 5,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{sc}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	})
	url := "tls://" + addr(s)
	good := Auth{
		TLSCert: writeFile(t, "client.crt", string(p.clientCert)),
		TLSKey:  writeFile(t, "client.key", string(p.clientKey)),
		TLSCA:   writeFile(t, "ca.crt", string(p.caPEM)),
	}
	c, logs := connectOK(t, Options{URLs: []string{url}, Auth: good})
	if !c.NC.TLSRequired() {
		t.Fatal("connected without TLS")
	}

	// A client certificate from another CA: the server refuses the
	// handshake.
	other := newPKI(t, "other")
	bad := good
	bad.TLSCert = writeFile(t, "other.crt", string(other.clientCert))
	bad.TLSKey = writeFile(t, "other.key", string(other.clientKey))
	status, badLogs, perr := refused(t, Options{URLs: []string{url}, Auth: bad}, "tls")
	// No client certificate at all.
	status2, badLogs2, perr2 := refused(t, Options{URLs: []string{url}, Auth: Auth{TLSCA: good.TLSCA}}, "tls")
	noSecrets(t, []string{logs.String(), c.Status(), badLogs, status, perr.Error(), badLogs2, status2, perr2.Error()},
		pemBody(p.clientKey), pemBody(other.clientKey))
}

// pemBody is the base64 of a PEM block, without its armour lines.
func pemBody(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[1:len(lines)-1], "\n")
}

// TestBadFilesAtStart: every malformed setting is an error from Connect
// (before any dial) naming the setting, and no error holds a secret.
func TestBadFilesAtStart(t *testing.T) {
	op := newOperator(t)
	okCreds, okJWT, okSeed := creds(t, op.account, time.Time{})
	expired, expJWT, expSeed := creds(t, op.account, time.Now().Add(-time.Hour))
	// The seed of one user with the JWT of another.
	_, otherJWT, otherSeed := creds(t, op.account, time.Time{})
	mixed := strings.Replace(okCreds, okSeed, otherSeed, 1)
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	p := newPKI(t, "x")
	other := newPKI(t, "y")
	dir := t.TempDir()
	unreadable := writeFile(t, "unreadable.creds", okCreds)
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	cert := writeFile(t, "c.crt", string(p.clientCert))
	key := writeFile(t, "c.key", string(p.clientKey))
	url := "nats://127.0.0.1:1"
	cases := []struct {
		name string
		auth Auth
		urls []string
		want []string // all in the error
	}{
		{"creds missing", Auth{CredsFile: filepath.Join(dir, "nope.creds")}, nil, []string{EnvCreds, "nope.creds", "no such file"}},
		{"creds is a dir", Auth{CredsFile: dir}, nil, []string{EnvCreds, "directory"}},
		{"creds garbage", Auth{CredsFile: writeFile(t, "g.creds", "hello "+okSeed)}, nil, []string{EnvCreds, "not a NATS .creds file"}},
		{"creds without seed", Auth{CredsFile: writeFile(t, "j.creds", "-----BEGIN NATS USER JWT-----\n"+okJWT+"\n------END NATS USER JWT------\n")}, nil, []string{EnvCreds, "seed"}},
		{"creds bad jwt", Auth{CredsFile: writeFile(t, "b.creds", strings.Replace(okCreds, okJWT, okJWT[:len(okJWT)-4]+"AAAA", 1))}, nil, []string{EnvCreds, "JWT"}},
		{"creds expired", Auth{CredsFile: writeFile(t, "e.creds", expired)}, nil, []string{EnvCreds, "expired"}},
		{"creds mixed", Auth{CredsFile: writeFile(t, "m.creds", string(mixed))}, nil, []string{EnvCreds, "seed is user"}},
		{"creds and nkey", Auth{CredsFile: writeFile(t, "ok.creds", okCreds), NKeyFile: writeFile(t, "ok.nk", okSeed)}, nil, []string{EnvCreds + " and " + EnvNKey}},
		{"creds and token", Auth{CredsFile: writeFile(t, "ok2.creds", okCreds)}, []string{"nats://s3cret-t0ken@127.0.0.1:1"}, []string{EnvURL, EnvCreds, "xxxxx"}},
		{"nkey garbage", Auth{NKeyFile: writeFile(t, "g.nk", "not a seed at all")}, nil, []string{EnvNKey, "no NKey seed"}},
		{"nkey account seed", Auth{NKeyFile: writeFile(t, "a.nk", string(acctSeed))}, nil, []string{EnvNKey, "not a user seed"}},
		{"cert without key", Auth{TLSCert: cert}, nil, []string{EnvTLSCert, EnvTLSKey, "empty"}},
		{"key without cert", Auth{TLSKey: key}, nil, []string{EnvTLSKey, EnvTLSCert, "empty"}},
		{"key of another cert", Auth{TLSCert: cert, TLSKey: writeFile(t, "o.key", string(other.clientKey))}, nil, []string{EnvTLSCert, EnvTLSKey, "private key"}},
		{"cert garbage", Auth{TLSCert: writeFile(t, "g.crt", "garbage"), TLSKey: key}, nil, []string{EnvTLSCert, "g.crt"}},
		{"ca garbage", Auth{TLSCA: writeFile(t, "g.ca", "garbage")}, nil, []string{EnvTLSCA, "no PEM certificate"}},
		{"ca missing", Auth{TLSCA: filepath.Join(dir, "ca.pem")}, nil, []string{EnvTLSCA, "no such file"}},
	}
	if os.Geteuid() != 0 { // root reads a 0000 file
		cases = append(cases, struct {
			name string
			auth Auth
			urls []string
			want []string
		}{"creds unreadable", Auth{CredsFile: unreadable}, nil, []string{EnvCreds, "permission denied"}})
	}
	var texts []string
	for _, tc := range cases {
		urls := tc.urls
		if urls == nil {
			urls = []string{url}
		}
		log, buf := newLogger()
		c, err := Connect(Options{URLs: urls, Auth: tc.auth, Log: log})
		if err == nil {
			c.NC.Close()
			t.Errorf("%s: Connect accepted it", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
		if perr := Probe(urls, tc.auth, "probe", time.Second); perr == nil || perr.Error() != err.Error() {
			t.Errorf("%s: Probe gives %v, Connect %v", tc.name, perr, err)
		}
		texts = append(texts, err.Error(), buf.String())
	}
	noSecrets(t, texts, okJWT, okSeed, expJWT, expSeed, otherJWT, otherSeed, string(acctSeed), "s3cret-t0ken", pemBody(p.clientKey), pemBody(other.clientKey))
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://alice:s3cret@h:4222": "nats://xxxxx@h:4222",
		"tls://t0ken@h:4222":         "tls://xxxxx@h:4222",
		"nats://h:4222":              "nats://h:4222",
		"nats://a b@h:%zz":           "(unparsable URL)",
		// No scheme: nats.go adds nats://; url.Parse alone reads "alice"
		// as the scheme and would keep the password.
		"alice:s3cret@h:4222": "xxxxx@h:4222",
		"t0ken@h:4222":        "xxxxx@h:4222",
		" h:4222":             "h:4222",
		"127.0.0.1:4222":      "127.0.0.1:4222",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := RedactURLs("nats://a:b@h:1, nats://h2:2,u:pw@h3:3"); got != "nats://xxxxx@h:1,nats://h2:2,xxxxx@h3:3" {
		t.Errorf("RedactURLs = %q", got)
	}
	err := scrub(fmt.Errorf("dial nats://u:pw-s3cret@h:1: %w", nats.ErrAuthorization), []string{"nats://u:pw-s3cret@h:1"})
	if strings.Contains(err.Error(), "pw-s3cret") || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("scrub: %v", err)
	}
}

// TestScrub: scrub replaces whole URLs only (a one-letter token leaves
// the other words alone), also a URL without a scheme as given or with
// the nats:// nats.go adds, and any other scheme://user@ in the message.
func TestScrub(t *testing.T) {
	urls := []string{"nats://a@h:1", "alice:pw-s3cret@h2:2"}
	for in, want := range map[string]string{
		"nats: dial nats://a@h:1: authorization violation":  "nats: dial nats://xxxxx@h:1: authorization violation",
		"dial alice:pw-s3cret@h2:2 failed":                  "dial xxxxx@h2:2 failed",
		"dial nats://alice:pw-s3cret@h2:2 failed":           "dial nats://xxxxx@h2:2 failed",
		"read tls://bob:other-s3cret@h3:3/x: a bad day":     "read tls://xxxxx@h3:3/x: a bad day",
		"nats: no servers available for connection, a or b": "nats: no servers available for connection, a or b",
	} {
		err := scrub(fmt.Errorf("%s: %w", in, nats.ErrAuthorization), urls)
		if got := strings.TrimSuffix(err.Error(), ": "+nats.ErrAuthorization.Error()); got != want {
			t.Errorf("scrub(%q) = %q, want %q", in, got, want)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("scrub(%q) lost the wrapped error", in)
		}
	}
}

// TestDisconnectLoggedAndCounted: a server going away is counted as
// KindDisconnect and logged; the connection comes back by itself.
func TestDisconnectLoggedAndCounted(t *testing.T) {
	s := startServer(t, &server.Options{})
	var mu sync.Mutex
	kinds := map[string]int{}
	c, logs := connectOK(t, Options{URLs: []string{"nats://" + addr(s)}, OnError: func(k string) {
		mu.Lock()
		kinds[k]++
		mu.Unlock()
	}})
	s.Shutdown()
	deadline := time.Now().Add(waitFor)
	for {
		mu.Lock()
		n := kinds[KindDisconnect]
		mu.Unlock()
		if n > 0 && strings.Contains(logs.String(), "nats disconnected") && !c.Connected() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("disconnect not counted/logged: %v\n%s", kinds, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.Status(); !strings.HasPrefix(st, "RECONNECTING") {
		t.Fatalf("status %q", st)
	}
}

// TestCheckTogetherSchemeless: user info in a URL without a scheme
// (nats.go adds nats://) is seen, and not shown, with an NKey file.
func TestCheckTogetherSchemeless(t *testing.T) {
	err := Auth{NKeyFile: "/run/user.nk"}.CheckTogether([]string{"alice:pw-s3cret@h:4222"})
	if err == nil || !strings.Contains(err.Error(), EnvNKey) || strings.Contains(err.Error(), "pw-s3cret") {
		t.Fatalf("CheckTogether = %v, want the user info refused, not shown", err)
	}
}

// TestMaxPayloadObserved: MaxPayload is 0 while never connected and the
// server's max_payload once a connected status was read.
func TestMaxPayloadObserved(t *testing.T) {
	log, _ := newLogger()
	never, err := Connect(Options{URLs: []string{"nats://" + testkit.ClosedAddr(t)}, Log: log, Name: "natsconn-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(never.NC.Close)
	time.Sleep(3 * statusPoll)
	if n := never.MaxPayload(); n != 0 {
		t.Fatalf("MaxPayload never connected: %d, want 0", n)
	}

	s := startServer(t, &server.Options{MaxPayload: 300 << 10})
	c, _ := connectOK(t, Options{URLs: []string{"nats://" + addr(s)}})
	deadline := time.Now().Add(waitFor)
	for c.MaxPayload() != 300<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("MaxPayload %d, want %d", c.MaxPayload(), 300<<10)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

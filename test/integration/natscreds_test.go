package integration

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/testkit/inproc"
)

// operatorNATS starts an embedded nats-server in operator mode (memory
// resolver) with one account, and returns its URL and a function minting
// a .creds file for a new user of that account (known) or of an account
// the server does not know, with the user's JWT and seed.
func operatorNATS(t *testing.T) (url string, mint func(known bool) (path, userJWT, seed string)) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: res})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	dir := t.TempDir()
	n := 0
	mint = func(known bool) (string, string, string) {
		signer := akp
		if !known {
			signer, _ = nkeys.CreateAccount()
		}
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		useed, _ := ukp.Seed()
		ujwt, err := jwt.NewUserClaims(upub).Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(ujwt, useed)
		if err != nil {
			t.Fatal(err)
		}
		n++
		p := filepath.Join(dir, "user"+string(rune('0'+n))+".creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, ujwt, string(useed)
	}
	return "nats://" + s.Addr().(*net.TCPAddr).String(), mint
}

// TestServicesWithNATSCreds: a worker and a gateway given a .creds file
// (ELLIPSIS_NATS_CREDS) talk through an operator-mode NATS that admits no
// one else: typing flows end to end. With credentials the server refuses,
// the gateway still starts, /readyz says why NATS is down, and no log line
// or /readyz body holds the seed or the JWT.
func TestServicesWithNATSCreds(t *testing.T) {
	url, mint := operatorNATS(t)
	tok := testkit.RandHex(5)

	logs := &testkit.SyncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.InfoLevel))

	credsPath, ujwt, seed := mint(true)
	cfg := testConfig(t, "it-"+tok+":", "it"+tok)
	cfg.NATSURL, cfg.NATSCreds = url, credsPath
	cfg.LogLevel = "info"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, cfg: cfg, rdb: redis.NewClient(opt)}
	t.Cleanup(s.cleanup)
	s.svc = inproc.StartT(t, inproc.Options{Config: cfg, Workers: 1, Gateways: 1, GatewayIDSuffix: tok, Logger: log})
	s.gateways, s.workers = s.svc.Gateways, s.svc.Workers

	alice := dial(t, s.wsURL(0, "alice", "Alice"), "alice")
	bob := dial(t, s.wsURL(0, "bob", "Bob"), "bob")
	alice.join("r1")
	bob.join("r1")
	alice.start("r1")
	bob.next(isStart("r1", "alice"), 10*time.Second, "alice's typing_start through the operator-mode NATS")

	// A gateway with a user of an unknown account: refused, retrying.
	badPath, badJWT, badSeed := mint(false)
	bcfg := cfg
	bcfg.NATSCreds = badPath
	bcfg.GatewayID = "bad-" + tok
	bad := inproc.StartT(t, inproc.Options{Config: bcfg, Gateways: 1, GatewayIDSuffix: tok + "b", Logger: log})
	defer bad.ShutdownWithin(10 * time.Second)
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		body = httpGet(t, "http://"+bad.Gateways[0].AdminAddr()+"/readyz")
		if strings.Contains(strings.ToLower(body), "authorization violation") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never said why NATS is down: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for !strings.Contains(logs.String(), "nats refused the credentials") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line says the credentials were refused:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, secret := range []string{ujwt, seed, badJWT, badSeed} {
		if strings.Contains(logs.String(), secret) || strings.Contains(body, secret) {
			t.Errorf("secret %.10s... in the logs or /readyz", secret)
		}
	}

	// A bad file stops a service at start, naming the setting.
	broken := filepath.Join(t.TempDir(), "broken.creds")
	if err := os.WriteFile(broken, []byte("-----BEGIN NATS USER JWT-----\nnot a jwt\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cfg
	c.NATSCreds = broken
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_NATS_CREDS: "+broken) {
		t.Fatalf("Validate: %v", err)
	}
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

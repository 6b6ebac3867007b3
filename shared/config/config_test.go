package config

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func load(t *testing.T, vars map[string]string, args ...string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Load(fs, args, env(vars), Dev())
}

func TestDefaultsMatchProtocol(t *testing.T) {
	c := Default()
	if c.HTTPAddr != ":8080" || c.AdminAddr != ":9090" || c.NATSURL != "nats://127.0.0.1:4222" ||
		c.RedisURL != "redis://127.0.0.1:6379" || c.SubjectPrefix != "ellipsis" || c.KeyPrefix != "" ||
		c.Auth != "jwt" || c.Authz != "none" || c.TypingTTL != 5*time.Second || c.TypingThrottle != 2*time.Second ||
		c.ShutdownDrain != 5*time.Second || c.LameDuck != 3*time.Second || c.LogLevel != "info" || c.LogFormat != "json" ||
		c.MaxFrameBytes != 4096 || c.MaxRoomsPerConn != 100 || c.InboundRate != 20 || c.InboundBurst != 40 || c.OutboundQueue != 256 {
		t.Fatalf("defaults drifted from docs/protocol.md: %+v", c)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_JWT_SECRET") {
		t.Fatalf("production defaults must demand a JWT secret, got %v", err)
	}
	d := Dev()
	if err := d.Validate(); err != nil {
		t.Fatalf("dev defaults invalid: %v", err)
	}
}

func TestEnvThenFlags(t *testing.T) {
	c, err := load(t, map[string]string{
		"ELLIPSIS_TYPING_TTL":      "6s",
		"ELLIPSIS_REDIS_URL":       "redis://10.0.0.1:6379/2",
		"ELLIPSIS_ALLOWED_ORIGINS": "https://a.example.com, https://*.example.org",
		"ELLIPSIS_KEY_PREFIX":      "t1:",
	}, "-typing-ttl", "7s", "-log-level", "debug")
	if err != nil {
		t.Fatal(err)
	}
	if c.TypingTTL != 7*time.Second || c.LogLevel != "debug" || c.KeyPrefix != "t1:" || len(c.AllowedOrigins) != 2 {
		t.Fatalf("got %+v", c)
	}
	if !c.IsSet("ELLIPSIS_REDIS_URL") || c.IsSet("ELLIPSIS_NATS_URL") || !c.IsSet("ELLIPSIS_TYPING_TTL") || !c.IsSet("ELLIPSIS_LOG_LEVEL") {
		t.Fatal("IsSet does not track explicit settings")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := load(t, map[string]string{
		"ELLIPSIS_TYPING_TTL":      "2s",
		"ELLIPSIS_TYPING_THROTTLE": "3s",
		"ELLIPSIS_TYPING_REFRESH":  "4s",
		"ELLIPSIS_AUTH":            "magic",
		"ELLIPSIS_REDIS_URL":       "http://x",
		"ELLIPSIS_LOG_FORMAT":      "xml",
		"ELLIPSIS_MAX_FRAME_BYTES": "1",
		"ELLIPSIS_LAME_DUCK":       "-1s",
	})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		"ELLIPSIS_TYPING_THROTTLE (3s) must be below ELLIPSIS_TYPING_TTL (2s)",
		"ELLIPSIS_TYPING_REFRESH (4s) must be below ELLIPSIS_TYPING_TTL (2s)",
		"ELLIPSIS_TYPING_IDLE_STOP (3s) must be below ELLIPSIS_TYPING_TTL (2s)",
		`ELLIPSIS_AUTH: "magic"`,
		"ELLIPSIS_REDIS_URL",
		"ELLIPSIS_LOG_FORMAT",
		"ELLIPSIS_MAX_FRAME_BYTES: must be 1024..1048576, got 1",
		"ELLIPSIS_LAME_DUCK: must be 0s..5m0s, got -1s",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestLameDuck(t *testing.T) {
	for v, ok := range map[string]bool{"0s": true, "3s": true, "5m": true, "5m1s": false, "-1ms": false} {
		c, err := load(t, map[string]string{"ELLIPSIS_LAME_DUCK": v})
		if ok != (err == nil) {
			t.Errorf("ELLIPSIS_LAME_DUCK=%s: %v", v, err)
		}
		if d, _ := time.ParseDuration(v); ok && c.LameDuck != d {
			t.Errorf("ELLIPSIS_LAME_DUCK=%s: LameDuck %s", v, c.LameDuck)
		}
	}
}

func TestThrottleMustBeBelowRefresh(t *testing.T) {
	_, err := load(t, map[string]string{"ELLIPSIS_TYPING_THROTTLE": "4s"})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_TYPING_THROTTLE (4s) must be below ELLIPSIS_TYPING_REFRESH (4s)") {
		t.Fatalf("got %v", err)
	}
}

// The typing timers are whole milliseconds: the Lua scripts keep them in
// ms of Redis TIME, and clients get them as integer ms (GET /v1/config,
// ttl_ms). Validate refuses a fraction, for the worker too.
func TestTypingTimersAreWholeMilliseconds(t *testing.T) {
	for _, name := range []string{"ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_TYPING_REFRESH", "ELLIPSIS_TYPING_IDLE_STOP"} {
		c := Dev()
		c.Service = ServiceWorker
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := Load(fs, nil, env(map[string]string{name: "1500500us"}), c)
		if want := name + ": must be whole milliseconds, got 1.5005s"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=1500500us: %v, want %q", name, err, want)
		}
	}
}

func TestPubSubPingSettings(t *testing.T) {
	c, err := load(t, map[string]string{"ELLIPSIS_PUBSUB_PING_INTERVAL": "1s", "ELLIPSIS_PUBSUB_PING_TIMEOUT": "300ms"})
	if err != nil || c.PubSubPingInterval != time.Second || c.PubSubPingTimeout != 300*time.Millisecond {
		t.Fatalf("got %v, %v, %v", c.PubSubPingInterval, c.PubSubPingTimeout, err)
	}
	_, err = load(t, map[string]string{"ELLIPSIS_PUBSUB_PING_INTERVAL": "1s", "ELLIPSIS_PUBSUB_PING_TIMEOUT": "1s"})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_PUBSUB_PING_TIMEOUT (1s) must be below ELLIPSIS_PUBSUB_PING_INTERVAL (1s)") {
		t.Fatalf("got %v", err)
	}
	_, err = load(t, map[string]string{"ELLIPSIS_PUBSUB_PING_INTERVAL": "0s"})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_PUBSUB_PING_INTERVAL: must be at least 100ms") {
		t.Fatalf("got %v", err)
	}
}

func TestUnparsableValuesNameTheVariable(t *testing.T) {
	_, err := load(t, map[string]string{"ELLIPSIS_TYPING_TTL": "five", "ELLIPSIS_OUTBOUND_QUEUE": "lots"})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_TYPING_TTL: not a duration") || !strings.Contains(err.Error(), "ELLIPSIS_OUTBOUND_QUEUE: not an integer") {
		t.Fatalf("got %v", err)
	}
}

func TestFlagNames(t *testing.T) {
	if FlagName("ELLIPSIS_TYPING_TTL") != "typing-ttl" {
		t.Fatal(FlagName("ELLIPSIS_TYPING_TTL"))
	}
	names := EnvNames()
	for _, must := range []string{"ELLIPSIS_HTTP_ADDR", "ELLIPSIS_ADMIN_ADDR", "ELLIPSIS_NATS_URL", "ELLIPSIS_REDIS_URL", "ELLIPSIS_SUBJECT_PREFIX", "ELLIPSIS_KEY_PREFIX", "ELLIPSIS_AUTH", "ELLIPSIS_JWT_SECRET", "ELLIPSIS_JWKS_FILE", "ELLIPSIS_ALLOWED_ORIGINS", "ELLIPSIS_AUTHZ", "ELLIPSIS_TYPING_TTL", "ELLIPSIS_TYPING_THROTTLE", "ELLIPSIS_SHUTDOWN_DRAIN", "ELLIPSIS_LOG_LEVEL", "ELLIPSIS_LOG_FORMAT"} {
		found := false
		for _, n := range names {
			found = found || n == must
		}
		if !found {
			t.Errorf("docs/protocol.md's %s is not read", must)
		}
	}
}

func TestWorkerNeedsNoAuthSettings(t *testing.T) {
	base := Default()
	base.Service = ServiceWorker
	fs := flag.NewFlagSet("w", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Load(fs, nil, env(map[string]string{"ELLIPSIS_AUTH": "jwt"}), base); err != nil {
		t.Fatalf("worker config demands gateway settings: %v", err)
	}
	base.Service = ServiceGateway
	if _, err := Load(flag.NewFlagSet("g", flag.ContinueOnError), nil, env(nil), base); err == nil {
		t.Fatal("gateway config without a JWT secret accepted")
	}
}

func TestSecuritySettings(t *testing.T) {
	d := Default()
	if d.JWKSReload != 10*time.Second || d.JWTIssuer != "" || d.JWTAudience != nil || d.JWTLeeway != 0 ||
		d.AuthzTimeout != time.Second || d.AuthzCacheTTL != 30*time.Second || d.AuthzDenyCacheTTL != 2*time.Second ||
		d.InboundMaxRejected != 50 || d.MaxConns != 10000 || d.MaxConnsPerUser != 32 ||
		d.PongWait != 60*time.Second || d.WriteWait != 10*time.Second {
		t.Fatalf("security defaults drifted from docs/security.md: %+v", d)
	}
	c, err := load(t, map[string]string{
		"ELLIPSIS_AUTH":                 "jwt",
		"ELLIPSIS_JWKS_FILE":            "/etc/ellipsis/jwks.json",
		"ELLIPSIS_JWKS_RELOAD":          "2s",
		"ELLIPSIS_JWT_ISSUER":           "https://id.example.com",
		"ELLIPSIS_JWT_AUDIENCE":         "ellipsis, chat",
		"ELLIPSIS_JWT_LEEWAY":           "5s",
		"ELLIPSIS_AUTHZ":                "claims",
		"ELLIPSIS_AUTHZ_TIMEOUT":        "300ms",
		"ELLIPSIS_AUTHZ_CACHE_TTL":      "1m",
		"ELLIPSIS_AUTHZ_DENY_CACHE_TTL": "0s",
		"ELLIPSIS_INBOUND_MAX_REJECTED": "5",
		"ELLIPSIS_MAX_CONNS":            "100",
		"ELLIPSIS_MAX_CONNS_PER_USER":   "3",
		"ELLIPSIS_PONG_WAIT":            "20s",
		"ELLIPSIS_WRITE_WAIT":           "2s",
	}, "-max-conns", "200")
	if err != nil {
		t.Fatal(err)
	}
	if c.JWKSReload != 2*time.Second || c.JWTIssuer != "https://id.example.com" || len(c.JWTAudience) != 2 || c.JWTAudience[1] != "chat" ||
		c.JWTLeeway != 5*time.Second || c.AuthzTimeout != 300*time.Millisecond || c.AuthzCacheTTL != time.Minute ||
		c.AuthzDenyCacheTTL != 0 || c.InboundMaxRejected != 5 || c.MaxConns != 200 || c.MaxConnsPerUser != 3 ||
		c.PongWait != 20*time.Second || c.WriteWait != 2*time.Second {
		t.Fatalf("got %+v", c)
	}
}

func TestSecuritySettingsValidated(t *testing.T) {
	_, err := load(t, map[string]string{
		"ELLIPSIS_AUTHZ":                "claims", // needs auth=jwt; the dev base has none
		"ELLIPSIS_JWKS_FILE":            "/x.json",
		"ELLIPSIS_JWKS_RELOAD":          "1ms",
		"ELLIPSIS_JWT_LEEWAY":           "-1s",
		"ELLIPSIS_AUTHZ_TIMEOUT":        "0s",
		"ELLIPSIS_AUTHZ_CACHE_TTL":      "-1s",
		"ELLIPSIS_AUTHZ_DENY_CACHE_TTL": "-1s",
		"ELLIPSIS_INBOUND_MAX_REJECTED": "0",
		"ELLIPSIS_MAX_CONNS":            "0",
		"ELLIPSIS_MAX_CONNS_PER_USER":   "0",
		"ELLIPSIS_PONG_WAIT":            "10ms",
		"ELLIPSIS_WRITE_WAIT":           "0s",
		"ELLIPSIS_KEY_PREFIX":           "app{1}:",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"ELLIPSIS_AUTHZ: claims reads the rooms claim of a JWT and needs ELLIPSIS_AUTH=jwt",
		"ELLIPSIS_JWKS_RELOAD: must be at least 100ms",
		"ELLIPSIS_JWT_LEEWAY: must be 0s..5m0s, got -1s",
		"ELLIPSIS_AUTHZ_TIMEOUT: must be 10ms..10s, got 0s",
		"ELLIPSIS_AUTHZ_CACHE_TTL: must not be negative",
		"ELLIPSIS_AUTHZ_DENY_CACHE_TTL: must not be negative",
		"ELLIPSIS_INBOUND_MAX_REJECTED: must be 1..100000, got 0",
		"ELLIPSIS_MAX_CONNS: must be 1..10000000, got 0",
		"ELLIPSIS_MAX_CONNS_PER_USER: must be 1..1000000, got 0",
		"ELLIPSIS_PONG_WAIT: must be 100ms..1h0m0s, got 10ms",
		"ELLIPSIS_WRITE_WAIT: must be at least 10ms",
		`ELLIPSIS_KEY_PREFIX: "app{1}:" must not contain '{' or '}'`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
	// The worker ignores the gateway's settings.
	base := Default()
	base.Service = ServiceWorker
	base.MaxConns = 0
	base.PongWait = 0
	if err := base.Validate(); err != nil {
		t.Fatalf("worker validates gateway settings: %v", err)
	}
}

// ELLIPSIS_JWKS_URL: https or loopback http, not with a file, and its
// reload, timeout and CA settings checked.
func TestJWKSURLSettings(t *testing.T) {
	gw := func(vars map[string]string) error {
		base := Default()
		base.Service = ServiceGateway
		fs := flag.NewFlagSet("g", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := Load(fs, nil, env(vars), base)
		return err
	}
	for _, u := range []string{"https://idp.example/.well-known/jwks.json", "http://127.0.0.1:8080/jwks", "http://localhost/jwks", "http://[::1]/jwks"} {
		if err := gw(map[string]string{"ELLIPSIS_JWKS_URL": u, "ELLIPSIS_JWKS_CA": "/ca.pem", "ELLIPSIS_JWKS_TIMEOUT": "2s"}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	if d := Default(); d.JWKSTimeout != 5*time.Second || d.JWKSURL != "" || d.JWKSCA != "" {
		t.Errorf("defaults %s %q %q", d.JWKSTimeout, d.JWKSURL, d.JWKSCA)
	}
	for vars, want := range map[*map[string]string]string{
		{"ELLIPSIS_JWKS_URL": "http://idp.example/jwks"}:                                         "ELLIPSIS_JWKS_URL: \"http://idp.example/jwks\" must use https",
		{"ELLIPSIS_JWKS_URL": "https:///jwks"}:                                                   "ELLIPSIS_JWKS_URL: \"https:///jwks\" has no host",
		{"ELLIPSIS_JWKS_URL": "https://idp.example/jwks", "ELLIPSIS_JWKS_FILE": "/x.json"}:       "ELLIPSIS_JWKS_FILE and ELLIPSIS_JWKS_URL: set one of them, not both",
		{"ELLIPSIS_JWKS_URL": "https://idp.example/jwks", "ELLIPSIS_JWKS_RELOAD": "500ms"}:       "ELLIPSIS_JWKS_RELOAD: must be at least 1s with ELLIPSIS_JWKS_URL",
		{"ELLIPSIS_JWKS_URL": "https://idp.example/jwks", "ELLIPSIS_JWKS_TIMEOUT": "0s"}:         "ELLIPSIS_JWKS_TIMEOUT: must be 10ms..15s, got 0s",
		{"ELLIPSIS_JWT_SECRET": "s", "ELLIPSIS_JWKS_CA": "/ca.pem"}:                              "ELLIPSIS_JWKS_CA: only used with ELLIPSIS_JWKS_URL",
		{"ELLIPSIS_JWKS_URL": "http://user:pw@idp.example/jwks", "ELLIPSIS_JWKS_TIMEOUT": "16s"}: "ELLIPSIS_JWKS_TIMEOUT: must be 10ms..15s, got 16s",
	} {
		err := gw(*vars)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want %q", *vars, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
}

func TestRedisTopologiesAndPubSub(t *testing.T) {
	for url, want := range map[string]string{
		"redis://127.0.0.1:6379":                             "classic",
		"redis+sentinel://s:26379?master_name=mymaster":      "classic",
		"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001": "sharded",
	} {
		c, err := load(t, map[string]string{"ELLIPSIS_REDIS_URL": url})
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := c.RedisPubSubMode(); got != want {
			t.Fatalf("%s: pubsub mode %q, want %q", url, got, want)
		}
		c, err = load(t, map[string]string{"ELLIPSIS_REDIS_URL": url, "ELLIPSIS_REDIS_PUBSUB": "sharded"})
		if err != nil || c.RedisPubSubMode() != "sharded" {
			t.Fatalf("%s with sharded: %v %q", url, err, c.RedisPubSubMode())
		}
	}
	for vars, want := range map[[2]string]string{
		{"ELLIPSIS_REDIS_PUBSUB", "fast"}:                    "ELLIPSIS_REDIS_PUBSUB: \"fast\" must be empty, classic or sharded",
		{"ELLIPSIS_REDIS_URL", "redis+sentinel://s:1"}:       "ELLIPSIS_REDIS_URL: \"redis+sentinel://s:1\": a Sentinel URL needs master_name",
		{"ELLIPSIS_REDIS_URL", "redis+cluster://u:pw@c:1/2"}: "no database path",
	} {
		_, err := load(t, map[string]string{vars[0]: vars[1]})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v: got %v, want %q", vars, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Fatalf("password leaked: %v", err)
		}
	}
	c := Dev()
	c.RedisURL = "redis+cluster://c:1"
	c.Store = StoreKeys
	c.Service = ServiceWorker
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_STORE: keys does not run on Redis Cluster") {
		t.Fatalf("keys store on cluster: %v", err)
	}
}

func TestSnapshotMax(t *testing.T) {
	if c, err := load(t, nil); err != nil || c.SnapshotMax != 100 {
		t.Fatalf("default: %d, %v", c.SnapshotMax, err)
	}
	if c, err := load(t, map[string]string{"ELLIPSIS_SNAPSHOT_MAX": "1"}); err != nil || c.SnapshotMax != 1 {
		t.Fatalf("1: %d, %v", c.SnapshotMax, err)
	}
	for v, want := range map[string]string{
		"0":    "ELLIPSIS_SNAPSHOT_MAX: must be 1..500, got 0",
		"501":  "ELLIPSIS_SNAPSHOT_MAX: must be 1..500, got 501",
		"many": "ELLIPSIS_SNAPSHOT_MAX: not an integer",
	} {
		if _, err := load(t, map[string]string{"ELLIPSIS_SNAPSHOT_MAX": v}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", v, err, want)
		}
	}
}

// TestProtocolDocNamesAreRead keeps docs/protocol.md and the code together:
// every ELLIPSIS_ setting the contract names is one the services read.
func TestProtocolDocNamesAreRead(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, n := range EnvNames() {
		read[n] = true
	}
	named := regexp.MustCompile(`ELLIPSIS_[A-Z0-9_]*[A-Z0-9]`).FindAllString(string(doc), -1)
	if len(named) < 20 {
		t.Fatalf("docs/protocol.md names only %d settings; is it the contract?", len(named))
	}
	for _, n := range named {
		if !read[n] {
			t.Errorf("docs/protocol.md names %s, which no service reads", n)
		}
	}
}

// TestConfigurationTable fails when docs/configuration.md's table is not
// the one the settings table renders.
func TestConfigurationTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := UpdateTable(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(b) {
		t.Fatalf("docs/configuration.md's table differs from shared/config/settings.go's table; regenerate it with `make config-doc` (or `cd shared && go generate ./config`)")
	}
}

// TestEveryFieldHasOneEntry: each Config field (but Service) is bound by
// exactly one entry of the table, and each entry by a field of its own.
func TestEveryFieldHasOneEntry(t *testing.T) {
	var c Config
	bound := map[uintptr]string{}
	for _, s := range c.table() {
		p := reflect.ValueOf(s.V).Elem().FieldByName("p").Pointer()
		if prev, dup := bound[p]; dup {
			t.Errorf("%s and %s bind the same field", prev, s.Env)
		}
		bound[p] = s.Env
		if s.Doc == "" || s.For == 0 || !strings.HasPrefix(s.Env, "ELLIPSIS_") {
			t.Errorf("%s: incomplete entry (doc %q, read by %v)", s.Env, s.Doc, s.For)
		}
	}
	rt := reflect.TypeOf(c)
	base := uintptr(unsafe.Pointer(&c))
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Name == "Service" || f.Name == "set" {
			continue
		}
		if _, ok := bound[base+f.Offset]; !ok {
			t.Errorf("Config.%s is in no entry of the settings table", f.Name)
		}
	}
}

// TestDevValuesParse: Dev differs from Default exactly by the table's Dev
// values, and Dev() validates.
func TestDevValuesParse(t *testing.T) {
	d, p := Dev(), Default()
	if d.Auth != AuthNone || d.LogFormat != "console" || d.LameDuck != 0 || p.LameDuck != 3*time.Second {
		t.Fatalf("dev %+v", d)
	}
	for _, s := range Settings() {
		if s.Default() != s.V.String() {
			t.Errorf("%s: Settings() not bound to the defaults: %q vs %q", s.Env, s.V.String(), s.Default())
		}
	}
}

// TestNATSCredentialSettings: the credential settings are read, and a bad
// file is an error of Load naming its setting (the files themselves are
// tested in package natsconn).
func TestNATSCredentialSettings(t *testing.T) {
	dir := t.TempDir()
	_, err := load(t, map[string]string{
		"ELLIPSIS_NATS_CREDS":    filepath.Join(dir, "missing.creds"),
		"ELLIPSIS_NATS_TLS_CERT": filepath.Join(dir, "client.crt"),
	})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_NATS_CREDS: ") || !strings.Contains(err.Error(), "missing.creds: no such file") ||
		!strings.Contains(err.Error(), "ELLIPSIS_NATS_TLS_CERT: set, but ELLIPSIS_NATS_TLS_KEY") {
		t.Fatalf("got %v", err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, nil, "-nats-tls-ca", ca); err == nil || !strings.Contains(err.Error(), "ELLIPSIS_NATS_TLS_CA: "+ca+": no PEM certificate") {
		t.Fatalf("flag: got %v", err)
	}
	c := Default()
	c.NATSCreds, c.NATSNKey, c.NATSTLSCert, c.NATSTLSKey, c.NATSTLSCA = "a", "b", "c", "d", "e"
	if a := c.NATSAuth(); a.CredsFile != "a" || a.NKeyFile != "b" || a.TLSCert != "c" || a.TLSKey != "d" || a.TLSCA != "e" {
		t.Fatalf("NATSAuth = %+v", a)
	}
}

// TestSecretsNotShown: neither -h nor an error shows the JWT secret, a
// NATS password or token, or a Redis password.
func TestSecretsNotShown(t *testing.T) {
	vars := map[string]string{
		"ELLIPSIS_JWT_SECRET": "jwt-s3cret-value",
		"ELLIPSIS_NATS_URL":   "nats://nats-t0ken-value@127.0.0.1:4222,nats://u:nats-passw0rd@127.0.0.1:4223,tcp://u:nats-passw0rd@h:1,alice:nats-nosch3me@h:2",
		"ELLIPSIS_REDIS_URL":  "redis://:redis-passw0rd@127.0.0.1:6379",
	}
	var out strings.Builder
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&out)
	_, err := Load(fs, []string{"-h"}, env(vars), Dev())
	if err == nil || !strings.Contains(out.String(), "ELLIPSIS_JWT_SECRET, now \"(set)\"") {
		t.Fatalf("-h: %v\n%s", err, out.String())
	}
	_, verr := load(t, vars)
	if verr == nil || !strings.Contains(verr.Error(), "ELLIPSIS_NATS_URL") {
		t.Fatalf("the bad URL was accepted: %v", verr)
	}
	for _, secret := range []string{"jwt-s3cret-value", "nats-t0ken-value", "nats-passw0rd", "nats-nosch3me", "redis-passw0rd"} {
		if strings.Contains(out.String(), secret) || strings.Contains(verr.Error(), secret) {
			t.Errorf("%s shown:\n%s\n%v", secret, out.String(), verr)
		}
	}
}

// A duration that would busy-loop a timer or ticker (1ns) is refused with
// the setting's floor, whatever the setting.
func TestDurationFloors(t *testing.T) {
	for env, floor := range map[string]string{
		"ELLIPSIS_SWEEP_INTERVAL":       "10ms..500ms",
		"ELLIPSIS_SNAPSHOT_TIMEOUT":     "10ms..10s",
		"ELLIPSIS_AUTHZ_TIMEOUT":        "10ms..10s",
		"ELLIPSIS_PUBSUB_PING_INTERVAL": "at least 100ms",
		"ELLIPSIS_PUBSUB_PING_TIMEOUT":  "at least 10ms",
		"ELLIPSIS_WRITE_WAIT":           "at least 10ms",
	} {
		_, err := load(t, map[string]string{env: "1ns"})
		if want := env + ": must be " + floor + ", got 1ns"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=1ns: got %v, want an error containing %q", env, err, want)
		}
	}
}

// The gateway's rules across timings: a join's authorisation runs within
// the snapshot timeout, and a client refreshing one room every refresh_ms
// stays within the inbound rate. Each error names both settings.
func TestGatewayTimingRules(t *testing.T) {
	_, err := load(t, map[string]string{
		"ELLIPSIS_AUTHZ": "nats", "ELLIPSIS_AUTHZ_TIMEOUT": "3s", "ELLIPSIS_SNAPSHOT_TIMEOUT": "2s",
		"ELLIPSIS_TYPING_THROTTLE": "5ms", "ELLIPSIS_TYPING_REFRESH": "10ms", "ELLIPSIS_INBOUND_RATE": "20",
	})
	for _, want := range []string{
		"ELLIPSIS_AUTHZ_TIMEOUT (3s) must be at most ELLIPSIS_SNAPSHOT_TIMEOUT (2s)",
		"ELLIPSIS_TYPING_REFRESH (10ms) must be at least 1/ELLIPSIS_INBOUND_RATE (50ms)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	// Without authz nats the authz timeout is not read; a rate of 100/s
	// allows a 10 ms refresh.
	if _, err := load(t, map[string]string{"ELLIPSIS_AUTHZ_TIMEOUT": "3s", "ELLIPSIS_TYPING_THROTTLE": "5ms",
		"ELLIPSIS_TYPING_REFRESH": "10ms", "ELLIPSIS_INBOUND_RATE": "100"}); err != nil {
		t.Fatal(err)
	}
}

func TestRoomSummarySettings(t *testing.T) {
	c, err := load(t, map[string]string{"ELLIPSIS_ROOM_SUMMARY_MEMBERS": "2000", "ELLIPSIS_ROOM_SUMMARY_INTERVAL": "250ms"})
	if err != nil || c.RoomSummaryMembers != 2000 || c.RoomSummaryInterval != 250*time.Millisecond {
		t.Fatalf("got %v, %v, %v", c.RoomSummaryMembers, c.RoomSummaryInterval, err)
	}
	for env, val := range map[string]string{"ELLIPSIS_ROOM_SUMMARY_MEMBERS": "0", "ELLIPSIS_ROOM_SUMMARY_INTERVAL": "10ms"} {
		_, err := load(t, map[string]string{env: val})
		if err == nil || !strings.Contains(err.Error(), env+": must be") {
			t.Fatalf("%s=%s: got %v", env, val, err)
		}
		t.Logf("%s=%s: %v", env, val, err)
	}
}

func TestWatchSettings(t *testing.T) {
	c, err := load(t, nil)
	if err != nil || c.MaxWatchedRooms != 500 || c.WatchInterval != 2*time.Second {
		t.Fatalf("defaults: got %v, %v, %v", c.MaxWatchedRooms, c.WatchInterval, err)
	}
	c, err = load(t, map[string]string{"ELLIPSIS_MAX_WATCHED_ROOMS": "0", "ELLIPSIS_WATCH_INTERVAL": "100ms"})
	if err != nil || c.MaxWatchedRooms != 0 || c.WatchInterval != 100*time.Millisecond {
		t.Fatalf("got %v, %v, %v", c.MaxWatchedRooms, c.WatchInterval, err)
	}
	for env, val := range map[string]string{"ELLIPSIS_MAX_WATCHED_ROOMS": "10001", "ELLIPSIS_WATCH_INTERVAL": "99ms"} {
		_, err := load(t, map[string]string{env: val})
		if err == nil || !strings.Contains(err.Error(), env+": must be") {
			t.Fatalf("%s=%s: got %v", env, val, err)
		}
	}
}

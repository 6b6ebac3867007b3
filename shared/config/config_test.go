package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
		c.ShutdownDrain != 5*time.Second || c.LogLevel != "info" || c.LogFormat != "json" ||
		c.MaxFrameBytes != 4096 || c.MaxRoomsPerConn != 100 || c.InboundRate != 20 || c.InboundBurst != 40 || c.OutboundQueue != 256 {
		t.Fatalf("defaults drifted from PROTOCOL.md: %+v", c)
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
		"ELLIPSIS_MAX_FRAME_BYTES: must be 256..1048576, got 1",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestThrottleMustBeBelowRefresh(t *testing.T) {
	_, err := load(t, map[string]string{"ELLIPSIS_TYPING_THROTTLE": "4s"})
	if err == nil || !strings.Contains(err.Error(), "ELLIPSIS_TYPING_THROTTLE (4s) must be below ELLIPSIS_TYPING_REFRESH (4s)") {
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
			t.Errorf("PROTOCOL.md's %s is not read", must)
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

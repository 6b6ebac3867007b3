package natsenv

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/internal/stacktest"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
)

// TestCredentialsFromEnv: the credential settings come from the
// environment (a missing NKey file is named by its setting).
func TestCredentialsFromEnv(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "user.nk")
	t.Setenv(natsconn.EnvNKey, missing)
	if a := Auth(); a.NKeyFile != missing {
		t.Fatalf("Auth() = %+v", a)
	}
	_, err := Connect(stacktest.NATSURL(), "natsenv-test", time.Second)
	if err == nil || !strings.Contains(err.Error(), natsconn.EnvNKey) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Connect = %v, want the missing %s named", err, natsconn.EnvNKey)
	}
}

// TestErrorHidesPassword: a connect error names the URLs without their
// password or token (nothing listens on port 1).
func TestErrorHidesPassword(t *testing.T) {
	_, err := Connect("nats://alice:pw-s3cret@127.0.0.1:1,t0ken-s3cret@127.0.0.1:1", "natsenv-test", time.Second)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "nats://xxxxx@127.0.0.1:1") {
		t.Fatalf("Connect = %v, want an error with the URLs redacted", err)
	}
}

// TestConnectFromEnv: no URL given means ELLIPSIS_NATS_URL.
func TestConnectFromEnv(t *testing.T) {
	t.Setenv(natsconn.EnvURL, stacktest.NATSURL())
	nc, err := Connect("", "natsenv-test", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

package devstack_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/ellipsis-chat/ellipsis/testkit"
	"github.com/ellipsis-chat/ellipsis/tools/backends"
	"github.com/ellipsis-chat/ellipsis/tools/devstack"
)

// TestStackDemoChatUsesNATSCredentials: against a NATS that only accepts
// an NKey user, the stack (gateway, worker and the demo page's chat
// service) starts with ELLIPSIS_NATS_NKEY, and the chat service's own
// connection is made with it (shared/natsconn), not anonymously.
func TestStackDemoChatUsesNATSCredentials(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg, _ := testConfig(t, map[string]string{
		"ELLIPSIS_NATS_URL":  "nats://" + srv.Addr().(*net.TCPAddr).String(),
		"ELLIPSIS_NATS_NKEY": seedFile,
	})
	st := start(t, devstack.Options{Config: cfg, Backends: backends.Options{DefaultRedisURL: "redis://" + testkit.ClosedAddr(t)}})
	if st.Backends().NATSSource == backends.Embedded {
		t.Fatal("the stack ignored ELLIPSIS_NATS_URL")
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		cz, err := srv.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.Name == "ellipsis-dev-chat" { // the server admits the NKey user only
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named ellipsis-dev-chat among %d", len(cz.Conns))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

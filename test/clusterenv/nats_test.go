package clusterenv_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
)

// connect opens a nats.go connection to url, closed at test end.
func connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// expectRouted publishes data on subject from pub every 50 ms (subscription
// interest crosses routes asynchronously) until sub receives it, for up to
// 5 s.
func expectRouted(t *testing.T, pub *nats.Conn, sub *nats.Subscription, subject, data string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := pub.Publish(subject, []byte(data)); err != nil {
			t.Fatalf("publish %s via %s: %v", subject, pub.ConnectedUrl(), err)
		}
		if err := pub.Flush(); err != nil {
			t.Fatalf("flush via %s: %v", pub.ConnectedUrl(), err)
		}
		msg, err := sub.NextMsg(50 * time.Millisecond)
		if err == nil {
			if string(msg.Data) != data {
				t.Fatalf("received %q on %s, want %q", msg.Data, subject, data)
			}
			// Drain duplicates of the retries.
			for {
				if _, err := sub.NextMsg(20 * time.Millisecond); err != nil {
					return
				}
			}
		}
	}
	t.Fatalf("%q published on %s via %s never reached the subscriber", data, subject, pub.ConnectedUrl())
}

// TestNATSCluster checks routing across a 3-node cluster, client failover
// after Kill and route recovery after Restart.
func TestNATSCluster(t *testing.T) {
	t.Parallel()
	c := clusterenv.StartNATSCluster(t, 3)
	urls := c.URLs()
	if len(urls) != 3 {
		t.Fatalf("URLs() = %v, want 3", urls)
	}
	t.Logf("NATS URL %s", c.URL())

	n0 := connect(t, urls[0])
	n2 := connect(t, urls[2])
	sub0, err := n0.SubscribeSync("clusterenv.test")
	if err != nil {
		t.Fatalf("subscribe on node 0: %v", err)
	}
	if err := n0.Flush(); err != nil {
		t.Fatal(err)
	}
	expectRouted(t, n2, sub0, "clusterenv.test", "from node 2")

	// A failover client on node 1, connected with the cluster URL (the
	// server order is randomized, so retry until it lands on node 1).
	reconnected := make(chan string, 10)
	var fo *nats.Conn
	for attempt := 0; attempt < 100 && fo == nil; attempt++ {
		nc, err := nats.Connect(c.URL(),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond),
			nats.ReconnectHandler(func(nc *nats.Conn) { reconnected <- nc.ConnectedUrl() }),
		)
		if err != nil {
			t.Fatalf("connect with %s: %v", c.URL(), err)
		}
		if nc.ConnectedUrl() == urls[1] {
			fo = nc
		} else {
			nc.Close()
		}
	}
	if fo == nil {
		t.Fatal("no connection with URL() landed on node 1 in 100 attempts")
	}
	t.Cleanup(fo.Close)
	foSub, err := fo.SubscribeSync("clusterenv.failover")
	if err != nil {
		t.Fatal(err)
	}
	if err := fo.Flush(); err != nil {
		t.Fatal(err)
	}
	expectRouted(t, n0, foSub, "clusterenv.failover", "before kill")

	c.Kill(1)
	select {
	case u := <-reconnected:
		if u == urls[1] {
			t.Fatalf("reconnected to the killed node %s", u)
		}
		t.Logf("failover client reconnected from %s to %s", urls[1], u)
	case <-time.After(10 * time.Second):
		t.Fatalf("failover client did not reconnect within 10 s of Kill(1); status %v", fo.Status())
	}
	// Its subscription was replayed on the new server, and it can publish.
	expectRouted(t, n0, foSub, "clusterenv.failover", "after kill")
	expectRouted(t, fo, sub0, "clusterenv.test", "from failover client")

	c.Restart(1)
	n1 := connect(t, urls[1])
	expectRouted(t, n1, sub0, "clusterenv.test", "from restarted node 1")
	sub1, err := n1.SubscribeSync("clusterenv.back")
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Flush(); err != nil {
		t.Fatal(err)
	}
	expectRouted(t, n2, sub1, "clusterenv.back", "to restarted node 1")
}

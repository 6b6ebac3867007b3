package redisconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestParseTopologies(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want Topology
		addr []string
	}{
		{"redis://127.0.0.1:6379/2", Standalone, []string{"127.0.0.1:6379"}},
		{"rediss://u:p@cache.example:6380", Standalone, []string{"cache.example:6380"}},
		{"redis+sentinel://s1:26379?master_name=mymaster&addr=s2:26379&password=secret", Sentinel, []string{"s1:26379", "s2:26379"}},
		{"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", Cluster, []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}},
		{"rediss+cluster://u:p@c.example:7000", Cluster, []string{"c.example:7000"}},
	} {
		o, err := Parse(tc.url)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.url, err)
		}
		if o.Topology != tc.want {
			t.Fatalf("Parse(%q) topology = %s, want %s", tc.url, o.Topology, tc.want)
		}
		var got []string
		switch tc.want {
		case Standalone:
			got = []string{o.Standalone.Addr}
		case Sentinel:
			got = o.Failover.SentinelAddrs
			if o.Failover.MasterName != "mymaster" || o.Failover.Password != "secret" {
				t.Fatalf("sentinel options = %+v", o.Failover)
			}
		case Cluster:
			got = o.Cluster.Addrs
		}
		if strings.Join(got, ",") != strings.Join(tc.addr, ",") {
			t.Fatalf("Parse(%q) addrs = %v, want %v", tc.url, got, tc.addr)
		}
		c := o.NewClient()
		switch c.(type) {
		case *redis.ClusterClient:
			if tc.want != Cluster {
				t.Fatalf("%s: got a cluster client", tc.url)
			}
		case *redis.Client:
			if tc.want == Cluster {
				t.Fatalf("%s: got a plain client", tc.url)
			}
		}
		_ = c.Close()
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://x:1", "scheme must be"},
		{"redis+mongo://x:1", "scheme must be"},
		{"redis+sentinel://s:26379", "master_name"},
		{"redis+cluster://c:7000/3", "no database path"},
		{"redis://", "no host"},
		{"redis://x:1?bogus=1", "bogus"},
	} {
		_, err := Parse(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.url, err, tc.want)
		}
	}
	if _, err := Parse("amqp://x:1"); !errors.Is(err, ErrScheme) {
		t.Fatalf("want ErrScheme, got %v", err)
	}
}

func TestTuneAndDefaults(t *testing.T) {
	for _, u := range []string{"redis://a:1", "redis+sentinel://s:1?master_name=m", "redis+cluster://c:1?client_name=mine"} {
		o, err := Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		o.Tune(Tuning{MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, ClientName: "ellipsis"})
		var mr, dr int
		var name string
		switch {
		case o.Standalone != nil:
			mr, dr, name = o.Standalone.MaxRetries, o.Standalone.DialerRetries, o.Standalone.ClientName
		case o.Failover != nil:
			mr, dr, name = o.Failover.MaxRetries, o.Failover.DialerRetries, o.Failover.ClientName
		default:
			mr, dr, name = o.Cluster.MaxRetries, o.Cluster.DialerRetries, o.Cluster.ClientName
		}
		wantName := "ellipsis"
		if strings.Contains(u, "client_name") {
			wantName = "mine"
		}
		if mr != -1 || dr != 1 || name != wantName {
			t.Fatalf("%s: tuned to retries %d dialer %d name %q", u, mr, dr, name)
		}
	}
	if DefaultPubSub(Cluster) != PubSubSharded || DefaultPubSub(Standalone) != PubSubClassic || DefaultPubSub(Sentinel) != PubSubClassic {
		t.Fatal("DefaultPubSub")
	}
	if r := Redact("redis+sentinel://u:pw@s:1?master_name=m&password=secret"); strings.Contains(r, "pw") || strings.Contains(r, "secret") {
		t.Fatalf("Redact leaked: %s", r)
	}
}

func TestParseKeepsPasswordsOutOfErrorsAndTakesAnyCase(t *testing.T) {
	_, err := Parse("redis://u:s3cret@host:badport")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v: want one without the password", err)
	}
	o, err := Parse("REDIS+CLUSTER://h:7000?addr=h2:7000")
	if err != nil || o.Topology != Cluster || len(o.Cluster.Addrs) != 2 {
		t.Fatalf("upper-case scheme: %+v, %v", o, err)
	}
}

package clusterenv

import (
	"strings"
	"testing"
)

func TestFindBinaryMissingNamesPackage(t *testing.T) {
	t.Parallel()
	_, err := findBinary("no-such-server-clusterenv", "no-such-package", "/nonexistent/no-such-server")
	if err == nil || !strings.Contains(err.Error(), "apt-get install no-such-package") {
		t.Fatalf("findBinary of a missing binary: err = %v, want one naming apt-get install no-such-package", err)
	}
}

func TestReservePortsWithBus(t *testing.T) {
	t.Parallel()
	ports, err := reservePorts(5, 10000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p+10000 > 65535 || seen[p] || seen[p+10000] {
			t.Fatalf("reservePorts(5, 10000) = %v: %d unusable or repeated", ports, p)
		}
		seen[p], seen[p+10000] = true, true
	}
}

func TestParseInfoAndOwnsSlot(t *testing.T) {
	t.Parallel()
	info := parseInfo("# Server\r\nredis_version:7.0.15\r\n\r\nexecutable:/usr/bin/a:b\r\n")
	if info["redis_version"] != "7.0.15" || info["executable"] != "/usr/bin/a:b" || len(info) != 2 {
		t.Errorf("parseInfo = %v", info)
	}
	nodes := "aaa 127.0.0.1:1@11 master - 0 0 1 connected 0-5460\n" +
		"bbb 127.0.0.1:2@12 myself,master - 0 0 2 connected 42 5461-10922 [7->-ccc] [8-<-aaa]\n"
	for slot, want := range map[int]bool{0: false, 42: true, 5461: true, 10922: true, 10923: false, 7: false, 8: false} {
		if got := ownsSlot(nodes, slot); got != want {
			t.Errorf("ownsSlot(_, %d) = %v, want %v", slot, got, want)
		}
	}
}

func TestKnownReplica(t *testing.T) {
	t.Parallel()
	nodes := "mmm 127.0.0.1:1@10001 myself,master - 0 0 1 connected 0-16383\n" +
		"rrr 127.0.0.1:2@10002 slave mmm 0 0 1 connected\n" +
		"hhh 127.0.0.1:3@10003 handshake - 0 0 0 disconnected\n" +
		"fff 127.0.0.1:4@10004 slave,fail mmm 0 0 1 disconnected\n" +
		"ddd 127.0.0.1:5@10005 slave mmm 0 0 1 disconnected\n"
	for _, c := range []struct {
		id, master string
		want       bool
	}{
		{"rrr", "mmm", true},
		{"rrr", "xxx", false}, // another master
		{"mmm", "-", false},   // a master
		{"hhh", "-", false},   // handshake
		{"fff", "mmm", false}, // failed
		{"ddd", "mmm", false}, // link down
		{"zzz", "mmm", false}, // unknown
	} {
		if got := knownReplica(nodes, c.id, c.master); got != c.want {
			t.Errorf("knownReplica(_, %s, %s) = %v, want %v", c.id, c.master, got, c.want)
		}
	}
}

package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/upgrading.md states the minimums scripts/check-tools.sh enforces,
// the Go version of the modules, and the commit TestVersionSkew pins, so a
// change to one without the other fails here.
func TestUpgradingDocMatchesTheChecks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	doc := read("docs/upgrading.md")
	checks := read("scripts/check-tools.sh")
	want := map[string]string{} // what the doc must say -> where it comes from
	for _, m := range regexp.MustCompile(`check "([^"]+)" ([0-9.]+) `).FindAllStringSubmatch(checks, -1) {
		want["**"+m[2]+"**"] = "scripts/check-tools.sh's minimum for " + m[1]
	}
	if len(want) != 3 {
		t.Fatalf("scripts/check-tools.sh: found %d minimums (%v), want node, nats-server and Redis", len(want), want)
	}
	goMod := read("services/gateway/go.mod")
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(goMod)
	if m == nil {
		t.Fatal("services/gateway/go.mod: no go directive")
	}
	want["**"+m[1]+"**"] = "the go directive of the modules"
	want["`"+skewCommit[:7]+"`"] = "TestVersionSkew's skewCommit"
	for s, from := range want {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/upgrading.md does not say %s (%s)", s, from)
		}
	}
}

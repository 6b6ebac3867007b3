package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/check-tools.sh, which `make test` and `make test-quick` run
// first, refuses a tool older than the tests need, or a missing one, with
// exactly one line naming the tool, the version found, the minimum and
// what to install; and passes the versions at and above each minimum.
func TestCheckToolsRefusesOldVersionsInOneLine(t *testing.T) {
	script := filepath.Join(repoRoot(t), "scripts", "check-tools.sh")
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	run := func(tool, output string) (string, error) {
		t.Helper()
		bin := t.TempDir()
		if output != "" {
			fake := "#!" + bash + "\necho '" + output + "'\n"
			if err := os.WriteFile(filepath.Join(bin, tool), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// PATH: the fake tool, and links to what the script itself calls
		// (grep, head), never the real tool.
		for _, p := range []string{"grep", "head"} {
			full, err := exec.LookPath(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(full, filepath.Join(bin, p)); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bash, script, tool)
		cmd.Env = []string{"PATH=" + bin}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		tool, output string
		ok           bool
		want         string // in the one line, when refused
	}{
		{"node", "v18.19.0", false, "Node.js 18.19.0; the tests need Node.js >= 20.17: install"},
		{"node", "v20.11.1", false, "Node.js 20.11.1; the tests need Node.js >= 20.17"},
		{"node", "v20.17.0", true, ""},
		{"node", "v22.12.0", true, ""},
		{"node", "", false, "node not found on PATH; the tests need Node.js >= 20.17: install"},
		{"nats-server", "nats-server: v2.8.4", false, "nats-server 2.8.4; the tests need nats-server >= 2.9: install"},
		{"nats-server", "nats-server: v2.9.10", true, ""},
		{"nats-server", "nats-server: v2.12.1", true, ""},
		{"redis-server", "Redis server v=6.2.14 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", false, "Redis 6.2.14; the tests need Redis >= 7.0: install"},
		{"redis-server", "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", true, ""},
		{"redis-server", "Valkey server v=8.0.2 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", true, ""},
	} {
		out, err := run(c.tool, c.output)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s %q: refused: %v\n%s", c.tool, c.output, err, out)
		case c.ok && out != "":
			t.Errorf("%s %q: passed but printed %q", c.tool, c.output, out)
		case !c.ok && err == nil:
			t.Errorf("%s %q: passed, want refused", c.tool, c.output)
		case !c.ok && (strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, c.want)):
			t.Errorf("%s %q: printed %q, want one line with %q", c.tool, c.output, out, c.want)
		}
	}
}

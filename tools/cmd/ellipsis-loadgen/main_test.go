package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// TestMain runs the command itself when re-executed by a test
// (ELLIPSIS_LOADGEN_TEST_MAIN=1).
func TestMain(m *testing.M) {
	testkit.MainOrCommand(m, "ELLIPSIS_LOADGEN_TEST_MAIN", func() int { main(); return 0 })
}

// -h never prints the JWT secret taken from ELLIPSIS_JWT_SECRET (the flag
// package prints a string flag's non-empty default).
func TestHelpHidesSecret(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-h")
	cmd.Env = append(os.Environ(), "ELLIPSIS_LOADGEN_TEST_MAIN=1", "ELLIPSIS_JWT_SECRET=s3cret-in-env")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "-jwt-secret") || strings.Contains(string(out), "s3cret-in-env") {
		t.Fatalf("-h output shows the secret, or no -jwt-secret:\n%s", out)
	}
}

// -label takes key=value pairs and names the field and the bound of a bad one.
func TestLabelFlag(t *testing.T) {
	var l labels
	for _, s := range []string{"batch_window=5ms", "note=two words"} {
		if err := l.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if l["batch_window"] != "5ms" || l["note"] != "two words" {
		t.Fatalf("labels %v", l)
	}
	for s, want := range map[string]string{
		"nokey":                        "want key=value",
		"=v":                           "key \"\"",
		"Batch=1":                      "a-z, 0-9 and _",
		strings.Repeat("k", 33) + "=1": "1 to 32 bytes",
		"k=" + strings.Repeat("v", 65): "up to 64 bytes",
		"k=a\nb":                       "printable",
		"batch_window=2ms":             "given twice",
	} {
		err := l.Set(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set(%q) = %v, want an error with %q", s, err, want)
		}
	}
}

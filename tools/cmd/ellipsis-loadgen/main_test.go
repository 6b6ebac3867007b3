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

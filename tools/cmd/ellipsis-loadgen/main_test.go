package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs the command itself when re-executed by a test.
func TestMain(m *testing.M) {
	if os.Getenv("ELLIPSIS_LOADGEN_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
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

package testkit

import (
	"os"
	"testing"
)

// MainOrCommand is the TestMain of a command's tests that run the command
// itself: re-executed with env set to "1" (os.Args[0], the test binary, with
// env=1 in its environment), the binary runs run and exits with its code;
// otherwise it runs the tests.
func MainOrCommand(m *testing.M, env string, run func() int) {
	if os.Getenv(env) == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

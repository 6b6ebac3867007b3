package testkit

import (
	"testing"
	"time"
)

// Poll is how often [WaitFor] and [WaitForWhy] ask their condition again.
const Poll = 10 * time.Millisecond

// WaitFor polls cond until it holds and returns how long that took; after
// within it fails the test with "timed out after <within>: <what>". within
// is a deadline for a failing test, not a pass condition.
func WaitFor(tb testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	return WaitForWhy(tb, within, what, func() (bool, string) { return cond(), "" })
}

// WaitForWhy is [WaitFor] with a condition that also says why it does not
// hold yet; the failure message ends with the last such explanation.
func WaitForWhy(tb testing.TB, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	tb.Helper()
	start := time.Now()
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) >= within {
			if why != "" {
				tb.Fatalf("timed out after %v: %s: %s", within, what, why)
			}
			tb.Fatalf("timed out after %v: %s", within, what)
			return 0
		}
		time.Sleep(Poll)
	}
}

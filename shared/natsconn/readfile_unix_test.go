//go:build unix

package natsconn

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNotRegularFiles: a FIFO (no writer: reading it would block) and
// /dev/zero (endless) are refused without reading, the error naming the
// setting; an over-large regular file is refused naming the limit.
func TestNotRegularFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "nats.creds")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := writeFile(t, "big.nk", strings.Repeat("x", maxFileBytes+1))
	for _, tc := range []struct {
		auth Auth
		want []string
	}{
		{Auth{CredsFile: fifo}, []string{EnvCreds, fifo, "not a regular file"}},
		{Auth{NKeyFile: "/dev/zero"}, []string{EnvNKey, "/dev/zero", "not a regular file"}},
		{Auth{TLSCA: "/dev/zero"}, []string{EnvTLSCA, "/dev/zero", "not a regular file"}},
		{Auth{NKeyFile: big}, []string{EnvNKey, big, strconv.Itoa(maxFileBytes) + " bytes"}},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.auth.Check(nil) }()
		select {
		case err := <-done:
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Check(%+v) = %v, want it to say %q", tc.auth, err, w)
				}
			}
		case <-time.After(waitFor):
			t.Fatalf("Check(%+v) still reading after %s", tc.auth, waitFor)
		}
	}
}

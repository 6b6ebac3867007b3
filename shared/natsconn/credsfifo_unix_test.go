//go:build unix

package natsconn

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCredsReplacedByFIFO: the .creds file is re-read at every reconnect,
// by nats.go while it holds its connection lock. Replaced by a FIFO after
// start (a careless operator), it must be refused like at start (not a
// regular file, in the status), not read: os.ReadFile would block in open
// until a writer came, and with it every Publish of the service.
func TestCredsReplacedByFIFO(t *testing.T) {
	op := newOperator(t)
	content, _, _ := creds(t, op.account, time.Now().Add(time.Hour))
	path := writeFile(t, "user.creds", content)
	c, _ := connectOK(t, Options{URLs: []string{"nats://" + addr(op.srv)}, Auth: Auth{CredsFile: path}})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, unblock a reader of the FIFO before c is closed.
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	if err := c.NC.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(c.Status(), "not a regular file") {
		if time.Now().After(deadline) {
			t.Fatalf("status %q after %s, want the reconnect refused with \"not a regular file\"", c.Status(), waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- c.NC.Publish("natsconn.test", []byte("x")) }()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("Publish blocked for %s while reconnecting", waitFor)
	}
}

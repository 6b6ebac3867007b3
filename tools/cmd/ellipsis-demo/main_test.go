package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/testkit"
)

// TestMain runs the command itself when re-executed by a test
// (ELLIPSIS_DEMO_TEST_MAIN=1).
func TestMain(m *testing.M) { testkit.MainOrCommand(m, "ELLIPSIS_DEMO_TEST_MAIN", run) }

func TestStackNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "-url", "ws://"+addr+"/v1/ws")
	cmd.Env = append(os.Environ(), "ELLIPSIS_DEMO_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("err = %v, want exit code 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "is `make run` running?") {
		t.Fatalf("no hint to start the stack:\n%s", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-speed", "0"}, {"-token", "a,b"}, {"-nope"}} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "ELLIPSIS_DEMO_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: err = %v, want exit code 2\n%s", args, err, out)
		}
	}
}

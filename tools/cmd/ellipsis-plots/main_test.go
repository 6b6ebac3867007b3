package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ellipsis-chat/ellipsis/tools/loadgen"
)

func TestRun(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-data", data, "-out", out}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no file matches") {
		t.Fatalf("empty data directory: exit %d, stderr %q; want 1 and 'no file matches'", code, stderr.String())
	}
	for _, name := range []string{"rate-500.json", "conns-1000.json"} {
		var r loadgen.Result
		r.System, r.Mode, r.Rate, r.Connected = loadgen.SystemEllipsis, loadgen.ModeRate, 500, 1000
		r.Latency = loadgen.Latency{Count: 10, P50: 1, P99: 2, P999: 3}
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stderr.Reset()
	if code := run([]string{"-data", data, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, name := range []string{"latency-vs-rate.svg", "latency-vs-connections.svg"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s: no <svg element", name)
		}
	}
	if code := run([]string{"-nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code := run([]string{"extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
}

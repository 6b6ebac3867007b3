package testkit

import (
	"bytes"
	"os"
	"sync"

	"go.uber.org/zap"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: the
// output of a child process or a logger, read while it is still written.
// The zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger is the logger a test hands the code under test: none, or with
// ELLIPSIS_TEST_LOG set, zap's development logger (every line, to stderr).
func Logger() *zap.Logger {
	if os.Getenv("ELLIPSIS_TEST_LOG") != "" {
		l, _ := zap.NewDevelopment()
		return l
	}
	return zap.NewNop()
}

// Sync does nothing (the buffer holds everything written): a *SyncBuffer
// is a zapcore.WriteSyncer, the sink of a logger whose lines a test reads.
func (s *SyncBuffer) Sync() error { return nil }

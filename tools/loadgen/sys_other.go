//go:build !linux

package loadgen

import (
	"errors"
	"time"
)

func raiseNoFile(uint64) uint64 { return 0 }

func readRSS(int) (int64, error) { return 0, errors.New("reading RSS needs Linux /proc") }

func processCPU() time.Duration { return 0 }

func readCPU(int) (time.Duration, error) { return 0, errors.New("reading CPU time needs Linux /proc") }

func setRcvBuf(uintptr, int) error { return nil }

func setMSS(uintptr, int) error { return nil }

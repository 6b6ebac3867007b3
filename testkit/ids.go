package testkit

import (
	"crypto/rand"
	"encoding/hex"
)

// RandHex returns 2n random hex digits: a key prefix, subject prefix or
// room name no other test (or earlier run) shares.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

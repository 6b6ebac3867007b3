package clusterenv_test

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/test/clusterenv"
)

// TestSlotOfKnownValues checks SlotOf against values from the Redis Cluster
// specification and CLUSTER KEYSLOT, including the hash tag edge cases.
func TestSlotOfKnownValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"", 0},
		{"123456789", 0x31C3 % clusterenv.NumSlots}, // CRC-16/XMODEM check value
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", clusterenv.SlotOf("user1000")},
		{"{user1000}.followers", clusterenv.SlotOf("user1000")},
		{"foo{}{bar}", 8363},                         // empty first tag: whole key hashed
		{"foo{{bar}}zap", clusterenv.SlotOf("{bar")}, // tag is "{bar"
		{"foo{bar}{zap}", clusterenv.SlotOf("bar")},  // first tag only
		{"chat:room:{abc}", clusterenv.SlotOf("abc")},
		{"typing:users:{abc}", clusterenv.SlotOf("abc")},
	} {
		if got := clusterenv.SlotOf(tc.key); got != tc.want {
			t.Errorf("SlotOf(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

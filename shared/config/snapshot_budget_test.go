package config

import (
	"strings"
	"testing"
)

// The snapshot budgets' defaults are docs/protocol.md's ("Snapshots: budget
// and sharing"); they are read from the environment and bad values are
// refused naming the setting and its bounds.
func TestSnapshotBudgetSettings(t *testing.T) {
	d := Default()
	if d.SnapshotRate != 10 || d.SnapshotBurst != 20 || d.HTTPSnapshotRate != 2 || d.HTTPSnapshotBurst != 10 || d.HTTPSnapshotUsers != 10000 || d.SnapshotUsers != 10000 {
		t.Fatalf("snapshot budget defaults drifted from docs/protocol.md: %+v", d)
	}
	c, err := load(t, map[string]string{
		"ELLIPSIS_SNAPSHOT_RATE":       "0.5",
		"ELLIPSIS_SNAPSHOT_BURST":      "3",
		"ELLIPSIS_HTTP_SNAPSHOT_RATE":  "1.5",
		"ELLIPSIS_HTTP_SNAPSHOT_BURST": "4",
		"ELLIPSIS_HTTP_SNAPSHOT_USERS": "7",
		"ELLIPSIS_SNAPSHOT_USERS":      "9",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.SnapshotRate != 0.5 || c.SnapshotBurst != 3 || c.HTTPSnapshotRate != 1.5 || c.HTTPSnapshotBurst != 4 || c.HTTPSnapshotUsers != 7 || c.SnapshotUsers != 9 {
		t.Fatalf("got %+v", c)
	}
	_, err = load(t, map[string]string{
		"ELLIPSIS_SNAPSHOT_RATE":       "0",
		"ELLIPSIS_SNAPSHOT_BURST":      "0",
		"ELLIPSIS_HTTP_SNAPSHOT_RATE":  "-1",
		"ELLIPSIS_HTTP_SNAPSHOT_BURST": "100001",
		"ELLIPSIS_HTTP_SNAPSHOT_USERS": "0",
		"ELLIPSIS_SNAPSHOT_USERS":      "10000001",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"ELLIPSIS_SNAPSHOT_RATE: must be positive",
		"ELLIPSIS_SNAPSHOT_BURST: must be 1..100000, got 0",
		"ELLIPSIS_HTTP_SNAPSHOT_RATE: must be positive",
		"ELLIPSIS_HTTP_SNAPSHOT_BURST: must be 1..100000, got 100001",
		"ELLIPSIS_HTTP_SNAPSHOT_USERS: must be 1..10000000, got 0",
		"ELLIPSIS_SNAPSHOT_USERS: must be 1..10000000, got 10000001",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

package gateway_test

import (
	"encoding/json"
	"os"
	"testing"

	webclient "github.com/ellipsis-chat/ellipsis/clients/js"
)

// sdkVersion is clients/js/package.json's version, read from the file, and
// checks that the embedded copy says the same.
func sdkVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../clients/js/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct{ Version string }
	if err := json.Unmarshal(b, &p); err != nil || p.Version == "" {
		t.Fatalf("clients/js/package.json: version %q, %v", p.Version, err)
	}
	if got := webclient.Version(); got != p.Version {
		t.Fatalf("webclient.Version() = %q, package.json says %q", got, p.Version)
	}
	return p.Version
}

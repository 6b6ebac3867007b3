package store

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// The layouts New accepts are the values of ELLIPSIS_STORE, and the
// setting's default is the layout documented as the default.
func TestKindsAreTheSettings(t *testing.T) {
	if KindZSet != config.StoreZSet || KindKeys != config.StoreKeys {
		t.Errorf("store kinds %q, %q; ELLIPSIS_STORE's values %q, %q", KindZSet, KindKeys, config.StoreZSet, config.StoreKeys)
	}
	if d := config.Default().Store; d != KindZSet {
		t.Errorf("ELLIPSIS_STORE's default %q, want %q", d, KindZSet)
	}
}

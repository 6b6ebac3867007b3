package gateway_test

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/auth"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/authz"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/hub"
	"github.com/ellipsis-chat/ellipsis/services/gateway/internal/pubsub"
	"github.com/ellipsis-chat/ellipsis/shared/config"
)

// The gateway's packages take their settings as options and fall back to
// a constant of their own on a zero value; each such constant is the
// setting's default in shared/config's table.
func TestPackageDefaultsAreTheTable(t *testing.T) {
	d := config.Default()
	for _, c := range []struct {
		env        string
		pkg, table any
	}{
		{"ELLIPSIS_PUBSUB_PING_INTERVAL", pubsub.DefaultPingInterval, d.PubSubPingInterval},
		{"ELLIPSIS_PUBSUB_PING_TIMEOUT", pubsub.DefaultPingTimeout, d.PubSubPingTimeout},
		{"ELLIPSIS_JWKS_RELOAD", auth.DefaultJWKSReload, d.JWKSReload},
		{"ELLIPSIS_JWKS_TIMEOUT", auth.DefaultJWKSTimeout, d.JWKSTimeout},
		{"ELLIPSIS_AUTHZ_TIMEOUT", authz.DefaultTimeout, d.AuthzTimeout},
		{"ELLIPSIS_SNAPSHOT_TIMEOUT", hub.DefaultReadyTimeout, d.SnapshotTimeout},
		{"ELLIPSIS_OUTBOUND_QUEUE", hub.DefaultPendingLimit, d.OutboundQueue},
		{"ELLIPSIS_ROOM_SUMMARY_MEMBERS", hub.DefaultSummaryMembers, d.RoomSummaryMembers},
		{"ELLIPSIS_ROOM_SUMMARY_INTERVAL", hub.DefaultSummaryInterval, d.RoomSummaryInterval},
		{"ELLIPSIS_WATCH_INTERVAL", hub.DefaultWatchInterval, d.WatchInterval},
	} {
		if c.pkg != c.table {
			t.Errorf("%s: the package's default is %v, the table's %v", c.env, c.pkg, c.table)
		}
	}
}

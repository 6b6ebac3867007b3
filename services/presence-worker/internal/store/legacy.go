package store

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// MigrateLegacySweep moves the rooms that workers of Ellipsis before the
// sweep buckets keep in their one-key index (names.LegacySweepKey) into
// their buckets and removes exactly those from it, so a rolling upgrade
// loses no expiry push. It returns how many rooms it moved. Malformed
// members are dropped.
func (st *redisStore) MigrateLegacySweep(ctx context.Context) (int, error) {
	key := st.names.LegacySweepKey()
	var zs []redis.Z
	err := st.call(ctx, "legacy-sweep", func(ctx context.Context) error {
		var err error
		zs, err = st.rdb.ZRangeWithScores(ctx, key, 0, 1023).Result()
		return err
	})
	if err != nil || len(zs) == 0 {
		return 0, err
	}
	x := sweepIndex{}
	members := make([]any, 0, len(zs))
	for _, z := range zs {
		enc, _ := z.Member.(string)
		members = append(members, enc)
		if room, err := names.Dec(enc); err == nil && protocol.ValidateID("room", room) == nil {
			x.add(room, int64(z.Score))
		}
	}
	st.index(ctx, x)
	return len(zs), st.rdb.ZRem(ctx, key, members...).Err()
}

package worker

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial through a process-wide logger; the
	// outage tests would flood the output. Only the test binary does this.
	if os.Getenv("ELLIPSIS_TEST_LOG") == "" {
		redis.SetLogger(quietRedisLog{})
	}
	os.Exit(m.Run())
}

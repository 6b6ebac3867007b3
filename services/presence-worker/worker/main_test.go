package worker

import (
	"testing"

	"github.com/ellipsis-chat/ellipsis/services/presence-worker/internal/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

package run

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
)

type fakeService struct {
	startErr, shutdownErr error
	started               chan struct{}
	shutdownDeadline      time.Duration
}

func (f *fakeService) Start(context.Context) error {
	if f.startErr == nil {
		close(f.started)
	}
	return f.startErr
}

func (f *fakeService) Shutdown(ctx context.Context) error {
	d, _ := ctx.Deadline()
	f.shutdownDeadline = time.Until(d)
	return f.shutdownErr
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// dev: settings a worker accepts without anything else.
var dev = map[string]string{"ELLIPSIS_LOG_LEVEL": "error"}

func TestRun(t *testing.T) {
	var gotCfg config.Config
	newSpec := func(f *fakeService, newErr error) Spec {
		return Spec{Name: "svc", Service: config.ServiceWorker,
			New: func(cfg config.Config, _ *zap.Logger) (Service, error) {
				gotCfg = cfg
				if newErr != nil {
					return nil, newErr
				}
				return f, nil
			},
			ShutdownTimeout: func(cfg config.Config) time.Duration { return 7 * time.Second },
		}
	}
	run := func(spec Spec, vars map[string]string, args ...string) (int, string, string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if f, ok := spec.New(config.Default(), nil); ok == nil && f != nil {
			go func() {
				select {
				case <-f.(*fakeService).started: // serving: the "signal"
					cancel()
				case <-ctx.Done():
				}
			}()
		}
		var out, errOut bytes.Buffer
		code := Run(ctx, nil, spec, args, env(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	fresh := func() *fakeService { return &fakeService{started: make(chan struct{})} }

	if code, out, _ := run(newSpec(fresh(), nil), nil, "-version"); code != ExitOK || !strings.HasPrefix(out, "svc ") {
		t.Fatalf("-version: %d %q", code, out)
	}
	if code, _, _ := run(newSpec(fresh(), nil), dev, "-h"); code != ExitOK {
		t.Fatalf("-h: %d", code)
	}
	if code, _, errOut := run(newSpec(fresh(), nil), map[string]string{"ELLIPSIS_SNAPSHOT_MAX": "0"}); code != ExitConfig || !strings.Contains(errOut, "svc: configuration: ELLIPSIS_SNAPSHOT_MAX: must be 1..500, got 0") {
		t.Fatalf("bad setting: %d %q", code, errOut)
	}
	if code, _, _ := run(newSpec(fresh(), errors.New("no")), dev); code != ExitConfig {
		t.Fatalf("New refused: %d", code)
	}
	if code, _, _ := run(newSpec(&fakeService{startErr: errors.New("no redis")}, nil), dev); code != ExitFailed {
		t.Fatalf("Start failed: %d", code)
	}
	f := fresh()
	if code, _, _ := run(newSpec(f, nil), dev, "-sweep-interval", "400ms"); code != ExitOK || gotCfg.SweepInterval != 400*time.Millisecond || gotCfg.Service != config.ServiceWorker {
		t.Fatalf("clean run: %d, %+v", code, gotCfg)
	}
	if f.shutdownDeadline <= 6*time.Second || f.shutdownDeadline > 7*time.Second {
		t.Fatalf("Shutdown had %v, want the Spec's 7s", f.shutdownDeadline)
	}
	f = fresh()
	f.shutdownErr = errors.New("stuck")
	if code, _, _ := run(newSpec(f, nil), dev); code != ExitFailed {
		t.Fatalf("Shutdown failed: %d", code)
	}
}

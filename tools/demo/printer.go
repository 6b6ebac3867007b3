package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// joinNames lists names in English: "Alice", "Alice and Bob", "Alice, Bob
// and Carol".
func joinNames(names []string) string {
	switch len(names) {
	case 0:
		return "nobody"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// printer writes timeline lines; safe for concurrent use.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	width int
	t0    time.Time
}

func (p *printer) start(t0 time.Time) {
	p.mu.Lock()
	p.t0 = t0
	p.mu.Unlock()
}

func (p *printer) printf(at time.Time, format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%4.1fs] "+format+"\n", append([]any{at.Sub(p.t0).Seconds()}, a...)...)
}

func (p *printer) sees(user, line string, at time.Time) {
	p.printf(at, "%s sees: %s", label(user, p.width), line)
}

func (p *printer) sent(user string, a typist.Action, at time.Time) {
	p.printf(at, "%s sends %s (%s)", label(user, p.width), a.Frame(), a)
}

func (p *printer) errorFrame(user string, ev protocol.ServerFrame, at time.Time) {
	p.printf(at, "%s error: %s: %s", label(user, p.width), ev.Code, ev.Message)
}

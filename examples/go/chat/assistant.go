package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ellipsis-chat/ellipsis/examples/go/agent"
)

// Defaults of [AssistantOptions].
const (
	// DefaultThink is how long the assistant thinks before it replies.
	DefaultThink = 8 * time.Second
	// DefaultMaxThinks bounds the assistant's thinks at once.
	DefaultMaxThinks = 4
)

// AssistantOptions configures [Service.EnableAssistant].
type AssistantOptions struct {
	// Agent is the assistant's agent (package agent): User and Name
	// default to "assistant" and "Assistant", Activity to "thinking";
	// TTL and MaxTTL as there (give MaxTTL the deployment's
	// ELLIPSIS_SERVICE_MAX_TTL). Prefix is the service's.
	Agent agent.Options
	// Think is how long the assistant thinks before it replies (0 =
	// DefaultThink).
	Think time.Duration
	// MaxThinks bounds the thinks at once (0 = DefaultMaxThinks).
	MaxThinks int
	// OnError, when set, hears an answer that failed (its indicator
	// could not be shown, or its stop not sent). Answers ended by
	// [Service.Close] are not reported.
	OnError func(scope agent.Scope, err error)
}

// assistant answers the messages that mention it: a posted message whose
// text contains "@<agent user>" (ASCII case-insensitive: "@assistant",
// "@Assistant"), not posted by the assistant itself, makes it think in
// the message's scope (the room itself, or its thread) through
// [agent.Agent.Answer], then post its reply as a message of the agent's
// user and name in the same scope; Answer then sends the message-posted
// stop there.
//
// Bounds, with their overflow rule:
//   - at most one think per scope: a mention in a scope where the
//     assistant already thinks starts none; that think's reply answers
//     it;
//   - at most MaxThinks thinks at once: a mention beyond them is answered
//     at once, without thinking, by a reply saying the assistant is busy.
type assistant struct {
	agent   *agent.Agent
	think   time.Duration
	max     int
	mention string
	onError func(agent.Scope, error)

	ctx    context.Context // canceled by close: the thinks end
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	thinking map[agent.Scope]struct{}
	closed   bool
}

// EnableAssistant makes s answer the messages that mention its assistant
// (see the rules above: AssistantOptions, and assistant.go). Call it
// before serving s.Handler(). Errors: the agent's (package agent: a
// *protocol.FieldError naming the field), or a negative Think or
// MaxThinks.
func (s *Service) EnableAssistant(opts AssistantOptions) error {
	if opts.Think < 0 || opts.MaxThinks < 0 {
		return fmt.Errorf("chat assistant: think (%s) and max thinks (%d) must not be negative", opts.Think, opts.MaxThinks)
	}
	if opts.Think == 0 {
		opts.Think = DefaultThink
	}
	if opts.MaxThinks == 0 {
		opts.MaxThinks = DefaultMaxThinks
	}
	opts.Agent.Prefix = s.prefix
	a, err := agent.New(s.nc, opts.Agent)
	if err != nil {
		return fmt.Errorf("chat assistant: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.assistant = &assistant{
		agent: a, think: opts.Think, max: opts.MaxThinks, mention: "@" + strings.ToLower(a.User()), onError: opts.OnError,
		ctx: ctx, cancel: cancel, thinking: map[agent.Scope]struct{}{},
	}
	return nil
}

// heard is told of each message posted to s, after it is published.
func (a *assistant) heard(s *Service, m Message) {
	if m.User == a.agent.User() || !strings.Contains(strings.ToLower(m.Text), a.mention) {
		return
	}
	scope := agent.Scope{Room: m.Room, Thread: m.Thread}
	who := m.Name
	if who == "" {
		who = m.User
	}
	a.mu.Lock()
	if _, ok := a.thinking[scope]; ok || a.closed {
		a.mu.Unlock()
		return // the think under way answers this one too
	}
	if len(a.thinking) >= a.max {
		a.mu.Unlock()
		s.publish(m.Room, a.post(m.Thread, who+", I am busy with other questions; ask me again in a moment."))
		return
	}
	a.thinking[scope] = struct{}{}
	a.wg.Add(1)
	a.mu.Unlock()

	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			delete(a.thinking, scope)
			a.mu.Unlock()
		}()
		text := fmt.Sprintf("%s, I thought about it for %s. (The dev stack's assistant: a real agent would post its model's answer here.)", who, a.think)
		err := a.agent.Answer(a.ctx, scope, a.think, func(context.Context, agent.Scope) error {
			if _, ok := s.publish(m.Room, a.post(m.Thread, text)); !ok {
				return errors.New("the chat service is closed, or at its limit of rooms")
			}
			return nil
		})
		if err != nil && a.ctx.Err() == nil && a.onError != nil {
			a.onError(scope, err)
		}
	}()
}

// post is a message of the assistant in thread ("" = the room itself).
func (a *assistant) post(thread, text string) Post {
	return Post{User: a.agent.User(), Name: a.agent.Name(), Text: text, Thread: thread}
}

// close ends the thinks (each sends the stop of its own conn) and waits
// for them.
func (a *assistant) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// live is a session with a running agent. It is the agent.Host handed to the
// adapter, and the composition of its parts: the event queue (queue.go),
// the open items (items.go), the turn (turn.go) and the request broker
// (broker.go).
type live struct {
	m     *Manager
	id    string
	agent string
	// cwd is the session's workspace on the host.
	cwd  string
	sess agent.Session
	// sb is the session's sandbox, nil when the agent runs on the host;
	// sbInfo says what it has in force (set before the session is live).
	sb     sandbox.Sandbox
	sbInfo *event.SandboxInfo
	// sbLimits are its limits, for the callers' commands (Exec).
	sbLimits sandbox.Limits
	// setAllow replaces its egress proxy's allow rules; nil without one.
	setAllow func([]string) error
	// ctx ends when the session is torn down.
	ctx    context.Context
	cancel context.CancelFunc
	// closing ends (with errClosing) as soon as the teardown starts.
	closing     context.Context
	stopClosing context.CancelCauseFunc
	// reports coalesces the violations of the session's sandbox (and the
	// requests over the pending cap) into events and audit records.
	reports *sandbox.Coalescer[sandbox.Violation]
	// env is the env the client gave (never stored), kept for the resume
	// after an idle stop.
	env map[string]string
	// mcp are its MCP servers with their values, kept the same way.
	mcp []agent.MCPServer
	// canPark: the agent can resume the session, so its idle agent
	// process may be stopped.
	canPark bool
	// idlePause: the idle session is paused after Config.IdlePause
	// instead of stopped after Config.IdleTimeout (its agent is an
	// agent.Pauser); under mu.
	idlePause bool

	// q is the session's event queue.
	q *eventQueue

	mu         sync.Mutex
	native     string
	turnID     string
	turnCancel context.CancelCauseFunc
	turnDone   chan struct{}
	// pending are the requests (permissions and questions) waiting for
	// an answer; see request.
	pending map[string]pending
	// open holds the items the agent started and did not complete yet.
	open openItems
	// trace holds the spans of the running turn (tracing.go).
	trace turnTrace
	// idleAt is when the session last became idle, zero while a turn
	// runs; idleTimer fires Config.IdleTimeout later. stopping is set
	// once the idle stop has begun: no turn starts after it.
	idleAt    time.Time
	idleTimer *time.Timer
	stopping  bool
	// configuring is set while Configure changes the model or mode: no
	// turn starts meanwhile.
	configuring bool
	// announced is set once session.started is in the log; until then
	// the violation events of the sandbox wait in early (report), so that
	// the log starts with session.started.
	announced bool
	early     []event.Event
	// execs counts the callers' commands running in the sandbox (Exec);
	// no idle stop while there are any.
	execs int
}

var (
	_ agent.Host        = (*live)(nil)
	_ agent.NetworkHost = (*live)(nil)
)

// errClosing is the cause of a live session's closing context.
var errClosing = errors.New("the session is closing")

// errStopping refuses a turn in a session whose idle agent is being
// stopped; Send then resumes the session.
var errStopping = errors.New("the session's idle agent is being stopped")

// idleLocked records that the session became idle and (re)arms the idle
// timer. Called with l.mu held.
func (l *live) idleLocked() {
	l.idleAt = time.Now()
	d := l.idleForLocked()
	if d <= 0 || !l.canPark || l.stopping {
		return
	}
	if l.idleTimer == nil {
		l.idleTimer = time.AfterFunc(d, l.idleExpired)
		return
	}
	l.idleTimer.Reset(d)
}

// idleForLocked is how long the session may be idle before it is parked
// (paused or stopped). Called with l.mu held.
func (l *live) idleForLocked() time.Duration {
	if l.idlePause {
		return l.m.cfg.IdlePause
	}
	return l.m.cfg.IdleTimeout
}

// busyLocked records that a turn started. Called with l.mu held.
func (l *live) busyLocked() {
	l.idleAt = time.Time{}
	if l.idleTimer != nil {
		l.idleTimer.Stop()
	}
}

// idleDue reports how long until the idle stop of l, when one is due.
func (l *live) idleDue(now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.idleTimer == nil || l.idleAt.IsZero() || l.stopping {
		return 0, false
	}
	return l.idleAt.Add(l.idleForLocked()).Sub(now), true
}

// idleExpired stops the agent when the session is still idle (a stale
// timer, or one whose session started a turn meanwhile, does nothing) and
// the agent has given the native id a resume needs.
func (l *live) idleExpired() {
	l.mu.Lock()
	if l.stopping || l.turnCancel != nil || l.idleAt.IsZero() || time.Since(l.idleAt) < l.idleForLocked() ||
		l.native == "" || len(l.pending) > 0 || l.execs > 0 {
		l.mu.Unlock()
		return
	}
	if l.idlePause {
		l.mu.Unlock()
		l.m.pauseIdle(l)
		return
	}
	l.stopping = true
	l.mu.Unlock()
	l.m.stopIdle(l)
}

func (l *live) nativeID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.native
}

// enqueue stamps events and queues them; waiting as w says for them (and
// everything queued before them) to be durable.
func (l *live) enqueue(evs []event.Event, w wait) error {
	l.mu.Lock()
	l.stampLocked(evs)
	b, backlog, err := l.q.push(evs, w)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.q.await(b, backlog)
}

// stampLocked sets the envelope fields the session gives its events: the
// source (the agent's unless set), the turn and the agent's own session
// id. Called with l.mu held.
func (l *live) stampLocked(evs []event.Event) {
	for i := range evs {
		if evs[i].Source == "" {
			evs[i].Source = event.SourceAgent
		}
		if evs[i].TurnID == "" {
			evs[i].TurnID = l.turnID
		}
		if evs[i].NativeSessionID == "" {
			evs[i].NativeSessionID = l.native
		}
	}
}

// appendWait queues events and waits until they are durable (see write).
func (l *live) appendWait(evs ...event.Event) error { return l.enqueue(evs, waitDurable) }

// write appends events to the session's log: the queue's writer.
func (l *live) write(evs []event.Event) error {
	// Durable writes are not tied to any request or turn context: an
	// interrupted turn must still record how it ended.
	if _, err := l.m.st.Append(context.Background(), l.id, evs...); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	l.m.cfg.Metrics.EventsAppended.Add(float64(len(evs)))
	return nil
}

// Emit implements agent.Host. It queues the events and returns without
// waiting for the disk; see eventQueue.
func (l *live) Emit(_ context.Context, evs ...event.Event) error {
	l.mu.Lock()
	l.stampLocked(evs)
	for _, e := range evs {
		if kind, took, ok := l.open.observe(e); ok {
			l.m.cfg.Metrics.ToolCallDuration.WithLabelValues(string(kind)).Observe(took.Seconds())
		}
		l.traceItem(e)
	}
	b, backlog, err := l.q.push(evs, noWait)
	if errors.Is(err, errEventsDropped) {
		// The store is full and the queue at its bound: the turn fails
		// (runTurn), with the queue's events_dropped error in the log
		// once the store takes writes again. The agent is not told: its
		// turn is cancelled.
		if l.turnCancel != nil {
			l.turnCancel(errEventsDropped)
		}
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.q.await(b, backlog)
}

// SetNativeSessionID implements agent.Host.
func (l *live) SetNativeSessionID(ctx context.Context, id string) error {
	l.mu.Lock()
	l.native = id
	l.mu.Unlock()
	_, err := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
		s.NativeSessionID = id
		return nil
	})
	return err
}

// stamp sets the turn and the agent's session id of an event written
// through the request path of the store (see request), as stampLocked does
// for queued ones.
func (l *live) stamp(e *event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.TurnID, e.NativeSessionID = l.turnID, l.native
}

// stopPump drains the queue and stops the pump; later emits fail.
func (l *live) stopPump() {
	l.q.close(fmt.Errorf("session %s: %w", l.id, ErrNotLive))
}

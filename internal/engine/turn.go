package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/snapshot"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tracing"
)

// startTurn records the turn's start and the user's message, then runs the
// turn in its own goroutine.
func (l *live) startTurn(ctx context.Context, content []event.ContentPart) (string, error) {
	// A store that is full takes no turn: its events would wait.
	if err := l.q.stalled(); err != nil {
		return "", fmt.Errorf("session %s cannot record a turn now: %w", l.id, err)
	}
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		return "", errStopping
	}
	if l.turnCancel != nil {
		l.mu.Unlock()
		return "", fmt.Errorf("%w in session %s (turn %s)", ErrBusy, l.id, l.turnID)
	}
	if l.configuring {
		l.mu.Unlock()
		return "", fmt.Errorf("%w: session %s is changing its model or mode; send the message again", ErrBusy, l.id)
	}
	l.busyLocked()
	turnID := ids.New(ids.Turn)
	// The turn's context descends from the session, not from the request:
	// the request returns as soon as the turn is recorded. Its span is
	// still the request's child (tracing.go).
	span := l.startTurnSpan(ctx, turnID)
	tctx, cancel := context.WithCancelCause(tracing.WithSpan(l.ctx, span))
	l.turnID, l.turnCancel, l.turnDone, l.trace.span = turnID, cancel, make(chan struct{}), span
	done := l.turnDone
	l.mu.Unlock()

	fail := func(err error) (string, error) {
		l.mu.Lock()
		l.turnID, l.turnCancel, l.turnDone, l.trace.span = "", nil, nil, nil
		l.idleLocked()
		l.mu.Unlock()
		span.SetError(err)
		span.End()
		cancel(err)
		close(done)
		return "", err
	}
	// The status is stored before turn.started announces the turn.
	if _, err := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
		s.Status, s.CurrentTurnID, s.UpdatedAt = store.StatusRunning, turnID, time.Now().UTC()
		return nil
	}); err != nil {
		return fail(err)
	}
	user := event.Item{ID: ids.New(ids.Item), Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser, Content: content}
	// The client waits for this: a store that has just become full
	// refuses the turn rather than holding the request until it has room.
	if err := l.enqueue([]event.Event{
		event.New(event.SourceDaemon, &event.TurnStarted{TurnID: turnID}),
		event.New(event.SourceDaemon, &event.ItemStarted{Item: user}),
		event.New(event.SourceDaemon, &event.ItemCompleted{Item: user}),
	}, waitOrStall); err != nil {
		_, _ = l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
			if s.CurrentTurnID == turnID {
				s.Status, s.CurrentTurnID = store.StatusIdle, ""
			}
			return nil
		})
		return fail(err)
	}
	l.m.wg.Add(1)
	go l.runTurn(tctx, turnID, content, done)
	return turnID, nil
}

func (l *live) runTurn(ctx context.Context, turnID string, content []event.ContentPart, done chan struct{}) {
	defer l.m.wg.Done()
	defer close(done)
	start := time.Now()
	// The workspace before the turn and (below) after its commit: what
	// the turn's diff compares.
	l.m.takeState(ctx, l.id, l.cwd, snapshot.TurnBefore(turnID))
	res, err := l.sess.Prompt(ctx, agent.Input{TurnID: turnID, Content: content})
	// A turn cancelled because its agent died failed; one cancelled by an
	// interrupt, a termination or a shutdown was interrupted.
	var ending *endingError
	agentFailed := errors.As(context.Cause(ctx), &ending) && ending.agentFailed
	// A turn cancelled because its events were dropped (the store was
	// full, see eventQueue) failed; the queue's error event says why.
	dropped := errors.Is(context.Cause(ctx), errEventsDropped)
	interrupted := ctx.Err() != nil && !agentFailed && !dropped
	switch {
	case dropped:
		res.StopReason = event.StopError
		res.Message = errEventsDropped.Error()
	case agentFailed && (err == nil || errors.Is(err, context.Canceled)):
		err = errors.New(ending.msg) // not "context canceled": why it was
		fallthrough
	case agentFailed:
		res.StopReason = event.StopError
		res.Message = err.Error()
		_ = l.appendWait(event.New(event.SourceDaemon, &event.Error{Code: "agent_exited", Message: err.Error()}))
	case interrupted:
		res.StopReason = event.StopInterrupted
		if res.Message == "" {
			res.Message = context.Cause(ctx).Error()
		}
	case err != nil:
		res.StopReason = event.StopError
		res.Message = err.Error()
		_ = l.appendWait(event.New(event.SourceDaemon, &event.Error{Code: "agent_error", Message: err.Error()}))
	case res.StopReason == "":
		res.StopReason = event.StopEndTurn
	}
	if l.sb != nil {
		// The turn's workspace changes reach the host before anyone sees
		// turn.completed; changes to protected paths are dropped here,
		// and changes held for review wait for their answers (not for an
		// interrupt: the client may still answer them).
		vs, cerr := l.sb.Commit(context.WithoutCancel(ctx))
		l.addReports(vs)
		if cerr != nil {
			_ = l.appendWait(event.New(event.SourceDaemon, &event.Error{Code: "sandbox_commit_failed", Message: cerr.Error()}))
		}
	}
	l.m.takeState(ctx, l.id, l.cwd, snapshot.TurnAfter(turnID))
	// The turn's log says what its sandbox refused, repeats included.
	l.reports.Flush()
	d := time.Since(start)
	l.m.cfg.Metrics.TurnDuration.WithLabelValues(l.agent, string(res.StopReason)).Observe(d.Seconds())
	l.endTurnSpan(ctx, res) // while the turn still holds its slot

	// The session is idle before anyone can see turn.completed, so a client
	// that sends the next message on seeing it is never told "busy".
	// A store that is full is asked again until it takes the write (or
	// the session ends), as the queue does with the turn's events.
	serr := l.q.retry(func() error {
		_, err := l.m.st.UpdateSession(context.WithoutCancel(ctx), l.id, func(s *store.Session) error {
			if s.Status == store.StatusRunning && s.CurrentTurnID == turnID {
				s.Status, s.CurrentTurnID, s.UpdatedAt = store.StatusIdle, "", time.Now().UTC()
			}
			return nil
		})
		return err
	})
	if serr != nil && !errors.Is(serr, store.ErrNotFound) {
		l.m.log.Error("recording session status", "session", l.id, "err", serr)
	}
	completed := event.New(event.SourceDaemon, &event.TurnCompleted{
		TurnID: turnID, StopReason: res.StopReason, Usage: res.Usage, DurationMS: d.Milliseconds(), Message: res.Message,
	})
	completed.TurnID = turnID
	// Queue turn.completed and free the turn slot in one step: the next
	// turn's events can only be queued after it.
	l.mu.Lock()
	evs := append(l.open.close("the turn ended before the agent completed this item"), completed)
	l.stampLocked(evs)
	b, backlog, err := l.q.push(evs, waitDurable)
	if l.turnID == turnID {
		l.turnID, l.turnCancel, l.turnDone = "", nil, nil
		l.idleLocked()
	}
	l.mu.Unlock()
	if err == nil {
		err = l.q.await(b, backlog)
	}
	if err != nil {
		l.m.log.Error("recording turn end", "session", l.id, "turn", turnID, "err", err)
	}
}

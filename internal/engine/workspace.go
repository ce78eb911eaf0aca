package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/snapshot"
)

// MaxSessionExecs bounds the commands callers run at once in one session's
// sandbox (Exec); they share the sandbox's limits with the agent.
const MaxSessionExecs = 4

// ErrTooManyExecs: a session's sandbox already runs MaxSessionExecs
// callers' commands.
var ErrTooManyExecs = errkind.New(errkind.TooMany, "too many commands running in the session's sandbox")

// takeState records the state of session s's workspace as point, for its
// diffs (Config.Snapshots). A failure is logged: the session goes on, and
// a diff that needs the state says it is missing.
func (m *Manager) takeState(ctx context.Context, id, cwd, point string) {
	if m.cfg.Snapshots == nil || cwd == "" {
		return
	}
	if err := m.cfg.Snapshots.Take(context.WithoutCancel(ctx), id, point, cwd); err != nil {
		m.log.Warn("recording the workspace state", "session", id, "state", point, "err", err)
	}
}

// takeStartState records the workspace of a session as it starts, unless a
// start state exists (a resumed session keeps its first one).
func (m *Manager) takeStartState(ctx context.Context, id, cwd string) {
	if m.cfg.Snapshots == nil || m.cfg.Snapshots.Has(id, snapshot.PointStart) {
		return
	}
	m.takeState(ctx, id, cwd, snapshot.PointStart)
}

// Diff returns the changes of session id's workspace: since the session
// started (turn empty), or made during one of its turns. The states come
// from Config.Snapshots, on disk: the session need not be live, and a
// restart loses nothing. A sandboxed session's changes are in its
// workspace once committed (each turn's end): a turn's diff is from the
// workspace before it to the workspace after its commit, or to the
// workspace now while it runs (or when it never ended).
func (m *Manager) Diff(ctx context.Context, id, turn string) (snapshot.Diff, error) {
	s, err := m.get(ctx, id)
	if err != nil {
		return snapshot.Diff{}, err
	}
	if m.cfg.Snapshots == nil {
		return snapshot.Diff{}, fmt.Errorf("%w: this daemon keeps no workspace states", ErrUnavailable)
	}
	from, to := snapshot.PointStart, snapshot.Now
	if turn != "" {
		from = snapshot.TurnBefore(turn)
		if !m.cfg.Snapshots.Has(id, from) {
			return snapshot.Diff{}, fmt.Errorf("%w: turn %s of session %s (no workspace state was recorded for it)", ErrNotFound, turn, id)
		}
		if after := snapshot.TurnAfter(turn); m.cfg.Snapshots.Has(id, after) {
			to = after
		}
	}
	d, err := m.cfg.Snapshots.Diff(ctx, id, from, to, s.Cwd)
	if errors.Is(err, snapshot.ErrNoState) {
		return snapshot.Diff{}, fmt.Errorf("%w: session %s has no recorded start state (it began before this daemon kept them)", ErrNotFound, id)
	}
	return d, err
}

// Exec runs run with the sandbox of live session id and its limits: a
// caller's command beside the agent, under the session's policy. The
// session must be live and sandboxed (ErrNotLive, ErrNoSandbox: a
// session on the host has no boundary to run a caller's command in). It
// may run during a turn. What the command writes stays in the sandbox's
// workspace until the session's next commit (the end of the running or
// next turn, or the session's end), the same checkpoint as the agent's
// writes; it is never applied another way. An idle stop waits for the
// session's commands; deleting the session kills them.
func (m *Manager) Exec(ctx context.Context, id string, run func(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits) error) error {
	l, err := m.liveSession(ctx, id)
	if err != nil {
		return err
	}
	if l.sb == nil {
		return fmt.Errorf("%w: session %s runs on the host, so it has no sandbox to run a command in", ErrNoSandbox, id)
	}
	l.mu.Lock()
	switch {
	case l.stopping:
		l.mu.Unlock()
		return fmt.Errorf("%w: session %s is stopping", ErrNotLive, id)
	case l.execs >= MaxSessionExecs:
		n := l.execs // read under the lock: a command ending changes it
		l.mu.Unlock()
		return fmt.Errorf("%w: session %s runs %d already", ErrTooManyExecs, id, n)
	}
	l.execs++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.execs--
		if l.execs == 0 && l.turnCancel == nil && !l.stopping {
			l.idleLocked() // idle from now: the command kept it busy
		}
		l.mu.Unlock()
	}()
	err = run(ctx, l.sb, l.sbLimits)
	if errors.Is(err, sandbox.ErrClosed) {
		// The session ended while the command started.
		return fmt.Errorf("%w: session %s ended: %w", ErrNotLive, id, err)
	}
	return err
}

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// pauseAgent is the test agent whose sessions pause where they run
// (agent.Pauser), as a relayed session on a provider that pauses does;
// a pause fails with fail when it is set.
type pauseAgent struct {
	*testAgent
	mu     sync.Mutex
	fail   error
	pauses int
}

func (a *pauseAgent) Start(ctx context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	s, err := a.testAgent.Start(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	return pauseSession{s.(*testSession), a}, nil
}

type pauseSession struct {
	*testSession
	a *pauseAgent
}

func (s pauseSession) Pause(context.Context) error {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	if s.a.fail != nil {
		return s.a.fail
	}
	s.a.pauses++
	return nil
}

func (a *pauseAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pauses
}

func pauseManager(t *testing.T, idlePause time.Duration) (*engine.Manager, *pauseAgent) {
	t.Helper()
	pa := &pauseAgent{testAgent: &testAgent{exit: make(chan struct{})}}
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	reg.Register("pausable", pa)
	m := engine.New(engine.Config{Store: openStore(t, t.TempDir()), Agents: reg, WorkspaceDir: t.TempDir(), IdlePause: idlePause})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m, pa
}

func status(t *testing.T, m *engine.Manager, id string) engine.Status {
	t.Helper()
	s, err := m.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s.Status
}

// lastEnd is the session's last session.ended.
func lastEnd(t *testing.T, m *engine.Manager, id string) event.SessionEnded {
	t.Helper()
	evs, err := m.Events(t.Context(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var e event.SessionEnded
	for _, ev := range evs {
		if ev.Type == event.TypeSessionEnded {
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

// TestPause: only a session whose agent can pause where it runs is
// paused, only at rest; a paused session shows it, its run ended with
// reason paused, and its next message resumes it; a pause that fails
// leaves the session live; a paused session deleted is ended.
func TestPause(t *testing.T) {
	m, pa := pauseManager(t, 0)
	ctx := t.Context()
	local, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, local.ID); !errors.Is(err, engine.ErrNotPausable) {
		t.Fatalf("pause of a session whose agent cannot pause: %v", err)
	}
	if _, err := m.Pause(ctx, "ses_nope"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("pause of an unknown session: %v", err)
	}

	s, err := m.Create(ctx, engine.CreateParams{Agent: "pausable"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("block")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, s.ID); !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("pause while a turn runs: %v", err)
	}
	if _, err := m.Interrupt(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	_ = turn

	pa.mu.Lock()
	pa.fail = errors.New("the provider refused")
	pa.mu.Unlock()
	if _, err := m.Pause(ctx, s.ID); err == nil || errors.Is(err, engine.ErrNotPausable) {
		t.Fatalf("a pause the agent fails: %v", err)
	}
	if st := status(t, m, s.ID); st != engine.StatusIdle {
		t.Fatalf("after a failed pause the session is %s, want idle", st)
	}
	pa.mu.Lock()
	pa.fail = nil
	pa.mu.Unlock()

	got, err := m.Pause(ctx, s.ID)
	if err != nil || got.Status != engine.StatusPaused {
		t.Fatalf("pause = %+v, %v; want paused", got.Status, err)
	}
	if e := lastEnd(t, m, s.ID); e.Reason != event.EndPaused {
		t.Fatalf("the paused run ended %+v, want reason paused", e)
	}
	if got, err := m.Pause(ctx, s.ID); err != nil || got.Status != engine.StatusPaused || pa.count() != 1 {
		t.Fatalf("pause of a paused session = %+v, %v (%d pauses); want it as it is", got.Status, err, pa.count())
	}
	if _, err := m.Interrupt(ctx, s.ID); !errors.Is(err, engine.ErrNotLive) {
		t.Fatalf("interrupt of a paused session: %v", err)
	}

	// Its next message resumes it.
	before, _ := m.Events(ctx, s.ID, 0, 1000)
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("message to a paused session: %v", err)
	}
	evs := waitFor(t, m, s.ID, before[len(before)-1].Seq, event.TypeTurnCompleted)
	if evs[0].Type != event.TypeSessionStarted {
		t.Fatalf("after the pause: %v, want session.started first", types(evs))
	}
	var started event.SessionStarted
	if err := json.Unmarshal(evs[0].Data, &started); err != nil || !started.Resumed {
		t.Fatalf("session.started after the pause: %s", evs[0].Data)
	}

	// A paused session deleted is ended: no message resumes it.
	if _, err := m.Pause(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if st := status(t, m, s.ID); st != engine.StatusEnded {
		t.Fatalf("a deleted paused session is %s, want ended", st)
	}
}

// TestIdlePause: with Config.IdlePause a pausable session at rest is
// paused by itself, and resumed by its next message.
func TestIdlePause(t *testing.T) {
	m, pa := pauseManager(t, 20*time.Millisecond)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "pausable"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, s.ID, 0, event.TypeSessionEnded)
	if e := lastEnd(t, m, s.ID); e.Reason != event.EndPaused || pa.count() != 1 || status(t, m, s.ID) != engine.StatusPaused {
		t.Fatalf("idle pause: %+v, %d pauses, status %s", e, pa.count(), status(t, m, s.ID))
	}
	before, _ := m.Events(ctx, s.ID, 0, 1000)
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("message to an idle-paused session: %v", err)
	}
	waitFor(t, m, s.ID, before[len(before)-1].Seq, event.TypeTurnCompleted)
}

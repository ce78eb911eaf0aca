package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// lifecycleManager is a manager with a resumable agent "test", one that
// cannot resume ("noresume"), and the given cap and idle timeout.
func lifecycleManager(t *testing.T, maxLive int, idle time.Duration) (*engine.Manager, *testAgent) {
	t.Helper()
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("test", ta)
	reg.Register("noresume", &testAgent{exit: make(chan struct{}), noResume: true})
	m := engine.New(engine.Config{Store: openStore(t, t.TempDir()), Agents: reg, WorkspaceDir: t.TempDir(),
		MaxLive: maxLive, IdleTimeout: idle})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m, ta
}

func sessionCount(t *testing.T, m *engine.Manager) int {
	t.Helper()
	ss, err := m.List(t.Context(), engine.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(ss)
}

// TestLiveCap: past Config.MaxLive, creates and resumes are refused with a
// LiveCapError before anything is stored or started; ending a session
// frees its slot.
func TestLiveCap(t *testing.T) {
	m, _ := lifecycleManager(t, 2, 0)
	ctx := t.Context()
	var ids []string
	for range 2 {
		s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	_, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	var capErr *engine.LiveCapError
	if !errors.Is(err, engine.ErrTooManyLive) || !errors.As(err, &capErr) || capErr.Max != 2 || capErr.RetryAfter <= 0 {
		t.Fatalf("create over the cap: %v", err)
	}
	if n := sessionCount(t, m); n != 2 {
		t.Fatalf("%d sessions stored after a refused create, want 2", n)
	}
	// End one: its slot is free, and resuming it is a start like any other.
	if err := m.Delete(ctx, ids[0], false); err != nil {
		t.Fatal(err)
	}
	s3, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatalf("create after a session ended: %v", err)
	}
	if _, err := m.Resume(ctx, ids[0], nil); !errors.Is(err, engine.ErrTooManyLive) {
		t.Fatalf("resume over the cap: %v", err)
	}
	if err := m.Delete(ctx, s3.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, ids[0], nil); err != nil {
		t.Fatalf("resume within the cap: %v", err)
	}
}

// TestLiveCapConcurrentCreates: many creates at once never start more
// agents than the cap.
func TestLiveCapConcurrentCreates(t *testing.T) {
	const max, n = 3, 12
	m, _ := lifecycleManager(t, max, 0)
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
			errs <- err
		}()
	}
	ok := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, engine.ErrTooManyLive):
			t.Errorf("create: %v", err)
		}
	}
	if ok != max {
		t.Fatalf("%d creates succeeded, want %d", ok, max)
	}
}

// TestResumeLiveSaysWhatToDo: resuming a live session is refused with a
// message telling the client to send messages directly.
func TestResumeLiveSaysWhatToDo(t *testing.T) {
	m, _ := lifecycleManager(t, 0, 0)
	s, err := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Resume(t.Context(), s.ID, nil)
	if !errors.Is(err, engine.ErrLive) || !strings.Contains(err.Error(), "send messages to it directly") ||
		!strings.Contains(err.Error(), "/v1/sessions/"+s.ID+"/messages") {
		t.Fatalf("resume of a live session: %v", err)
	}
}

func endedEvent(t *testing.T, evs []event.Event) *event.SessionEnded {
	t.Helper()
	p, err := evs[len(evs)-1].Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p.(*event.SessionEnded)
}

// TestIdleStopAndTransparentResume: an idle agent is stopped after the
// idle timeout (session.ended, reason idle; status stopped), the next
// message resumes it from its native id with the env its client gave at
// create, and stopped sessions do not count toward the live cap.
func TestIdleStopAndTransparentResume(t *testing.T) {
	m, ta := lifecycleManager(t, 1, 50*time.Millisecond)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test", Env: map[string]string{"API_KEY": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeSessionEnded)
	if e := endedEvent(t, evs); e.Reason != event.EndIdle || !strings.Contains(e.Message, "next message resumes") {
		t.Fatalf("session.ended %+v", e)
	}
	got, err := m.Get(ctx, s.ID)
	if err != nil || got.Status != engine.StatusStopped {
		t.Fatalf("after the idle stop: %+v, %v", got, err)
	}

	// The stopped session holds no slot: another session can start (one
	// whose agent cannot resume, so it is never stopped and keeps its slot).
	other, err := m.Create(ctx, engine.CreateParams{Agent: "noresume"})
	if err != nil {
		t.Fatalf("create while the only other session is stopped: %v", err)
	}
	// Now the message that would bring the stopped session live is over
	// the cap.
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, engine.ErrTooManyLive) {
		t.Fatalf("message to a stopped session over the cap: %v", err)
	}
	if err := m.Delete(ctx, other.ID, false); err != nil {
		t.Fatal(err)
	}

	last := evs[len(evs)-1].Seq
	turn, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")})
	if err != nil {
		t.Fatalf("message to a stopped session: %v", err)
	}
	evs = waitFor(t, m, s.ID, last, event.TypeTurnCompleted)
	if evs[0].Type != event.TypeSessionStarted {
		t.Fatalf("after the resume: %v", types(evs))
	}
	p, _ := evs[0].Decode()
	if !p.(*event.SessionStarted).Resumed {
		t.Fatal("session.started does not say resumed")
	}
	if evs[len(evs)-1].TurnID != turn {
		t.Fatalf("turn.completed of %s, want %s", evs[len(evs)-1].TurnID, turn)
	}
	ta.mu.Lock()
	resumed, envs := fmt.Sprint(ta.resumed), fmt.Sprint(ta.envs)
	ta.mu.Unlock()
	if resumed != "[native-1]" || envs != "[map[API_KEY:k1] map[API_KEY:k1]]" {
		t.Fatalf("resumed %s with envs %s", resumed, envs)
	}

	// Stopped again once idle; a delete then ends it for good.
	evs = waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeSessionEnded)
	if e := endedEvent(t, evs); e.Reason != event.EndIdle {
		t.Fatalf("second session.ended %+v", e)
	}
	if err := m.Delete(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get(ctx, s.ID); got.Status != engine.StatusEnded {
		t.Fatalf("deleted stopped session is %s", got.Status)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, engine.ErrNotLive) {
		t.Fatalf("message to an ended session: %v", err)
	}
}

// TestIdleTimeoutSparesTurnsAndNonResumable: a running turn is never
// stopped for idleness, nor is the agent of a session it could not resume.
func TestIdleTimeoutSparesTurnsAndNonResumable(t *testing.T) {
	m, _ := lifecycleManager(t, 0, 30*time.Millisecond)
	ctx := t.Context()
	n, err := m.Create(ctx, engine.CreateParams{Agent: "noresume"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// A turn waiting on a permission outlasts the idle timeout many times.
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("perm")}); err != nil {
		t.Fatal(err)
	}
	pid := pendingID(t, m, s.ID, 0, event.TypePermissionRequested)
	time.Sleep(200 * time.Millisecond) // several idle timeouts
	if got, _ := m.Get(ctx, s.ID); got.Status != engine.StatusRunning {
		t.Fatalf("session with a running turn is %s", got.Status)
	}
	if _, err := m.AnswerPermission(ctx, s.ID, pid, agent.PermissionAnswer{Decision: event.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeSessionEnded)
	if !containsType(evs, event.TypeTurnCompleted) {
		t.Fatalf("stopped before the turn completed: %v", types(evs))
	}
	if got, _ := m.Get(ctx, n.ID); got.Status != engine.StatusIdle {
		t.Fatalf("session whose agent cannot resume is %s", got.Status)
	}
}

func containsType(evs []event.Event, typ event.Type) bool {
	for _, e := range evs {
		if e.Type == typ {
			return true
		}
	}
	return false
}

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testAgent is a tiny adapter whose behaviour is chosen by the prompt text.
type testAgent struct {
	exit     chan struct{}
	noResume bool
	mu       sync.Mutex
	resumed  []string // native ids it was asked to resume
	envs     []map[string]string
	mcps     [][]agent.MCPServer
}

func (a *testAgent) Info(context.Context) agent.Info {
	return agent.Info{Title: "test", Available: true, Installed: true, Capabilities: agent.Capabilities{Resume: !a.noResume}}
}

func (a *testAgent) Start(_ context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	a.mu.Lock()
	if cfg.NativeSessionID != "" {
		a.resumed = append(a.resumed, cfg.NativeSessionID)
	}
	a.envs = append(a.envs, cfg.Env)
	a.mcps = append(a.mcps, cfg.MCPServers)
	a.mu.Unlock()
	if err := h.SetNativeSessionID(context.Background(), "native-1"); err != nil {
		return nil, err
	}
	return &testSession{h: h, done: a.exit}, nil
}

type testSession struct {
	h    agent.Host
	done chan struct{}
}

func (s *testSession) say(ctx context.Context, text string) error {
	it := event.Item{ID: "item_" + text, Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant, Content: []event.ContentPart{event.TextPart(text)}}
	return s.h.Emit(ctx, event.New(event.SourceAgent, &event.ItemCompleted{Item: it}))
}

func (s *testSession) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	switch in.Text() {
	case "perm":
		ans, err := s.h.RequestPermission(ctx, agent.PermissionRequest{Kind: event.PermCommand, Title: "run ls"})
		if err != nil {
			return agent.Result{}, err
		}
		return agent.Result{}, s.say(ctx, fmt.Sprintf("%s by %s", ans.Decision, ans.By))
	case "flood":
		// Asks for floodAsks permissions at once and reports how many the
		// daemon denied without asking anyone.
		var wg sync.WaitGroup
		var byDaemon atomic.Int32
		for range floodAsks {
			wg.Go(func() {
				ans, err := s.h.RequestPermission(ctx, agent.PermissionRequest{Kind: event.PermCommand, Title: "run ls"})
				if err == nil && ans.By == event.ByPolicy && ctx.Err() == nil {
					byDaemon.Add(1)
					_ = s.say(ctx, "denied by the daemon")
				}
			})
		}
		wg.Wait()
		return agent.Result{}, s.say(context.WithoutCancel(ctx), fmt.Sprintf("daemon denied %d", byDaemon.Load()))
	case "flood-mixed":
		// Asks floodAsks/2 permissions and floodAsks/2 questions at once,
		// and reports how many of each the daemon refused without asking.
		var wg sync.WaitGroup
		var perms, questions atomic.Int32
		for i := range floodAsks {
			wg.Go(func() {
				if i%2 == 0 {
					ans, err := s.h.RequestPermission(ctx, agent.PermissionRequest{Kind: event.PermCommand, Title: "run ls"})
					if err == nil && ans.By == event.ByPolicy && ctx.Err() == nil {
						perms.Add(1)
					}
					return
				}
				ans, err := s.h.AskQuestion(ctx, agent.Question{Prompt: "colour?", Options: []event.QuestionOption{{ID: "r", Label: "red"}}})
				if err == nil && ans.Cancelled && ctx.Err() == nil {
					questions.Add(1)
				}
			})
		}
		wg.Wait()
		return agent.Result{}, s.say(context.WithoutCancel(ctx), fmt.Sprintf("daemon denied %d permissions and %d questions", perms.Load(), questions.Load()))
	case "question":
		ans, err := s.h.AskQuestion(ctx, agent.Question{Prompt: "colour?", Options: []event.QuestionOption{{ID: "r", Label: "red"}}})
		if err != nil {
			return agent.Result{}, err
		}
		return agent.Result{}, s.say(ctx, "answer "+ans.Text)
	case "block":
		<-ctx.Done()
		return agent.Result{StopReason: event.StopInterrupted}, nil
	case "fail":
		return agent.Result{}, errors.New("boom")
	case "half":
		it := event.Item{ID: "item_half", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "make"}
		return agent.Result{}, s.h.Emit(ctx, event.New(event.SourceAgent, &event.ItemStarted{Item: it}),
			event.New(event.SourceAgent, &event.ItemDelta{ItemID: it.ID, Field: event.DeltaOutput, Delta: "partial "}),
			event.New(event.SourceAgent, &event.ItemDelta{ItemID: it.ID, Field: event.DeltaOutput, Delta: "output"}))
	case "exit":
		close(s.done)
		<-ctx.Done()
		return agent.Result{}, nil
	case "exit-own":
		// As a real adapter: the process is gone (done), and the turn
		// fails with the adapter's account of it a moment later, unless
		// its context is cancelled first.
		close(s.done)
		select {
		case <-ctx.Done():
			return agent.Result{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return agent.Result{}, errors.New("the CLI exited with code 3: crashed")
		}
	}
	return agent.Result{Usage: &event.Usage{InputTokens: 1, OutputTokens: 2}}, s.say(ctx, "hello")
}

func (s *testSession) Close(context.Context) error { return nil }

// exitSession adds agent.Exiter.
type exitSession struct{ *testSession }

func (s exitSession) Done() <-chan struct{} { return s.done }
func (s exitSession) Exit() event.SessionEnded {
	code := 3
	return event.SessionEnded{Reason: event.EndError, ExitCode: &code, StderrTail: "crashed"}
}

type exitAgent struct{ testAgent }

func (a *exitAgent) Start(ctx context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	s, err := a.testAgent.Start(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	return exitSession{s.(*testSession)}, nil
}

func newManager(t *testing.T, st store.Store, permTimeout time.Duration) *engine.Manager {
	t.Helper()
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	reg.Register("exiter", &exitAgent{testAgent{exit: make(chan struct{})}})
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), PermissionTimeout: permTimeout})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m
}

func openStore(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// waitFor reads the session's stream until an event of type typ arrives and
// returns everything read.
func waitFor(t *testing.T, m *engine.Manager, id string, after int64, typ event.Type) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ch, err := m.Subscribe(ctx, id, after)
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	for e := range ch {
		got = append(got, e)
		if e.Type == typ {
			return got
		}
	}
	t.Fatalf("no %s event; got %v", typ, types(got))
	return nil
}

func types(evs []event.Event) []event.Type {
	out := make([]event.Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func lastText(t *testing.T, evs []event.Event) string {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == event.TypeItemCompleted {
			p, err := evs[i].Decode()
			if err != nil {
				t.Fatal(err)
			}
			return p.(*event.ItemCompleted).Item.Text()
		}
	}
	return ""
}

func TestTurnLifecycle(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != engine.StatusIdle {
		t.Fatalf("status %s, want idle", s.Status)
	}
	turn, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")})
	if err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	want := []event.Type{event.TypeSessionStarted, event.TypeTurnStarted, event.TypeItemStarted, event.TypeItemCompleted, event.TypeItemCompleted, event.TypeTurnCompleted}
	if fmt.Sprint(types(evs)) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", types(evs), want)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		if i > 0 && e.TurnID != turn {
			t.Errorf("event %d (%s) has turn %q, want %q", i, e.Type, e.TurnID, turn)
		}
		if i > 0 && e.NativeSessionID != "native-1" {
			t.Errorf("event %d has native session %q", i, e.NativeSessionID)
		}
	}
	p, _ := evs[len(evs)-1].Decode()
	if tc := p.(*event.TurnCompleted); tc.StopReason != event.StopEndTurn || tc.Usage == nil || tc.Usage.OutputTokens != 2 {
		t.Fatalf("turn.completed %+v", tc)
	}
	got, err := m.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != engine.StatusIdle || got.NativeSessionID != "native-1" {
		t.Fatalf("after turn: %+v", got)
	}
}

func TestCreateErrors(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	for _, tc := range []struct {
		name string
		p    engine.CreateParams
		want error
	}{
		{"unknown agent", engine.CreateParams{Agent: "nope"}, agent.ErrUnknown},
		{"bad permission mode", engine.CreateParams{Agent: "test", PermissionMode: "yolo"}, engine.ErrInvalid},
		{"relative cwd", engine.CreateParams{Agent: "test", Cwd: "rel"}, engine.ErrInvalid},
		{"missing cwd", engine.CreateParams{Agent: "test", Cwd: "/nonexistent/dir"}, engine.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Create(t.Context(), tc.p); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			ss, err := m.List(t.Context(), engine.ListOptions{})
			if err != nil || len(ss) != 0 {
				t.Fatalf("sessions stored after a rejected create: %v %v", ss, err)
			}
		})
	}
}

func TestBusyAndInterrupt(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, err := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Interrupt(ctx, s.ID); !errors.Is(err, engine.ErrNoTurn) {
		t.Fatalf("interrupt without turn: %v", err)
	}
	turn, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("block")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("second send: %v, want ErrBusy", err)
	}
	got, err := m.Interrupt(ctx, s.ID)
	if err != nil || got != turn {
		t.Fatalf("interrupt: %q %v", got, err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	p, _ := evs[len(evs)-1].Decode()
	if tc := p.(*event.TurnCompleted); tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s", tc.StopReason)
	}
	// The session takes a new turn afterwards.
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatalf("send after interrupt: %v", err)
	}
	waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
}

func TestAgentErrorKeepsSessionUsable(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, _ := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("fail")}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	if evs[len(evs)-2].Type != event.TypeError {
		t.Fatalf("no error event before turn.completed: %v", types(evs))
	}
	p, _ := evs[len(evs)-1].Decode()
	if p.(*event.TurnCompleted).StopReason != event.StopError {
		t.Fatal("stop reason not error")
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
}

func pendingID(t *testing.T, m *engine.Manager, sid string, after int64, typ event.Type) string {
	t.Helper()
	evs := waitFor(t, m, sid, after, typ)
	p, _ := evs[len(evs)-1].Decode()
	switch v := p.(type) {
	case *event.PermissionRequested:
		return v.ID
	case *event.QuestionRequested:
		return v.ID
	}
	t.Fatalf("unexpected %T", p)
	return ""
}

func TestPermissions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   *agent.PermissionAnswer
		timeout  time.Duration
		wantText string
	}{
		{"allow", &agent.PermissionAnswer{Decision: event.DecisionAllow}, time.Minute, "allow by user"},
		{"deny", &agent.PermissionAnswer{Decision: event.DecisionDeny, Message: "no"}, time.Minute, "deny by user"},
		{"timeout", nil, 50 * time.Millisecond, "deny by timeout"},
		// A client's own rule (no person asked) is recorded as such; a
		// client cannot pass its answer off as the daemon's.
		{"client rule", &agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByPolicy}, time.Minute, "deny by policy"},
		{"forged timeout", &agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByTimeout}, time.Minute, "deny by user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t, openStore(t, t.TempDir()), tc.timeout)
			ctx := t.Context()
			s, _ := m.Create(ctx, engine.CreateParams{Agent: "test"})
			if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("perm")}); err != nil {
				t.Fatal(err)
			}
			pid := pendingID(t, m, s.ID, 0, event.TypePermissionRequested)
			if tc.answer != nil {
				ev, err := m.AnswerPermission(ctx, s.ID, pid, *tc.answer)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Type != event.TypePermissionResolved {
					t.Fatalf("answer returned %s", ev.Type)
				}
				p, _ := ev.Decode()
				if by := string(p.(*event.PermissionResolved).By); !strings.HasSuffix(tc.wantText, " by "+by) {
					t.Fatalf("recorded by %q, the agent was to see %q", by, tc.wantText)
				}
			}
			evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
			if got := lastText(t, evs); got != tc.wantText {
				t.Fatalf("agent saw %q, want %q", got, tc.wantText)
			}
			// A second answer is refused and changes nothing.
			before, _ := m.Events(ctx, s.ID, 0, 1000)
			_, err := m.AnswerPermission(ctx, s.ID, pid, agent.PermissionAnswer{Decision: event.DecisionAllow})
			if !errors.Is(err, store.ErrAlreadyResolved) {
				t.Fatalf("second answer: %v", err)
			}
			after, _ := m.Events(ctx, s.ID, 0, 1000)
			if len(after) != len(before) {
				t.Fatalf("second answer appended %d events", len(after)-len(before))
			}
			reqs, _ := m.Requests(ctx, s.ID, engine.StatePending)
			if len(reqs) != 0 {
				t.Fatalf("pending requests left: %v", reqs)
			}
		})
	}
}

func TestPermissionBadAnswers(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, _ := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("perm")}); err != nil {
		t.Fatal(err)
	}
	pid := pendingID(t, m, s.ID, 0, event.TypePermissionRequested)
	for _, tc := range []struct {
		name     string
		sid, pid string
		ans      agent.PermissionAnswer
		want     error
	}{
		{"bad decision", s.ID, pid, agent.PermissionAnswer{Decision: "maybe"}, engine.ErrInvalid},
		{"unknown option", s.ID, pid, agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "x"}, engine.ErrInvalid},
		{"contradicting option", s.ID, pid, agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "deny"}, engine.ErrInvalid},
		{"unknown permission", s.ID, "perm_x", agent.PermissionAnswer{Decision: event.DecisionAllow}, engine.ErrNotFound},
		{"unknown session", "ses_x", pid, agent.PermissionAnswer{Decision: event.DecisionAllow}, engine.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.AnswerPermission(ctx, tc.sid, tc.pid, tc.ans); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := m.AnswerPermission(ctx, s.ID, pid, agent.PermissionAnswer{Decision: event.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
}

func TestQuestion(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, _ := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("question")}); err != nil {
		t.Fatal(err)
	}
	qid := pendingID(t, m, s.ID, 0, event.TypeQuestionRequested)
	if _, err := m.AnswerPermission(ctx, s.ID, qid, agent.PermissionAnswer{Decision: event.DecisionAllow}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("answering a question as a permission: %v", err)
	}
	if _, err := m.AnswerQuestion(ctx, s.ID, qid, agent.Answer{OptionID: "r"}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	if got := lastText(t, evs); got != "answer red" {
		t.Fatalf("agent saw %q", got)
	}
}

func TestAgentExitEndsSession(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, _ := m.Create(ctx, engine.CreateParams{Agent: "exiter"})
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("exit")}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeSessionEnded)
	p, _ := evs[len(evs)-1].Decode()
	end := p.(*event.SessionEnded)
	if end.Reason != event.EndError || end.ExitCode == nil || *end.ExitCode != 3 || end.StderrTail != "crashed" {
		t.Fatalf("session.ended %+v", end)
	}
	got, _ := m.Get(ctx, s.ID)
	if got.Status != engine.StatusFailed {
		t.Fatalf("status %s", got.Status)
	}
	// The turn the agent died in failed; it was not "interrupted".
	tail := evs[len(evs)-3:]
	if fmt.Sprint(types(tail)) != fmt.Sprint([]event.Type{event.TypeError, event.TypeTurnCompleted, event.TypeSessionEnded}) {
		t.Fatalf("tail %v", types(tail))
	}
	tp, _ := tail[1].Decode()
	if tc := tp.(*event.TurnCompleted); tc.StopReason != event.StopError || tc.Message != "the agent process exited with code 3" {
		t.Fatalf("turn.completed %+v", tc)
	}
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("hi")}); !errors.Is(err, engine.ErrNotLive) {
		t.Fatalf("send to ended session: %v", err)
	}
}

func TestDeleteAndPurge(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	ctx := t.Context()
	s, _ := m.Create(ctx, engine.CreateParams{Agent: "test"})
	if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart("perm")}); err != nil {
		t.Fatal(err)
	}
	pendingID(t, m, s.ID, 0, event.TypePermissionRequested)
	if err := m.Delete(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	evs, _ := m.Events(ctx, s.ID, 0, 1000)
	if last := evs[len(evs)-1]; last.Type != event.TypeSessionEnded {
		t.Fatalf("last event %s", last.Type)
	}
	if reqs, _ := m.Requests(ctx, s.ID, engine.StatePending); len(reqs) != 0 {
		t.Fatalf("pending left: %v", reqs)
	}
	if err := m.Delete(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, s.ID); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("get after purge: %v", err)
	}
	if err := m.Delete(ctx, s.ID, true); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("second purge: %v", err)
	}
}

// TestRecoverTakesOver: a session left running by a daemon that is gone
// (its lease expired) is taken over at start: its turn and session end as
// interrupted, saying so, and it is stopped, so that its next message
// resumes it.
func TestRecoverTakesOver(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	// A session left running by a "previous daemon": created through a
	// manager whose Shutdown never runs, and whose lease lapses at once.
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	old := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), LeaseTTL: time.Nanosecond})
	s, err := old.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("perm")}); err != nil {
		t.Fatal(err)
	}
	pendingID(t, old, s.ID, 0, event.TypePermissionRequested)

	m := newManager(t, st, time.Minute)
	n, err := m.Recover(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	got, _ := m.Get(t.Context(), s.ID)
	if got.Status != engine.StatusStopped {
		t.Fatalf("status %s", got.Status)
	}
	if reqs, _ := m.Requests(t.Context(), s.ID, engine.StatePending); len(reqs) != 0 {
		t.Fatalf("pending left: %v", reqs)
	}
	evs, err := m.Events(t.Context(), s.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := evs[len(evs)-3:]
	var turn event.TurnCompleted
	var ended event.SessionEnded
	if tail[0].Type != event.TypePermissionResolved || tail[1].Type != event.TypeTurnCompleted || tail[2].Type != event.TypeSessionEnded ||
		json.Unmarshal(tail[1].Data, &turn) != nil || json.Unmarshal(tail[2].Data, &ended) != nil ||
		turn.StopReason != event.StopInterrupted || ended.Reason != event.EndInterrupted ||
		!strings.Contains(ended.Message, old.DaemonID()) || !strings.Contains(ended.Message, m.DaemonID()) {
		t.Fatalf("the log does not end with the takeover: %+v", tail)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentSessions(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			s, err := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
			if err != nil {
				t.Error(err)
				return
			}
			var after int64
			for range 3 {
				if _, err := m.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
					t.Error(err)
					return
				}
				evs := waitFor(t, m, s.ID, after, event.TypeTurnCompleted)
				after = evs[len(evs)-1].Seq
			}
		})
	}
	wg.Wait()
}

func TestShutdownInterruptsLiveSessions(t *testing.T) {
	st := openStore(t, t.TempDir())
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	s, _ := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if _, err := m.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("block")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := m.Get(t.Context(), s.ID)
	if got.Status != engine.StatusInterrupted {
		t.Fatalf("status %s", got.Status)
	}
	evs, _ := m.Events(t.Context(), s.ID, 0, 100)
	want := []event.Type{event.TypeTurnCompleted, event.TypeSessionEnded}
	if tail := types(evs[len(evs)-2:]); fmt.Sprint(tail) != fmt.Sprint(want) {
		t.Fatalf("tail %v", tail)
	}
	if _, err := m.Create(t.Context(), engine.CreateParams{Agent: "test"}); !errors.Is(err, engine.ErrShuttingDown) {
		t.Fatalf("create after shutdown: %v", err)
	}
}

func TestResume(t *testing.T) {
	st := openStore(t, t.TempDir())
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("test", ta)
	reg.Register("noresume", &testAgent{exit: make(chan struct{}), noResume: true})
	old := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	s, err := old.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := old.Create(t.Context(), engine.CreateParams{Agent: "noresume"})
	if _, err := old.Resume(t.Context(), s.ID, nil); !errors.Is(err, engine.ErrLive) {
		t.Fatalf("resume of a live session: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Resume(t.Context(), n.ID, nil); !errors.Is(err, engine.ErrNotResumable) {
		t.Fatalf("resume without the capability: %v", err)
	}
	if _, err := m.Resume(t.Context(), "ses_nope", nil); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("resume of an unknown session: %v", err)
	}
	before, _ := m.Events(t.Context(), s.ID, 0, 1000)
	got, err := m.Resume(t.Context(), s.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != engine.StatusIdle || got.EndedAt != nil {
		t.Fatalf("resumed session %+v", got)
	}
	ta.mu.Lock()
	resumed := fmt.Sprint(ta.resumed)
	ta.mu.Unlock()
	if resumed != "[native-1]" {
		t.Fatalf("adapter asked to resume %s", resumed)
	}
	evs := waitFor(t, m, s.ID, before[len(before)-1].Seq, event.TypeSessionStarted)
	p, _ := evs[len(evs)-1].Decode()
	if !p.(*event.SessionStarted).Resumed {
		t.Fatal("session.started does not say resumed")
	}
	if _, err := m.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
}

// TestOpenItemsClosedAtTurnEnd: an item the agent started and never
// completed is completed as failed before turn.completed.
func TestOpenItemsClosedAtTurnEnd(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	s, _ := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if _, err := m.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("half")}); err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, s.ID, 0, event.TypeTurnCompleted)
	last := evs[len(evs)-2]
	p, _ := last.Decode()
	ic, ok := p.(*event.ItemCompleted)
	if !ok || ic.Item.ID != "item_half" || ic.Item.Status != event.StatusFailed || ic.Item.Command != "make" || ic.Item.Error == "" || ic.Item.Output != "partial output" {
		t.Fatalf("before turn.completed: %s %s", last.Type, last.Data)
	}
}

// TestAgentExitTurnFailsByItself: when the agent process dies mid-turn, the
// engine lets the turn fail with the adapter's own account of the exit
// (adapters no longer wait for the engine), and a turn cancelled anyway
// says why, not "context canceled".
func TestAgentExitTurnFailsByItself(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"exit-own", "the CLI exited with code 3: crashed"},
		{"exit", "the agent process exited with code 3"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			m := newManager(t, openStore(t, t.TempDir()), time.Minute)
			ctx := t.Context()
			s, _ := m.Create(ctx, engine.CreateParams{Agent: "exiter"})
			if _, err := m.Send(ctx, s.ID, []event.ContentPart{event.TextPart(tc.text)}); err != nil {
				t.Fatal(err)
			}
			evs := waitFor(t, m, s.ID, 0, event.TypeSessionEnded)
			var tc0 *event.TurnCompleted
			for _, e := range evs {
				if e.Type == event.TypeTurnCompleted {
					p, _ := e.Decode()
					tc0 = p.(*event.TurnCompleted)
				}
			}
			if tc0 == nil || tc0.StopReason != event.StopError || tc0.Message != tc.want {
				t.Fatalf("turn.completed %+v, want error %q", tc0, tc.want)
			}
		})
	}
}

package codex

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// The end-to-end tests run the real Codex CLI (installed by `make test`
// into the agent cache) through agentbox's HTTP API against
// internal/fakellm.

const fakeKey = "sk-fake-e2e"

// testModel has real metadata in Codex 0.171.0, so Codex offers the
// freeform apply_patch tool (file changes) as well as exec_command.
const testModel = "gpt-5.5"

// codexBinary finds the installed CLI, failing (not skipping) without it.
func codexBinary(t testing.TB) func() (string, string, error) {
	t.Helper()
	in := agenttest.RequireInstalled(t, Name)
	return func() (string, string, error) { return in.Binary, in.Version, nil }
}

// codexHome makes a CODEX_HOME outside /tmp (t.TempDir is under /tmp,
// where Codex refuses to set up its sandbox helper).
func codexHome(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "agentbox-codex-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// stack is the shared e2e stack with this adapter registered (pointed at
// the fake LLM through its options); sessions run outside /tmp, for the
// sandbox.
type stack struct {
	*agenttest.Stack
	adapter *adapter
}

func newStack(t testing.TB) *stack {
	t.Helper()
	return newStackWith(t, nil)
}

// newStackWith is newStack with extra fakellm scenarios.
func newStackWith(t testing.TB, scenarios map[string]*fakellm.Scenario) *stack {
	t.Helper()
	bin := codexBinary(t)
	var a *adapter
	s := agenttest.NewStack(t, agenttest.StackOptions{
		Name: Name,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			noRetries, oneRetry := 0, 1
			a = New(Options{Binary: bin, APIKey: fakeKey, Home: codexHome(t), Model: testModel,
				BaseURL: llm.URL(""), Retries: &noRetries,
				// A loopback stream that breaks off is tried again, as Codex does
				// by default; an upstream error fails at once.
				StreamRetries: &oneRetry}).(*adapter)
			// Registered before the stack's cleanup: runs after its shutdown.
			t.Cleanup(func() {
				a.mu.Lock()
				n := len(a.servers)
				a.mu.Unlock()
				if n != 0 {
					t.Errorf("%d app-server(s) still running after shutdown", n)
				}
			})
			return a
		},
		URLSuffix: "/v1",
		Cwd:       codexHome,
		Scenarios: scenarios,
	})
	return &stack{Stack: s, adapter: a}
}

func TestE2EWriteFile(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioWrite)
	ses, cwd := s.Create(t, "accept_edits", nil)
	if ses.NativeSessionID == "" {
		t.Error("the session has no native session id")
	}
	start := time.Now()
	tc, evs := s.Turn(t, ses.ID, "Create the file please", nil)
	t.Logf("write turn: %s", time.Since(start))
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	b, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "hi" { // apply_patch ends it with a newline
		t.Errorf("hello.txt: %q, %v", b, err)
	}
	its := agenttest.Items(t, evs)
	fc := agenttest.FindItem(its, event.ItemFileChange)
	if fc == nil || len(fc.Changes) != 1 || fc.Changes[0].Kind != event.FileAdd || fc.Changes[0].Diff == "" || fc.Status != event.StatusCompleted {
		t.Errorf("file change %+v\n%s", fc, agenttest.Dump(evs))
	}
	if got := agenttest.LastMessage(its); got != "done" {
		t.Errorf("last message %q", got)
	}
	if tc.Usage == nil || tc.Usage.InputTokens == 0 {
		t.Errorf("usage %+v", tc.Usage)
	}
	for _, e := range evs {
		if e.Type == event.TypePermissionRequested {
			t.Errorf("accept_edits asked: %s", e.Data)
		}
	}
}

func TestE2EPermission(t *testing.T) {
	for _, decision := range []string{"allow", "deny"} {
		t.Run(decision, func(t *testing.T) {
			s := newStack(t)
			s.SetScenario(fakellm.ScenarioPermission)
			ses, cwd := s.Create(t, "default", nil)
			var req *event.PermissionRequested
			tc, evs := s.Turn(t, ses.ID, "Run the command please", func(e event.Event) {
				if e.Type == event.TypePermissionRequested {
					req = new(event.PermissionRequested)
					_ = json.Unmarshal(e.Data, req)
				}
				s.Answer(t, ses.ID, decision)(e)
			})
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
			}
			if req == nil || req.Kind != event.PermCommand || !strings.Contains(req.Detail, "approved.txt") {
				t.Fatalf("permission request %+v\n%s", req, agenttest.Dump(evs))
			}
			for _, o := range req.Options {
				if o.Kind == event.OptionAllowAlways {
					t.Errorf("offered %+v although the request does not list acceptForSession", o)
				}
			}
			_, err := os.Stat(filepath.Join(cwd, "approved.txt"))
			cmd := agenttest.FindItem(agenttest.Items(t, evs), event.ItemCommand)
			if decision == "allow" {
				if err != nil {
					t.Errorf("approved.txt: %v", err)
				}
				if cmd == nil || cmd.Status != event.StatusCompleted || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
					t.Errorf("command %+v", cmd)
				}
			} else {
				if err == nil {
					t.Error("approved.txt exists after deny")
				}
				if cmd == nil || cmd.Status != event.StatusDeclined {
					t.Errorf("command %+v", cmd)
				}
			}
		})
	}
}

// TestE2EWritePermission: in default mode Codex asks before changing files.
func TestE2EWritePermission(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioWrite)
	ses, cwd := s.Create(t, "default", nil)
	var req *event.PermissionRequested
	tc, evs := s.Turn(t, ses.ID, "Create the file please", func(e event.Event) {
		if e.Type == event.TypePermissionRequested {
			req = new(event.PermissionRequested)
			_ = json.Unmarshal(e.Data, req)
		}
		s.Answer(t, ses.ID, "deny")(e)
	})
	if tc.StopReason != event.StopEndTurn || req == nil || req.Kind != event.PermFileWrite || !strings.Contains(req.Title, "hello.txt") {
		t.Fatalf("stop %s, request %+v\n%s", tc.StopReason, req, agenttest.Dump(evs))
	}
	if _, err := os.Stat(filepath.Join(cwd, "hello.txt")); err == nil {
		t.Error("hello.txt exists after deny")
	}
}

func TestE2ETwoTurns(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioMulti)
	ses, _ := s.Create(t, "accept_edits", nil)
	tc, evs := s.Turn(t, ses.ID, "first", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("first turn %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	tc, evs = s.Turn(t, ses.ID, "second", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "second answer" {
		t.Fatalf("second turn %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
}

// TestE2ESessionBaseURL: a session's OPENAI_BASE_URL is a per-thread
// override on the shared server.
func TestE2ESessionBaseURL(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioError500) // the daemon default would fail
	ses, _ := s.Create(t, "default", map[string]string{EnvBaseURL: s.LLM.URL(fakellm.ScenarioText)})
	tc, evs := s.Turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
}

func TestE2EInterrupt(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioSlow)
	ses, _ := s.Create(t, "default", nil)
	var once sync.Once
	start := time.Now()
	var at time.Time
	tc, evs := s.Turn(t, ses.ID, "count slowly", func(e event.Event) {
		if e.Type == event.TypeItemDelta {
			once.Do(func() {
				at = time.Now()
				if _, err := s.C.Interrupt(context.Background(), ses.ID); err != nil {
					t.Errorf("interrupt: %v", err)
				}
			})
		}
	})
	if tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	t.Logf("first delta after %s, interrupted turn ended %s later", at.Sub(start), time.Since(at))
	if time.Since(start) > fakellm.SlowDelay*fakellm.SlowChunks {
		t.Errorf("the interrupt took too long: %s", time.Since(start))
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "hello again", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn after interrupt: %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
}

// TestE2EServerKilled: SIGKILL of the app-server mid-turn ends every
// session on it with an error; a new session then gets a fresh server.
func TestE2EServerKilled(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioSlow)
	ses, _ := s.Create(t, "default", nil)
	other, _ := s.Create(t, "default", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	after, _ := s.C.LastSeq(ctx, ses.ID)
	tr, err := s.C.Send(ctx, ses.ID, "count slowly")
	if err != nil {
		t.Fatal(err)
	}
	var ended *event.SessionEnded
	var turnEnd *event.TurnCompleted
	var killed sync.Once
	st := s.C.Stream(ctx, ses.ID, after, client.Until(func(e event.Event) bool { return e.Type == event.TypeSessionEnded }))
	for st.Next() {
		e := st.Event()
		switch e.Type {
		case event.TypeItemDelta:
			killed.Do(func() {
				s.adapter.mu.Lock()
				srv := s.adapter.servers[fakeKey].srv
				s.adapter.mu.Unlock()
				if err := syscall.Kill(srv.pid(), syscall.SIGKILL); err != nil {
					t.Errorf("kill: %v", err)
				}
			})
		case event.TypeTurnCompleted:
			turnEnd = new(event.TurnCompleted)
			_ = json.Unmarshal(e.Data, turnEnd)
		case event.TypeSessionEnded:
			ended = new(event.SessionEnded)
			_ = json.Unmarshal(e.Data, ended)
		}
	}
	if ended == nil {
		t.Fatalf("no session.ended: %v", st.Err())
	}
	if ended.Reason != event.EndError || ended.ExitCode == nil || *ended.ExitCode != 137 || !strings.Contains(ended.Message, "signal 9") {
		t.Errorf("session.ended %+v", ended)
	}
	if turnEnd == nil || turnEnd.TurnID != tr.TurnID || turnEnd.StopReason != event.StopError || !strings.Contains(turnEnd.Message, "signal 9") {
		t.Errorf("turn.completed %+v", turnEnd)
	}
	// The idle session on the same server ended too.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := s.C.GetSession(ctx, other.ID)
		if got.Status == client.StatusFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other session is %s, want failed", got.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new session works.
	s.SetScenario(fakellm.ScenarioText)
	fresh, _ := s.Create(t, "default", nil)
	tc, evs := s.Turn(t, fresh.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("new session: %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
}

func TestE2EUpstreamError(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioError500)
	ses, _ := s.Create(t, "default", nil)
	start := time.Now()
	tc, evs := s.Turn(t, ses.ID, "hello", nil)
	t.Logf("the failed turn took %s", time.Since(start))
	if tc.StopReason != event.StopError {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	var errs int
	for _, e := range evs {
		if e.Type == event.TypeError {
			errs++
		}
	}
	if errs == 0 {
		t.Errorf("no error event\n%s", agenttest.Dump(evs))
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "hello again", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn after the error: %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
}

// TestE2EModelSwitch: the app-server lists its models (model/list), which
// session.started and GET /v1/agents/codex carry and a create is checked
// against; a switch between turns goes with the next turn/start, whose
// model request names the new model, and the thread keeps it after a
// resume. On the switch codex first compacts the thread with the previous
// model (a "CONTEXT CHECKPOINT COMPACTION" request, its only request with
// the old model); the turn itself then runs on the new one.
func TestE2EModelSwitch(t *testing.T) {
	s := newStack(t)
	agenttest.Switch(t, s.Stack, Name, agenttest.SwitchCase{Model: "gpt-6-luna", Wire: "gpt-6-luna", Resume: true, OpenList: true,
		Handoff: "CONTEXT CHECKPOINT COMPACTION"})
}

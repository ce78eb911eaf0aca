package opencode

import (
	"context"
	"encoding/json"
	"flag"
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
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// The end-to-end tests run the real OpenCode CLI (installed by `make test`
// into the agent cache) through agentbox's HTTP API against
// internal/fakellm. Subtests share one stack and so one `opencode serve`
// (its start is the slow part).

var record = flag.Bool("record", false, "write the e2e tests' native events to testdata/transcripts/e2e-*.jsonl")

const fakeKey = "sk-fake-opencode"

func opencodeBinary(t testing.TB) (string, string) {
	t.Helper()
	in := agenttest.RequireInstalled(t, Name)
	return in.Binary, in.Version
}

// installedBinary is Options.Binary for the CLI in the agent cache.
var installedBinary = install.Binary(Name)

// stack is the shared e2e stack with this adapter registered; sessions
// reach the fake LLM through OPENAI_BASE_URL. The adapter's native events
// are recorded per session directory (for -record).
type stack struct {
	*agenttest.Stack
	ad *adapter

	recMu sync.Mutex
	rec   map[string][]byte // cwd → recorded events
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackWith(t, nil)
}

// newStackWith is newStack with extra fakellm scenarios.
func newStackWith(t *testing.T, scenarios map[string]*fakellm.Scenario) *stack {
	t.Helper()
	opencodeBinary(t)
	s := &stack{rec: map[string][]byte{}}
	s.Stack = agenttest.NewStack(t, agenttest.StackOptions{
		Name: Name,
		New: func(t testing.TB, _ agenttest.LLM) agent.Adapter {
			s.ad = New(Options{
				Binary:     installedBinary,
				APIKey:     fakeKey,
				Home:       filepath.Join(t.TempDir(), "opencode-home"),
				MaxRetries: -1,
				Logf:       t.Logf,
			}).(*adapter)
			s.ad.tap = func(cwd string, data []byte) {
				s.recMu.Lock()
				defer s.recMu.Unlock()
				line := strings.ReplaceAll(string(data), cwd, "<workdir>")
				s.rec[cwd] = append(append(s.rec[cwd], line...), '\n')
			}
			// Registered before the stack's cleanup: runs after its shutdown.
			t.Cleanup(func() { _ = s.ad.Close() })
			return s.ad
		},
		Env:       func(llm agenttest.LLM) map[string]string { return map[string]string{"OPENAI_BASE_URL": llm.URL("")} },
		URLSuffix: "/v1",
		Scenarios: scenarios,
	})
	return s
}

// save writes the events recorded for cwd as a transcript (with -record).
func (s *stack) save(t *testing.T, name, cwd string) {
	if !*record {
		return
	}
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if err := os.WriteFile(filepath.Join("testdata", "transcripts", "e2e-"+name+".jsonl"), s.rec[cwd], 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestE2E(t *testing.T) {
	s := newStack(t)

	t.Run("write", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioWrite)
		ses, cwd := s.Create(t, "accept_edits", nil)
		if ses.NativeSessionID == "" || !strings.HasPrefix(ses.NativeSessionID, "ses_") {
			t.Errorf("native session id %q", ses.NativeSessionID)
		}
		start := time.Now()
		tc, evs := s.Turn(t, ses.ID, "Create the file please", nil)
		t.Logf("turn took %s", time.Since(start).Round(time.Millisecond))
		s.save(t, "write", cwd)
		if tc.StopReason != event.StopEndTurn {
			t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
		}
		if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
			t.Fatalf("hello.txt = %q, %v", b, err)
		}
		its := agenttest.Items(t, evs)
		fc := agenttest.FindItem(its, event.ItemFileChange)
		if fc == nil || fc.Status != event.StatusCompleted || len(fc.Changes) != 1 || fc.Changes[0].Path != "hello.txt" ||
			fc.Changes[0].Kind != event.FileAdd || !strings.Contains(fc.Changes[0].Diff, "+hi") || fc.NativeID == "" {
			t.Errorf("file change %+v\n%s", fc, agenttest.Dump(evs))
		}
		if agenttest.LastMessage(its) != "done" {
			t.Errorf("last message %q\n%s", agenttest.LastMessage(its), agenttest.Dump(evs))
		}
		var deltas int
		for _, e := range evs {
			if e.Type == event.TypeItemDelta {
				deltas++
			}
			if e.Type == event.TypePermissionRequested {
				t.Errorf("accept_edits asked: %s", e.Data)
			}
		}
		if deltas == 0 {
			t.Error("no deltas")
		}
		if tc.Usage == nil || tc.Usage.InputTokens == 0 || tc.Usage.OutputTokens == 0 {
			t.Errorf("usage %+v", tc.Usage)
		}
		for _, r := range s.LLM.Requests() {
			if strings.HasSuffix(r.Path, "/chat/completions") && !r.HasKey(fakeKey) {
				t.Errorf("request %s without the configured key", r.Path)
			}
		}
	})

	for _, c := range []struct {
		decision string
		file     bool
		status   event.ItemStatus
	}{{"allow", true, event.StatusCompleted}, {"deny", false, event.StatusDeclined}} {
		t.Run("permission-"+c.decision, func(t *testing.T) {
			s.SetScenario(fakellm.ScenarioPermission)
			ses, cwd := s.Create(t, "default", nil)
			tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, c.decision))
			s.save(t, "permission-"+c.decision, cwd)
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
			}
			var req *event.PermissionRequested
			for _, e := range evs {
				if e.Type == event.TypePermissionRequested {
					req = new(event.PermissionRequested)
					_ = json.Unmarshal(e.Data, req)
				}
			}
			if req == nil || req.Kind != event.PermCommand || req.Title != "bash: printf approved > approved.txt" || req.ItemID == "" {
				t.Fatalf("permission request %+v\n%s", req, agenttest.Dump(evs))
			}
			b, err := os.ReadFile(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file || (c.file && string(b) != "approved") {
				t.Errorf("approved.txt = %q, %v", b, err)
			}
			cmd := agenttest.FindItem(agenttest.Items(t, evs), event.ItemCommand)
			if cmd == nil || cmd.ID != req.ItemID || cmd.Status != c.status || cmd.Command != "printf approved > approved.txt" {
				t.Errorf("command item %+v\n%s", cmd, agenttest.Dump(evs))
			}
			// The agent carries on after a deny.
			if agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
				t.Errorf("last message %q\n%s", agenttest.LastMessage(agenttest.Items(t, evs)), agenttest.Dump(evs))
			}
			if c.file && (cmd == nil || cmd.ExitCode == nil || *cmd.ExitCode != 0) {
				t.Errorf("command item without exit code 0: %+v", cmd)
			}
		})
	}

	t.Run("two-turns", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioMulti)
		ses, cwd := s.Create(t, "accept_edits", nil)
		tc, evs := s.Turn(t, ses.ID, "first", nil)
		if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
			t.Fatalf("first turn: %+v\n%s", tc, agenttest.Dump(evs))
		}
		tc, evs = s.Turn(t, ses.ID, "second", nil)
		s.save(t, "two-turns", cwd)
		// "second answer" comes only when the model sees the first exchange.
		if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "second answer" {
			t.Fatalf("second turn: %+v\n%s", tc, agenttest.Dump(evs))
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioSlow)
		ses, _ := s.Create(t, "default", nil)
		var once sync.Once
		var interrupted time.Time
		tc, evs := s.Turn(t, ses.ID, "talk slowly", func(e event.Event) {
			if e.Type == event.TypeItemDelta {
				once.Do(func() {
					interrupted = time.Now()
					if _, err := s.C.Interrupt(context.Background(), ses.ID); err != nil {
						t.Errorf("interrupt: %v", err)
					}
				})
			}
		})
		if tc.StopReason != event.StopInterrupted {
			t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
		}
		t.Logf("interrupt → turn.completed in %s", time.Since(interrupted))
		if d := time.Since(interrupted); d > 4*time.Second {
			t.Errorf("the turn ended %s after the interrupt", d)
		}
		for _, e := range evs {
			if e.Type == event.TypeError {
				t.Errorf("an interrupt reported an error: %s", e.Data)
			}
		}
		s.SetScenario(fakellm.ScenarioText)
		tc, evs = s.Turn(t, ses.ID, "again", nil)
		if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
			t.Fatalf("turn after the interrupt: %+v\n%s", tc, agenttest.Dump(evs))
		}
	})

	t.Run("upstream-error", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioError500)
		ses, cwd := s.Create(t, "default", nil)
		start := time.Now()
		tc, evs := s.Turn(t, ses.ID, "hello", nil)
		s.save(t, "error500", cwd)
		t.Logf("the failed turn took %s", time.Since(start).Round(time.Millisecond))
		if tc.StopReason != event.StopError {
			t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
		}
		var errs []event.Error
		for _, e := range evs {
			if e.Type == event.TypeError {
				var p event.Error
				_ = json.Unmarshal(e.Data, &p)
				errs = append(errs, p)
			}
		}
		if len(errs) != 1 || !errs[0].Retryable || !strings.Contains(errs[0].Message, "500") && !strings.Contains(errs[0].Message, "error") {
			t.Errorf("error events %+v\n%s", errs, agenttest.Dump(evs))
		}
		s.SetScenario(fakellm.ScenarioText)
		tc, evs = s.Turn(t, ses.ID, "hello again", nil)
		if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
			t.Fatalf("turn after the error: %+v\n%s", tc, agenttest.Dump(evs))
		}
	})
}

// TestE2EKilledServer kills `opencode serve` mid-turn: the session ends
// with the exit code and a clear message, and a new session starts a fresh
// server.
func TestE2EKilledServer(t *testing.T) {
	s := newStack(t)
	s.SetScenario(fakellm.ScenarioSlow)
	ses, _ := s.Create(t, "default", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	after, _ := s.C.LastSeq(ctx, ses.ID)
	tr, err := s.C.Send(ctx, ses.ID, "talk slowly")
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
				s.ad.mu.Lock()
				var pid int
				for _, srv := range s.ad.servers {
					pid = srv.tree.Pid()
				}
				s.ad.mu.Unlock()
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
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
	if turnEnd == nil || turnEnd.TurnID != tr.TurnID || turnEnd.StopReason != event.StopError {
		t.Errorf("turn.completed %+v", turnEnd)
	}
	// A new session gets a fresh server.
	s.SetScenario(fakellm.ScenarioText)
	ses2, _ := s.Create(t, "default", nil)
	tc, evs := s.Turn(t, ses2.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn on a fresh server: %+v\n%s", tc, agenttest.Dump(evs))
	}
}

// TestE2EModelSwitch: the server lists the models its config declares
// (GET /config/providers) and its primary agents as modes (GET /agent); a
// switch between turns names both in the next prompt, and the fake LLM
// sees the new model and the plan agent's instructions.
func TestE2EModelSwitch(t *testing.T) {
	opencodeBinary(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: Name,
		New: func(t testing.TB, _ agenttest.LLM) agent.Adapter {
			ad := New(Options{Binary: installedBinary, APIKey: fakeKey, Home: filepath.Join(t.TempDir(), "opencode-home"), MaxRetries: -1, Models: []string{"gpt-5"}})
			t.Cleanup(func() { _ = ad.(*adapter).Close() })
			return ad
		},
		Env:       func(llm agenttest.LLM) map[string]string { return map[string]string{"OPENAI_BASE_URL": llm.URL("")} },
		URLSuffix: "/v1",
	})
	agenttest.Switch(t, st, Name, agenttest.SwitchCase{Model: "gpt-5", Wire: "gpt-5", Mode: "plan", ModeMark: "Plan mode ACTIVE"})
}

package claude

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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

// The end-to-end tests run the real Claude Code CLI (installed by `make
// test` into the agent cache) through agentbox's HTTP API, against
// internal/fakellm. They build the daemon's stack themselves (SQLite store,
// session engine with this adapter registered, HTTP API, Go SDK), since the
// embedded server only registers the built-in agents.

const fakeKey = "sk-fake-e2e"

// claudeBinary finds the installed CLI, failing (not skipping) without it.
func claudeBinary(t testing.TB) (string, string) {
	t.Helper()
	in := agenttest.RequireInstalled(t, Name)
	return in.Binary, in.Version
}

// installedBinary is Options.Binary for the CLI in the agent cache.
var installedBinary = install.Binary(Name)

// stack is the shared e2e stack with this adapter registered; sessions
// reach the fake LLM through ANTHROPIC_BASE_URL.
type stack struct {
	*agenttest.Stack
	bin string
}

func newStack(t testing.TB, scenarios map[string]*fakellm.Scenario) *stack {
	t.Helper()
	bin, _ := claudeBinary(t)
	s := agenttest.NewStack(t, agenttest.StackOptions{
		Name: Name,
		New: func(t testing.TB, _ agenttest.LLM) agent.Adapter {
			return New(Options{Binary: installedBinary, APIKey: fakeKey, HomeDir: filepath.Join(t.TempDir(), "claude-home")})
		},
		Env:       func(llm agenttest.LLM) map[string]string { return map[string]string{"ANTHROPIC_BASE_URL": llm.URL("")} },
		Scenarios: scenarios,
	})
	return &stack{Stack: s, bin: bin}
}

func TestE2EWriteFile(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioWrite)
	ses, cwd := s.Create(t, "accept_edits", nil)
	if ses.NativeSessionID == "" {
		t.Error("the session has no native session id")
	}
	tc, evs := s.Turn(t, ses.ID, "Create the file please", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	b, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
	if err != nil || string(b) != "hi" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
	its := agenttest.Items(t, evs)
	fc := agenttest.FindItem(its, event.ItemFileChange)
	if fc == nil || fc.Status != event.StatusCompleted || len(fc.Changes) != 1 || fc.Changes[0].Path != "hello.txt" ||
		fc.Changes[0].Kind != event.FileAdd || !strings.Contains(fc.Changes[0].Diff, "+hi") || fc.NativeID == "" {
		t.Errorf("file change %+v\n%s", fc, agenttest.Dump(evs))
	}
	if agenttest.LastMessage(its) != "done" {
		t.Errorf("last message %q", agenttest.LastMessage(its))
	}
	var deltas, inputDeltas int
	for _, e := range evs {
		if e.Type == event.TypeItemDelta {
			var d event.ItemDelta
			_ = json.Unmarshal(e.Data, &d)
			if d.Field == event.DeltaInput {
				inputDeltas++
			} else {
				deltas++
			}
		}
	}
	if deltas == 0 || inputDeltas == 0 {
		t.Errorf("%d text deltas and %d input deltas, want both", deltas, inputDeltas)
	}
	if tc.Usage == nil || tc.Usage.InputTokens == 0 || tc.Usage.OutputTokens == 0 || tc.Usage.CostUSD == nil {
		t.Errorf("usage %+v", tc.Usage)
	}
	if len(natives(evs, "system/init")) != 1 {
		t.Errorf("want one system/init native event")
	}
	// The CLI reached the fake model with the daemon's key, and only it.
	reqs := s.LLM.Requests()
	if len(reqs) == 0 {
		t.Fatal("the fake LLM saw no request")
	}
	for _, r := range reqs {
		if !r.HasKey(fakeKey) {
			t.Errorf("request %s without the configured key", r.Path)
		}
	}
}

func TestE2EPermission(t *testing.T) {
	for _, c := range []struct {
		decision string
		file     bool
		status   event.ItemStatus
	}{{"allow", true, event.StatusCompleted}, {"deny", false, event.StatusDeclined}} {
		t.Run(c.decision, func(t *testing.T) {
			s := newStack(t, nil)
			s.SetScenario(fakellm.ScenarioPermission)
			ses, cwd := s.Create(t, "default", nil)
			tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, c.decision))
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
			if req == nil || req.Kind != event.PermCommand || req.Title != "Bash: printf approved > approved.txt" || req.ItemID == "" {
				t.Fatalf("permission request %+v\n%s", req, agenttest.Dump(evs))
			}
			b, err := os.ReadFile(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file || (c.file && string(b) != "approved") {
				t.Errorf("approved.txt = %q, %v", b, err)
			}
			its := agenttest.Items(t, evs)
			cmd := agenttest.FindItem(its, event.ItemCommand)
			if cmd == nil || cmd.ID != req.ItemID || cmd.Status != c.status || cmd.Command != "printf approved > approved.txt" {
				t.Errorf("command item %+v", cmd)
			}
			if c.file && (cmd == nil || cmd.ExitCode == nil || *cmd.ExitCode != 0) {
				t.Errorf("command item without exit code 0: %+v", cmd)
			}
			// The agent carries on after a deny.
			if agenttest.LastMessage(its) != "done" {
				t.Errorf("last message %q", agenttest.LastMessage(its))
			}
		})
	}
}

func TestE2ETwoTurnsOneProcess(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioMulti)
	ses, cwd := s.Create(t, "accept_edits", nil)
	tc, evs := s.Turn(t, ses.ID, "first", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("first turn: %+v\n%s", tc, agenttest.Dump(evs))
	}
	if _, err := os.Stat(filepath.Join(cwd, "hello.txt")); err != nil {
		t.Error(err)
	}
	pid := claudePID(t, s.bin, cwd)
	tc, evs = s.Turn(t, ses.ID, "second", nil)
	// "second answer" comes only when the model sees the first exchange:
	// the conversation went on in the same CLI session.
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "second answer" {
		t.Fatalf("second turn: %+v\n%s", tc, agenttest.Dump(evs))
	}
	if p := claudePID(t, s.bin, cwd); p != pid {
		t.Errorf("the second turn ran in process %d, the first in %d", p, pid)
	}
	got, err := s.C.GetSession(context.Background(), ses.ID)
	if err != nil || got.NativeSessionID != ses.NativeSessionID {
		t.Errorf("native session id %q → %q (%v)", ses.NativeSessionID, got.NativeSessionID, err)
	}
}

func TestE2EInterrupt(t *testing.T) {
	s := newStack(t, nil)
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
	if d := time.Since(interrupted); d > 4*time.Second {
		t.Errorf("the turn ended %s after the interrupt", d)
	}
	t.Logf("interrupt → turn.completed in %s", time.Since(interrupted))
	for _, e := range evs {
		if e.Type == event.TypeError {
			t.Errorf("an interrupt reported an error: %s", e.Data)
		}
	}
	// The session is usable afterwards.
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "again", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn after the interrupt: %+v\n%s", tc, agenttest.Dump(evs))
	}
}

// claudePID finds the CLI process running in cwd.
func claudePID(t testing.TB, bin, cwd string) int {
	t.Helper()
	exe, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		d, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		x, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if d == cwd && x == exe {
			return pid
		}
	}
	t.Fatalf("no %s process in %s", exe, cwd)
	return 0
}

func TestE2EKilledCLI(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioSlow)
	ses, cwd := s.Create(t, "default", nil)
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
				if err := syscall.Kill(claudePID(t, s.bin, cwd), syscall.SIGKILL); err != nil {
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
	got, _ := s.C.GetSession(ctx, ses.ID)
	if got.Status != client.StatusFailed {
		t.Errorf("session status %s, want failed", got.Status)
	}
}

func TestE2EUpstreamError(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioError500)
	ses, _ := s.Create(t, "default", nil)
	start := time.Now()
	tc, evs := s.Turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopError {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	t.Logf("the failed turn took %s", time.Since(start))
	var errs []event.Error
	for _, e := range evs {
		if e.Type == event.TypeError {
			var p event.Error
			_ = json.Unmarshal(e.Data, &p)
			errs = append(errs, p)
		}
	}
	if len(errs) != 1 || !errs[0].Retryable || !strings.Contains(errs[0].Message, "500") {
		t.Errorf("error events %+v\n%s", errs, agenttest.Dump(evs))
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "hello again", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn after the error: %+v\n%s", tc, agenttest.Dump(evs))
	}
}

func TestE2EThinking(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioThinking)
	ses, _ := s.Create(t, "default", nil)
	tc, evs := s.Turn(t, ses.ID, "think", nil)
	its := agenttest.Items(t, evs)
	r := agenttest.FindItem(its, event.ItemReasoning)
	if tc.StopReason != event.StopEndTurn || r == nil || r.Text() != "The user wants an answer. I will say done." || agenttest.LastMessage(its) != "done" {
		t.Fatalf("reasoning %+v, turn %+v\n%s", r, tc, agenttest.Dump(evs))
	}
}

func TestE2EPlanQuestionAndImage(t *testing.T) {
	plan := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: "TaskCreate", Arguments: json.RawMessage(`{"subject":"Write hello","description":"create hello.txt"}`)}}},
		{Calls: []fakellm.Call{{Name: "TaskUpdate", Arguments: json.RawMessage(`{"taskId":"1","status":"completed"}`)}}},
		{Text: "planned"},
	}}
	ask := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: "AskUserQuestion", Arguments: json.RawMessage(
			`{"questions":[{"question":"Which color?","header":"Color","multiSelect":false,"options":[{"label":"Red","description":"warm"},{"label":"Green","description":"calm"}]}]}`)}}},
		{Text: "asked"},
	}}
	s := newStack(t, map[string]*fakellm.Scenario{"plan": plan, "ask": ask})

	s.SetScenario("plan")
	ses, _ := s.Create(t, "default", nil)
	tc, evs := s.Turn(t, ses.ID, "make a plan", nil)
	var plans []event.Item
	for _, it := range agenttest.Items(t, evs) {
		if it.Kind == event.ItemPlan {
			plans = append(plans, it)
		}
	}
	if tc.StopReason != event.StopEndTurn || len(plans) != 2 || len(plans[1].Entries) != 1 ||
		plans[1].Entries[0] != (event.PlanEntry{Content: "Write hello", Status: event.PlanCompleted}) {
		t.Errorf("plans %+v\n%s", plans, agenttest.Dump(evs))
	}

	s.SetScenario("ask")
	tc, evs = s.Turn(t, ses.ID, "ask me", func(e event.Event) {
		if e.Type != event.TypeQuestionRequested {
			return
		}
		var q event.QuestionRequested
		_ = json.Unmarshal(e.Data, &q)
		if _, err := s.C.AnswerQuestion(context.Background(), ses.ID, q.ID, client.QuestionAnswer{OptionID: "2"}); err != nil {
			t.Errorf("answer: %v", err)
		}
	})
	tool := agenttest.FindItem(agenttest.Items(t, evs), event.ItemToolCall)
	if tc.StopReason != event.StopEndTurn || tool == nil || tool.Name != "AskUserQuestion" || !strings.Contains(tool.Output, `"Which color?"="Green"`) {
		t.Errorf("question tool %+v\n%s", tool, agenttest.Dump(evs))
	}

	// An image goes to the model as an image block.
	s.SetScenario(fakellm.ScenarioText)
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	ctx := context.Background()
	after, _ := s.C.LastSeq(ctx, ses.ID)
	tr, err := s.C.SendMessage(ctx, ses.ID, client.SendMessage{Content: []event.ContentPart{
		event.TextPart("what is this?"), {Type: event.PartImage, MimeType: "image/png", Data: png}}})
	if err != nil {
		t.Fatal(err)
	}
	if tc, err := s.C.WaitTurn(ctx, ses.ID, tr.TurnID, after, nil); err != nil || tc.StopReason != event.StopEndTurn {
		t.Fatalf("image turn: %+v, %v", tc, err)
	}
	reqs := s.LLM.Requests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(string(last.Body), `"type":"image"`) || !strings.Contains(string(last.Body), png) {
		t.Errorf("the model did not get the image: %s", agent.Clip(string(last.Body), 2000))
	}
}

// TestE2EResume starts a second process on the first one's native session
// id (as the engine will for a resume) and checks that the conversation
// goes on: the fake model's "multi" scenario answers "second answer" only
// to a history that holds the first exchange.
func TestE2EResume(t *testing.T) {
	bin, _ := claudeBinary(t)
	llm, err := fakellm.Start(context.Background(), fakellm.Options{Default: fakellm.ScenarioMulti})
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	a := New(Options{Binary: func() (string, string, error) { return bin, "", nil }, BaseURL: llm.URL(), APIKey: fakeKey, HomeDir: t.TempDir()})
	cwd := t.TempDir()
	run := func(native, prompt string) (string, string) {
		h := newFakeHost()
		s, err := a.Start(t.Context(), agent.Config{Cwd: cwd, PermissionMode: "accept_edits", NativeSessionID: native}, h)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		}()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := s.Prompt(ctx, text(prompt)); err != nil {
			t.Fatal(err)
		}
		return h.native[len(h.native)-1], agenttest.LastMessage(agenttest.Items(t, h.snapshot()))
	}
	id, msg := run("", "first")
	if msg != "done" {
		t.Fatalf("first answer %q", msg)
	}
	id2, msg := run(id, "second")
	if id2 != id || msg != "second answer" {
		t.Errorf("resumed session %q (want %q) answered %q", id2, id, msg)
	}
}

// TestE2EWritePermission: in default mode the CLI asks before writing a
// new file; the request is a file_write with the diff the write would make.
func TestE2EWritePermission(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioWrite)
	ses, cwd := s.Create(t, "default", nil)
	tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, "allow"))
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
	if req == nil || req.Kind != event.PermFileWrite || req.Title != "Write: hello.txt" || req.Tool != "Write" ||
		req.Detail != "--- /dev/null\n+++ b/hello.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\n" {
		t.Fatalf("permission request %+v\n%s", req, agenttest.Dump(evs))
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
		t.Errorf("hello.txt = %q, %v", b, err)
	}
}

// TestE2EInterruptWhileAsking: an interrupt while a permission request is
// pending denies it (by the daemon), ends the turn as interrupted, and the
// session takes the next turn.
func TestE2EInterruptWhileAsking(t *testing.T) {
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioPermission)
	ses, cwd := s.Create(t, "default", nil)
	var resolved *event.PermissionResolved
	tc, evs := s.Turn(t, ses.ID, "Create the file please", func(e event.Event) {
		switch e.Type {
		case event.TypePermissionRequested:
			if _, err := s.C.Interrupt(context.Background(), ses.ID); err != nil {
				t.Errorf("interrupt: %v", err)
			}
		case event.TypePermissionResolved:
			resolved = new(event.PermissionResolved)
			_ = json.Unmarshal(e.Data, resolved)
		}
	})
	if tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
	}
	if resolved == nil || resolved.Decision != event.DecisionDeny || resolved.By != event.ByDaemon {
		t.Errorf("resolution %+v", resolved)
	}
	if _, err := os.Stat(filepath.Join(cwd, "approved.txt")); err == nil {
		t.Error("the command ran although its permission was never given")
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "again", nil)
	if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
		t.Fatalf("turn after the interrupt: %+v\n%s", tc, agenttest.Dump(evs))
	}
}

// TestE2EPermissionModes: the CLI's own modes settle the same command
// without asking: bypass runs it (as root only with IS_SANDBOX, which the
// adapter sets), plan refuses it.
func TestE2EPermissionModes(t *testing.T) {
	for _, c := range []struct {
		mode string
		file bool
	}{{"bypass", true}, {"plan", false}} {
		t.Run(c.mode, func(t *testing.T) {
			s := newStack(t, nil)
			s.SetScenario(fakellm.ScenarioPermission)
			ses, cwd := s.Create(t, c.mode, nil)
			tc, evs := s.Turn(t, ses.ID, "Create the file please", nil)
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
			}
			for _, e := range evs {
				if e.Type == event.TypePermissionRequested {
					t.Errorf("mode %s asked: %s", c.mode, e.Data)
				}
			}
			_, err := os.Stat(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file {
				t.Errorf("approved.txt exists: %v\n%s", exists, agenttest.Dump(evs))
			}
			cmd := agenttest.FindItem(agenttest.Items(t, evs), event.ItemCommand)
			if cmd != nil {
				t.Logf("mode %s: command %s %q", c.mode, cmd.Status, cmd.Error)
			}
			if cmd == nil || (cmd.Status == event.StatusCompleted) != c.file {
				t.Errorf("command item %+v", cmd)
			}
		})
	}
}

// TestE2EModelSwitch: the models are those the CLI's answer to initialize
// lists (session.started, GET /v1/agents/claude, the 422 of a create
// naming another); a switch between turns reaches Claude Code as its
// set_model control request: the next turn asks the API for the new model.
func TestE2EModelSwitch(t *testing.T) {
	s := newStack(t, nil)
	agenttest.Switch(t, s.Stack, Name, agenttest.SwitchCase{Model: "sonnet", Wire: "sonnet", OpenList: true})
}

package claude

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	engine "github.com/agentbox/agentbox/internal/session"
	"github.com/agentbox/agentbox/internal/store/sqlite"
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
	in, ok, err := install.Lookup(Name)
	if err != nil || !ok {
		t.Fatalf("the claude CLI is not installed in the agent cache (lookup: ok=%v, err=%v): run `make test`, which installs it (or `go run ./cmd/agentbox agents install claude`)", ok, err)
	}
	return in.Binary, in.Version
}

// switcher is a reverse proxy in front of the fake LLM whose scenario the
// test can change between turns (a session's base URL is fixed when its
// process starts).
type switcher struct {
	srv *fakellm.Server
	mu  sync.Mutex
	cur string
}

func (s *switcher) set(name string) {
	s.mu.Lock()
	s.cur = name
	s.mu.Unlock()
}

func (s *switcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	target, _ := url.Parse(s.srv.ScenarioURL(s.cur))
	s.mu.Unlock()
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}).ServeHTTP(w, r)
}

type stack struct {
	c     *client.Client
	llm   *fakellm.Server
	sw    *switcher
	swURL string
	bin   string
}

func newStack(t testing.TB, scenarios map[string]*fakellm.Scenario) *stack {
	t.Helper()
	bin, _ := claudeBinary(t)
	dir := t.TempDir()
	ctx := context.Background()
	llm, err := fakellm.Start(ctx, fakellm.Options{Scenarios: scenarios})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switcher{srv: llm, cur: fakellm.ScenarioText}
	swSrv := httptest.NewServer(sw)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := agent.NewRegistry()
	reg.Register(Name, New(Options{
		Binary: func() (string, string, error) {
			in, ok, err := install.Lookup(Name)
			if err == nil && !ok {
				err = fmt.Errorf("not installed")
			}
			return in.Binary, in.Version, err
		},
		APIKey:  fakeKey,
		HomeDir: filepath.Join(dir, "claude-home"),
	}))
	mgr := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: filepath.Join(dir, "workspaces"), PermissionTimeout: time.Minute})
	api := httptest.NewServer(httpapi.New(httpapi.Config{}, mgr, metrics.New(), nil))
	c, err := client.New(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mgr.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		api.Close()
		swSrv.Close()
		_ = llm.Close()
		_ = st.Close()
	})
	return &stack{c: c, llm: llm, sw: sw, swURL: swSrv.URL, bin: bin}
}

// create starts a claude session in a fresh directory.
func (s *stack) create(t testing.TB, mode string) (client.Session, string) {
	t.Helper()
	cwd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ses, err := s.c.CreateSession(ctx, client.CreateSession{Agent: Name, Cwd: cwd, PermissionMode: mode,
		Env: map[string]string{"ANTHROPIC_BASE_URL": s.swURL}})
	if err != nil {
		t.Fatal(err)
	}
	return ses, cwd
}

// turn sends text and follows the turn to its end; onEvent (may be nil)
// sees each event first.
func (s *stack) turn(t testing.TB, sid, text string, onEvent func(event.Event)) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	after, err := s.c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.c.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := s.c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
		evs = append(evs, e)
		if onEvent != nil {
			onEvent(e)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("turn %q: %v\nevents:\n%s", text, err, dump(evs))
	}
	return tc, evs
}

func dump(evs []event.Event) string {
	var sb strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&sb, "%d %s %s %s\n", e.Seq, e.Type, e.Source, clip(string(e.Data), 400))
	}
	return sb.String()
}

func items(t testing.TB, evs []event.Event) []event.Item {
	t.Helper()
	var out []event.Item
	for _, e := range evs {
		if e.Type == event.TypeItemCompleted {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.(*event.ItemCompleted).Item)
		}
	}
	return out
}

func findItem(its []event.Item, kind event.ItemKind) *event.Item {
	for i := range its {
		if its[i].Kind == kind {
			return &its[i]
		}
	}
	return nil
}

func lastMessage(its []event.Item) string {
	var s string
	for _, it := range its {
		if it.Kind == event.ItemMessage && it.Role == event.RoleAssistant {
			s = it.Text()
		}
	}
	return s
}

func answer(t testing.TB, s *stack, sid, decision string) func(event.Event) {
	return func(e event.Event) {
		if e.Type != event.TypePermissionRequested {
			return
		}
		var p event.PermissionRequested
		_ = json.Unmarshal(e.Data, &p)
		if _, err := s.c.AnswerPermission(context.Background(), sid, p.ID, client.PermissionAnswer{Decision: decision}); err != nil {
			t.Errorf("answer permission: %v", err)
		}
	}
}

func TestE2EWriteFile(t *testing.T) {
	s := newStack(t, nil)
	s.sw.set(fakellm.ScenarioWrite)
	ses, cwd := s.create(t, "accept_edits")
	if ses.NativeSessionID == "" {
		t.Error("the session has no native session id")
	}
	tc, evs := s.turn(t, ses.ID, "Create the file please", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
	}
	b, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
	if err != nil || string(b) != "hi" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
	its := items(t, evs)
	fc := findItem(its, event.ItemFileChange)
	if fc == nil || fc.Status != event.StatusCompleted || len(fc.Changes) != 1 || fc.Changes[0].Path != "hello.txt" ||
		fc.Changes[0].Kind != event.FileAdd || !strings.Contains(fc.Changes[0].Diff, "+hi") || fc.NativeID == "" {
		t.Errorf("file change %+v\n%s", fc, dump(evs))
	}
	if lastMessage(its) != "done" {
		t.Errorf("last message %q", lastMessage(its))
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
	reqs := s.llm.Requests()
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
			s.sw.set(fakellm.ScenarioPermission)
			ses, cwd := s.create(t, "default")
			tc, evs := s.turn(t, ses.ID, "Create the file please", answer(t, s, ses.ID, c.decision))
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
			}
			var req *event.PermissionRequested
			for _, e := range evs {
				if e.Type == event.TypePermissionRequested {
					req = new(event.PermissionRequested)
					_ = json.Unmarshal(e.Data, req)
				}
			}
			if req == nil || req.Kind != event.PermCommand || req.Title != "Bash: printf approved > approved.txt" || req.ItemID == "" {
				t.Fatalf("permission request %+v\n%s", req, dump(evs))
			}
			b, err := os.ReadFile(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file || (c.file && string(b) != "approved") {
				t.Errorf("approved.txt = %q, %v", b, err)
			}
			its := items(t, evs)
			cmd := findItem(its, event.ItemCommand)
			if cmd == nil || cmd.ID != req.ItemID || cmd.Status != c.status || cmd.Command != "printf approved > approved.txt" {
				t.Errorf("command item %+v", cmd)
			}
			if c.file && (cmd == nil || cmd.ExitCode == nil || *cmd.ExitCode != 0) {
				t.Errorf("command item without exit code 0: %+v", cmd)
			}
			// The agent carries on after a deny.
			if lastMessage(its) != "done" {
				t.Errorf("last message %q", lastMessage(its))
			}
		})
	}
}

func TestE2ETwoTurnsOneProcess(t *testing.T) {
	s := newStack(t, nil)
	s.sw.set(fakellm.ScenarioMulti)
	ses, cwd := s.create(t, "accept_edits")
	tc, evs := s.turn(t, ses.ID, "first", nil)
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
		t.Fatalf("first turn: %+v\n%s", tc, dump(evs))
	}
	if _, err := os.Stat(filepath.Join(cwd, "hello.txt")); err != nil {
		t.Error(err)
	}
	pid := claudePID(t, s.bin, cwd)
	tc, evs = s.turn(t, ses.ID, "second", nil)
	// "second answer" comes only when the model sees the first exchange:
	// the conversation went on in the same CLI session.
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "second answer" {
		t.Fatalf("second turn: %+v\n%s", tc, dump(evs))
	}
	if p := claudePID(t, s.bin, cwd); p != pid {
		t.Errorf("the second turn ran in process %d, the first in %d", p, pid)
	}
	got, err := s.c.GetSession(context.Background(), ses.ID)
	if err != nil || got.NativeSessionID != ses.NativeSessionID {
		t.Errorf("native session id %q → %q (%v)", ses.NativeSessionID, got.NativeSessionID, err)
	}
}

func TestE2EInterrupt(t *testing.T) {
	s := newStack(t, nil)
	s.sw.set(fakellm.ScenarioSlow)
	ses, _ := s.create(t, "default")
	var once sync.Once
	var interrupted time.Time
	tc, evs := s.turn(t, ses.ID, "talk slowly", func(e event.Event) {
		if e.Type == event.TypeItemDelta {
			once.Do(func() {
				interrupted = time.Now()
				if _, err := s.c.Interrupt(context.Background(), ses.ID); err != nil {
					t.Errorf("interrupt: %v", err)
				}
			})
		}
	})
	if tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
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
	s.sw.set(fakellm.ScenarioText)
	tc, evs = s.turn(t, ses.ID, "again", nil)
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
		t.Fatalf("turn after the interrupt: %+v\n%s", tc, dump(evs))
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
	s.sw.set(fakellm.ScenarioSlow)
	ses, cwd := s.create(t, "default")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	after, _ := s.c.LastSeq(ctx, ses.ID)
	tr, err := s.c.Send(ctx, ses.ID, "talk slowly")
	if err != nil {
		t.Fatal(err)
	}
	var ended *event.SessionEnded
	var turnEnd *event.TurnCompleted
	var killed sync.Once
	st := s.c.Stream(ctx, ses.ID, after, client.Until(func(e event.Event) bool { return e.Type == event.TypeSessionEnded }))
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
	got, _ := s.c.GetSession(ctx, ses.ID)
	if got.Status != client.StatusFailed {
		t.Errorf("session status %s, want failed", got.Status)
	}
}

func TestE2EUpstreamError(t *testing.T) {
	s := newStack(t, nil)
	s.sw.set(fakellm.ScenarioError500)
	ses, _ := s.create(t, "default")
	start := time.Now()
	tc, evs := s.turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopError {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
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
		t.Errorf("error events %+v\n%s", errs, dump(evs))
	}
	s.sw.set(fakellm.ScenarioText)
	tc, evs = s.turn(t, ses.ID, "hello again", nil)
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
		t.Fatalf("turn after the error: %+v\n%s", tc, dump(evs))
	}
}

func TestE2EThinking(t *testing.T) {
	s := newStack(t, nil)
	s.sw.set(fakellm.ScenarioThinking)
	ses, _ := s.create(t, "default")
	tc, evs := s.turn(t, ses.ID, "think", nil)
	its := items(t, evs)
	r := findItem(its, event.ItemReasoning)
	if tc.StopReason != event.StopEndTurn || r == nil || r.Text() != "The user wants an answer. I will say done." || lastMessage(its) != "done" {
		t.Fatalf("reasoning %+v, turn %+v\n%s", r, tc, dump(evs))
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

	s.sw.set("plan")
	ses, _ := s.create(t, "default")
	tc, evs := s.turn(t, ses.ID, "make a plan", nil)
	var plans []event.Item
	for _, it := range items(t, evs) {
		if it.Kind == event.ItemPlan {
			plans = append(plans, it)
		}
	}
	if tc.StopReason != event.StopEndTurn || len(plans) != 2 || len(plans[1].Entries) != 1 ||
		plans[1].Entries[0] != (event.PlanEntry{Content: "Write hello", Status: event.PlanCompleted}) {
		t.Errorf("plans %+v\n%s", plans, dump(evs))
	}

	s.sw.set("ask")
	tc, evs = s.turn(t, ses.ID, "ask me", func(e event.Event) {
		if e.Type != event.TypeQuestionRequested {
			return
		}
		var q event.QuestionRequested
		_ = json.Unmarshal(e.Data, &q)
		if _, err := s.c.AnswerQuestion(context.Background(), ses.ID, q.ID, client.QuestionAnswer{OptionID: "2"}); err != nil {
			t.Errorf("answer: %v", err)
		}
	})
	tool := findItem(items(t, evs), event.ItemToolCall)
	if tc.StopReason != event.StopEndTurn || tool == nil || tool.Name != "AskUserQuestion" || !strings.Contains(tool.Output, `"Which color?"="Green"`) {
		t.Errorf("question tool %+v\n%s", tool, dump(evs))
	}

	// An image goes to the model as an image block.
	s.sw.set(fakellm.ScenarioText)
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	ctx := context.Background()
	after, _ := s.c.LastSeq(ctx, ses.ID)
	tr, err := s.c.SendMessage(ctx, ses.ID, client.SendMessage{Content: []event.ContentPart{
		event.TextPart("what is this?"), {Type: event.PartImage, MimeType: "image/png", Data: png}}})
	if err != nil {
		t.Fatal(err)
	}
	if tc, err := s.c.WaitTurn(ctx, ses.ID, tr.TurnID, after, nil); err != nil || tc.StopReason != event.StopEndTurn {
		t.Fatalf("image turn: %+v, %v", tc, err)
	}
	reqs := s.llm.Requests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(string(last.Body), `"type":"image"`) || !strings.Contains(string(last.Body), png) {
		t.Errorf("the model did not get the image: %s", clip(string(last.Body), 2000))
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
		return h.native[len(h.native)-1], lastMessage(items(t, h.snapshot()))
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
	s.sw.set(fakellm.ScenarioWrite)
	ses, cwd := s.create(t, "default")
	tc, evs := s.turn(t, ses.ID, "Create the file please", answer(t, s, ses.ID, "allow"))
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
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
		t.Fatalf("permission request %+v\n%s", req, dump(evs))
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
	s.sw.set(fakellm.ScenarioPermission)
	ses, cwd := s.create(t, "default")
	var resolved *event.PermissionResolved
	tc, evs := s.turn(t, ses.ID, "Create the file please", func(e event.Event) {
		switch e.Type {
		case event.TypePermissionRequested:
			if _, err := s.c.Interrupt(context.Background(), ses.ID); err != nil {
				t.Errorf("interrupt: %v", err)
			}
		case event.TypePermissionResolved:
			resolved = new(event.PermissionResolved)
			_ = json.Unmarshal(e.Data, resolved)
		}
	})
	if tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
	}
	if resolved == nil || resolved.Decision != event.DecisionDeny || resolved.By != event.ByDaemon {
		t.Errorf("resolution %+v", resolved)
	}
	if _, err := os.Stat(filepath.Join(cwd, "approved.txt")); err == nil {
		t.Error("the command ran although its permission was never given")
	}
	s.sw.set(fakellm.ScenarioText)
	tc, evs = s.turn(t, ses.ID, "again", nil)
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
		t.Fatalf("turn after the interrupt: %+v\n%s", tc, dump(evs))
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
			s.sw.set(fakellm.ScenarioPermission)
			ses, cwd := s.create(t, c.mode)
			tc, evs := s.turn(t, ses.ID, "Create the file please", nil)
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
			}
			for _, e := range evs {
				if e.Type == event.TypePermissionRequested {
					t.Errorf("mode %s asked: %s", c.mode, e.Data)
				}
			}
			_, err := os.Stat(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file {
				t.Errorf("approved.txt exists: %v\n%s", exists, dump(evs))
			}
			cmd := findItem(items(t, evs), event.ItemCommand)
			if cmd != nil {
				t.Logf("mode %s: command %s %q", c.mode, cmd.Status, cmd.Error)
			}
			if cmd == nil || (cmd.Status == event.StatusCompleted) != c.file {
				t.Errorf("command item %+v", cmd)
			}
		})
	}
}

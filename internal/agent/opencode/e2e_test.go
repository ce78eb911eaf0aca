package opencode

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	engine "github.com/agentbox/agentbox/internal/session"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// The end-to-end tests run the real OpenCode CLI (installed by `make test`
// into the agent cache) through agentbox's HTTP API against
// internal/fakellm. Subtests share one stack and so one `opencode serve`
// (its start is the slow part).

var record = flag.Bool("record", false, "write the e2e tests' native events to testdata/transcripts/e2e-*.jsonl")

const fakeKey = "sk-fake-opencode"

func opencodeBinary(t testing.TB) (string, string) {
	t.Helper()
	in, ok, err := install.Lookup(Name)
	if err != nil || !ok {
		t.Fatalf("the opencode CLI is not installed in the agent cache (lookup: ok=%v, err=%v): run `make test`, which installs it (or `go run ./cmd/agentbox agents install opencode`)", ok, err)
	}
	return in.Binary, in.Version
}

// switcher is a reverse proxy in front of the fake LLM whose scenario the
// test changes between turns (a server's base URL is fixed when it starts).
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
	ad    *adapter

	recMu sync.Mutex
	rec   map[string][]byte // cwd → recorded events
}

func newStack(t *testing.T) *stack {
	t.Helper()
	opencodeBinary(t)
	dir := t.TempDir()
	ctx := context.Background()
	llm, err := fakellm.Start(ctx, fakellm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switcher{srv: llm, cur: fakellm.ScenarioText}
	swSrv := httptest.NewServer(sw)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ad := New(Options{
		Binary: func() (string, string, error) {
			in, ok, err := install.Lookup(Name)
			if err == nil && !ok {
				err = fmt.Errorf("not installed")
			}
			return in.Binary, in.Version, err
		},
		APIKey:     fakeKey,
		Home:       filepath.Join(dir, "opencode-home"),
		MaxRetries: -1,
		Logf:       t.Logf,
	}).(*adapter)
	s := &stack{llm: llm, sw: sw, swURL: swSrv.URL, ad: ad, rec: map[string][]byte{}}
	ad.tap = func(cwd string, data []byte) {
		s.recMu.Lock()
		defer s.recMu.Unlock()
		line := strings.ReplaceAll(string(data), cwd, "<workdir>")
		s.rec[cwd] = append(append(s.rec[cwd], line...), '\n')
	}
	reg := agent.NewRegistry()
	reg.Register(Name, ad)
	mgr := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: filepath.Join(dir, "workspaces"), PermissionTimeout: time.Minute})
	api := httptest.NewServer(httpapi.New(httpapi.Config{}, mgr, metrics.New(), nil))
	c, err := client.New(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mgr.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		_ = ad.Close()
		api.Close()
		swSrv.Close()
		_ = llm.Close()
		_ = st.Close()
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

func (s *stack) create(t *testing.T, mode string) (client.Session, string) {
	t.Helper()
	cwd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	ses, err := s.c.CreateSession(ctx, client.CreateSession{Agent: Name, Cwd: cwd, PermissionMode: mode,
		Env: map[string]string{"OPENAI_BASE_URL": s.swURL + "/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session created in %s", time.Since(start).Round(time.Millisecond))
	return ses, cwd
}

func (s *stack) turn(t *testing.T, sid, text string, onEvent func(event.Event)) (event.TurnCompleted, []event.Event) {
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

func answer(t *testing.T, s *stack, sid, decision string) func(event.Event) {
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

func TestE2E(t *testing.T) {
	s := newStack(t)

	t.Run("write", func(t *testing.T) {
		s.sw.set(fakellm.ScenarioWrite)
		ses, cwd := s.create(t, "accept_edits")
		if ses.NativeSessionID == "" || !strings.HasPrefix(ses.NativeSessionID, "ses_") {
			t.Errorf("native session id %q", ses.NativeSessionID)
		}
		start := time.Now()
		tc, evs := s.turn(t, ses.ID, "Create the file please", nil)
		t.Logf("turn took %s", time.Since(start).Round(time.Millisecond))
		s.save(t, "write", cwd)
		if tc.StopReason != event.StopEndTurn {
			t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
		}
		if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
			t.Fatalf("hello.txt = %q, %v", b, err)
		}
		its := items(t, evs)
		fc := findItem(its, event.ItemFileChange)
		if fc == nil || fc.Status != event.StatusCompleted || len(fc.Changes) != 1 || fc.Changes[0].Path != "hello.txt" ||
			fc.Changes[0].Kind != event.FileAdd || !strings.Contains(fc.Changes[0].Diff, "+hi") || fc.NativeID == "" {
			t.Errorf("file change %+v\n%s", fc, dump(evs))
		}
		if lastMessage(its) != "done" {
			t.Errorf("last message %q\n%s", lastMessage(its), dump(evs))
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
		for _, r := range s.llm.Requests() {
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
			s.sw.set(fakellm.ScenarioPermission)
			ses, cwd := s.create(t, "default")
			tc, evs := s.turn(t, ses.ID, "Create the file please", answer(t, s, ses.ID, c.decision))
			s.save(t, "permission-"+c.decision, cwd)
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
			if req == nil || req.Kind != event.PermCommand || req.Title != "bash: printf approved > approved.txt" || req.ItemID == "" {
				t.Fatalf("permission request %+v\n%s", req, dump(evs))
			}
			b, err := os.ReadFile(filepath.Join(cwd, "approved.txt"))
			if exists := err == nil; exists != c.file || (c.file && string(b) != "approved") {
				t.Errorf("approved.txt = %q, %v", b, err)
			}
			cmd := findItem(items(t, evs), event.ItemCommand)
			if cmd == nil || cmd.ID != req.ItemID || cmd.Status != c.status || cmd.Command != "printf approved > approved.txt" {
				t.Errorf("command item %+v\n%s", cmd, dump(evs))
			}
			// The agent carries on after a deny.
			if lastMessage(items(t, evs)) != "done" {
				t.Errorf("last message %q\n%s", lastMessage(items(t, evs)), dump(evs))
			}
			if c.file && (cmd == nil || cmd.ExitCode == nil || *cmd.ExitCode != 0) {
				t.Errorf("command item without exit code 0: %+v", cmd)
			}
		})
	}

	t.Run("two-turns", func(t *testing.T) {
		s.sw.set(fakellm.ScenarioMulti)
		ses, cwd := s.create(t, "accept_edits")
		tc, evs := s.turn(t, ses.ID, "first", nil)
		if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
			t.Fatalf("first turn: %+v\n%s", tc, dump(evs))
		}
		tc, evs = s.turn(t, ses.ID, "second", nil)
		s.save(t, "two-turns", cwd)
		// "second answer" comes only when the model sees the first exchange.
		if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "second answer" {
			t.Fatalf("second turn: %+v\n%s", tc, dump(evs))
		}
	})

	t.Run("interrupt", func(t *testing.T) {
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
		t.Logf("interrupt → turn.completed in %s", time.Since(interrupted))
		if d := time.Since(interrupted); d > 4*time.Second {
			t.Errorf("the turn ended %s after the interrupt", d)
		}
		for _, e := range evs {
			if e.Type == event.TypeError {
				t.Errorf("an interrupt reported an error: %s", e.Data)
			}
		}
		s.sw.set(fakellm.ScenarioText)
		tc, evs = s.turn(t, ses.ID, "again", nil)
		if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
			t.Fatalf("turn after the interrupt: %+v\n%s", tc, dump(evs))
		}
	})

	t.Run("upstream-error", func(t *testing.T) {
		s.sw.set(fakellm.ScenarioError500)
		ses, cwd := s.create(t, "default")
		start := time.Now()
		tc, evs := s.turn(t, ses.ID, "hello", nil)
		s.save(t, "error500", cwd)
		t.Logf("the failed turn took %s", time.Since(start).Round(time.Millisecond))
		if tc.StopReason != event.StopError {
			t.Fatalf("stop reason %s\n%s", tc.StopReason, dump(evs))
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
			t.Errorf("error events %+v\n%s", errs, dump(evs))
		}
		s.sw.set(fakellm.ScenarioText)
		tc, evs = s.turn(t, ses.ID, "hello again", nil)
		if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
			t.Fatalf("turn after the error: %+v\n%s", tc, dump(evs))
		}
	})
}

// TestE2EKilledServer kills `opencode serve` mid-turn: the session ends
// with the exit code and a clear message, and a new session starts a fresh
// server.
func TestE2EKilledServer(t *testing.T) {
	s := newStack(t)
	s.sw.set(fakellm.ScenarioSlow)
	ses, _ := s.create(t, "default")
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
				s.ad.mu.Lock()
				var pid int
				for _, srv := range s.ad.servers {
					pid = srv.cmd.Process.Pid
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
	s.sw.set(fakellm.ScenarioText)
	ses2, _ := s.create(t, "default")
	tc, evs := s.turn(t, ses2.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn || lastMessage(items(t, evs)) != "done" {
		t.Fatalf("turn on a fresh server: %+v\n%s", tc, dump(evs))
	}
}

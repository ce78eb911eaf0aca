package agenttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	engine "github.com/agentbox/agentbox/internal/session"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// Defaults of Target.
const (
	DefaultTimeout         = 2 * time.Minute
	DefaultInterruptWithin = 5 * time.Second
	// FakeKey is the API key LLM.Key returns.
	FakeKey = "sk-fake-agenttest"
)

// LLM is the fake model provider of one Run, as the adapter factory and
// Target.Env see it.
type LLM interface {
	// URL returns the base URL the agent should use as its provider's,
	// with Target.URLSuffix appended (e.g. "/v1" for OpenAI clients).
	// With scenario "", requests go through the suite's switcher, which
	// serves whatever scenario the running subtest selected: this is the
	// URL an adapter or session should be configured with. A non-empty
	// scenario pins that scenario instead, bypassing the switcher.
	URL(scenario string) string
	// Key is the API key the fake LLM expects to be sent (any key is
	// accepted; the suite checks this one reached it).
	Key() string
	// Requests returns the requests the fake LLM answered so far.
	Requests() []fakellm.Request
}

// Target is one agent adapter under test.
type Target struct {
	// Name is the adapter's registry name (sessions are created with it).
	Name string
	// New builds the adapter, pointed at llm (through its options, or
	// through Env below). It is called once per Run.
	New func(t *testing.T, llm LLM) agent.Adapter
	// Env, if set, is the environment every session is created with
	// (client.CreateSession.Env), e.g. the provider's base URL and key.
	Env func(llm LLM) map[string]string
	// Caps is what the adapter claims. Each true flag the suite can check
	// is asserted; for a false flag the assertion is skipped with a
	// message. It is compared with the adapter's Info().Capabilities.
	Caps agent.Capabilities
	// Protocol is the fakellm API the agent speaks (fakellm.APIAnthropic,
	// APIResponses, APIChat, APIGemini); the suite checks the agent's
	// requests used it. Empty skips that check.
	Protocol string
	// URLSuffix is appended to the base URLs LLM.URL returns ("/v1").
	URLSuffix string
	// KillAgent kills the agent's process of the session running in
	// sessionCwd, as a crash would (SIGKILL). Nil means KillAgentByCwd:
	// the direct child of the test process whose cwd is sessionCwd.
	KillAgent func(t *testing.T, sessionCwd string)
	// Timeout bounds each turn (DefaultTimeout).
	Timeout time.Duration
	// InterruptWithin bounds the time from the interrupt request to the
	// turn's turn.completed (DefaultInterruptWithin).
	InterruptWithin time.Duration
}

// Run builds one stack for tg (SQLite store, session engine with the
// adapter registered, HTTP API on a real server, the Go client) and one
// fake LLM behind a scenario switcher, and runs the conformance subtests on
// it one after another. See the package doc.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.Name == "" || tg.New == nil {
		t.Fatal("agenttest: Target needs Name and New")
	}
	if tg.Timeout <= 0 {
		tg.Timeout = DefaultTimeout
	}
	if tg.InterruptWithin <= 0 {
		tg.InterruptWithin = DefaultInterruptWithin
	}
	if tg.KillAgent == nil {
		tg.KillAgent = KillAgentByCwd
	}
	s := newSuite(t, tg)
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"write", s.testWrite},
		{"permission_allow", func(t *testing.T) { s.testPermission(t, true) }},
		{"permission_deny", func(t *testing.T) { s.testPermission(t, false) }},
		{"two_turns", s.testTwoTurns},
		{"interrupt", s.testInterrupt},
		{"crash", s.testCrash},
		{"upstream_error", s.testUpstreamError},
	} {
		start := time.Now()
		t.Run(c.name, c.fn)
		t.Logf("%s: %s", c.name, time.Since(start).Round(time.Millisecond))
	}
}

// switcher is a reverse proxy in front of the fake LLM whose scenario
// changes between turns (an agent's base URL is fixed when it starts).
type switcher struct {
	llm *fakellm.Server
	mu  sync.Mutex
	cur string
}

func (sw *switcher) set(name string) {
	sw.mu.Lock()
	sw.cur = name
	sw.mu.Unlock()
}

func (sw *switcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw.mu.Lock()
	target, err := url.Parse(sw.llm.ScenarioURL(sw.cur))
	sw.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}).ServeHTTP(w, r)
}

type fakeLLM struct {
	srv    *fakellm.Server
	swURL  string
	suffix string
}

func (l *fakeLLM) URL(scenario string) string {
	if scenario == "" {
		return l.swURL + l.suffix
	}
	return l.srv.ScenarioURL(scenario) + l.suffix
}
func (l *fakeLLM) Key() string                 { return FakeKey }
func (l *fakeLLM) Requests() []fakellm.Request { return l.srv.Requests() }

type suite struct {
	tg  Target
	c   *client.Client
	llm *fakeLLM
	sw  *switcher
}

func newSuite(t *testing.T, tg Target) *suite {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	srv, err := fakellm.Start(ctx, fakellm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switcher{llm: srv, cur: fakellm.ScenarioText}
	swSrv := httptest.NewServer(sw)
	llm := &fakeLLM{srv: srv, swURL: swSrv.URL, suffix: tg.URLSuffix}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ad := tg.New(t, llm)
	reg := agent.NewRegistry()
	reg.Register(tg.Name, ad)
	mgr := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: filepath.Join(dir, "workspaces"), PermissionTimeout: time.Minute})
	api := httptest.NewServer(httpapi.New(httpapi.Config{}, mgr, metrics.New(), nil))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mgr.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		api.Close()
		swSrv.Close()
		_ = srv.Close()
		_ = st.Close()
	})
	c, err := client.New(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	info := ad.Info(ctx)
	if !info.Available {
		t.Fatalf("agent %s is not available: %s", tg.Name, info.Reason)
	}
	if info.Capabilities != tg.Caps {
		t.Errorf("Target.Caps %+v differ from the adapter's Info().Capabilities %+v", tg.Caps, info.Capabilities)
	}
	t.Logf("agent %s %s (%s), caps %+v", tg.Name, info.Version, info.Path, tg.Caps)
	return &suite{tg: tg, c: c, llm: llm, sw: sw}
}

// sessionCheck says how a session's log is checked at the end of a subtest.
type sessionCheck struct {
	// shape is the pattern (MatchShape) the whole log must match.
	shape []string
}

// session creates a session in a fresh directory. At the end of the
// subtest the session is deleted (terminated) and its whole log is read
// back and checked with CheckInvariants and against chk.shape.
func (s *suite) session(t *testing.T, mode string, chk sessionCheck) (client.Session, string) {
	t.Helper()
	cwd := t.TempDir()
	// Resolve symlinks (e.g. a /tmp link) so cwd compares equal to
	// /proc/PID/cwd.
	if r, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	var env map[string]string
	if s.tg.Env != nil {
		env = s.tg.Env(s.llm)
	}
	ses, err := s.c.CreateSession(ctx, client.CreateSession{Agent: s.tg.Name, Cwd: cwd, PermissionMode: mode, Env: env})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.c.DeleteSession(ctx, ses.ID, false); err != nil {
			t.Errorf("delete session: %v", err)
		}
		var log []event.Event
		if err := s.c.EventsAll(ctx, ses.ID, 0, func(e event.Event) error { log = append(log, e); return nil }); err != nil {
			t.Errorf("read the log: %v", err)
			return
		}
		// No exception, not even for an agent that died mid-item: the
		// engine completes what the agent left open.
		if errs := CheckInvariants(log); len(errs) > 0 {
			t.Errorf("invariants of session %s:\n%v\nshape:\n  %s\nevents:\n%s", ses.ID, joinErrs(errs),
				strings.Join(Shape(log), "\n  "), Dump(log))
		}
		if chk.shape != nil {
			if err := MatchShape(Shape(log), chk.shape...); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			t.Logf("events of session %s:\n%s", ses.ID, Dump(log))
		}
	})
	return ses, cwd
}

// turn sends text and follows the turn to its end; onEvent (may be nil)
// sees each event first.
func (s *suite) turn(t *testing.T, sid, text string, onEvent func(event.Event)) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	after, err := s.c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.c.Send(ctx, sid, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
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
		t.Fatalf("turn %q: %v\nevents:\n%s", text, err, Dump(evs))
	}
	return tc, evs
}

// answerAll answers every permission request of the turn with decision.
func (s *suite) answerAll(t *testing.T, sid, decision string) func(event.Event) {
	return func(e event.Event) {
		if e.Type != event.TypePermissionRequested {
			return
		}
		p := decode[event.PermissionRequested](e)
		if _, err := s.c.AnswerPermission(context.Background(), sid, p.ID, client.PermissionAnswer{Decision: decision}); err != nil {
			t.Errorf("answer permission %s: %v", p.ID, err)
		}
	}
}

// Dump renders events one a line, for failure messages.
func Dump(evs []event.Event) string {
	var sb strings.Builder
	for _, e := range evs {
		d := string(e.Data)
		if len(d) > 300 {
			d = d[:300] + "…"
		}
		fmt.Fprintf(&sb, "%4d %-20s %-6s %s\n", e.Seq, e.Type, e.Source, d)
	}
	return sb.String()
}

func completedItems(evs []event.Event) []event.Item {
	var out []event.Item
	for _, e := range evs {
		if e.Type == event.TypeItemCompleted {
			out = append(out, decode[event.ItemCompleted](e).Item)
		}
	}
	return out
}

func findItem(its []event.Item, kinds ...event.ItemKind) *event.Item {
	for i := range its {
		for _, k := range kinds {
			if its[i].Kind == k {
				return &its[i]
			}
		}
	}
	return nil
}

func lastAssistant(its []event.Item) *event.Item {
	var m *event.Item
	for i := range its {
		if its[i].Kind == event.ItemMessage && its[i].Role == event.RoleAssistant {
			m = &its[i]
		}
	}
	return m
}

func lastMessage(its []event.Item) string {
	if m := lastAssistant(its); m != nil {
		return m.Text()
	}
	return ""
}

// textDeltas counts the text deltas of item id.
func textDeltas(evs []event.Event, id string) int {
	n := 0
	for _, e := range evs {
		if e.Type == event.TypeItemDelta {
			if d := decode[event.ItemDelta](e); d.ItemID == id && d.Field == event.DeltaText {
				n++
			}
		}
	}
	return n
}

func ofType(evs []event.Event, typ event.Type) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func fileContent(cwd, name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(cwd, name))
	return string(b), err == nil
}

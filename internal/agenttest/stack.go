package agenttest

import (
	"context"
	"fmt"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// StackOptions configure NewStack.
type StackOptions struct {
	// Name is the adapter's registry name (sessions are created with it).
	Name string
	// New builds the adapter, pointed at llm (through its options, or
	// through Env below). It is called once, before the stack registers
	// its own cleanup, so cleanups New registers run after the stack has
	// shut down.
	New func(t testing.TB, llm LLM) agent.Adapter
	// Env, if set, gives the environment every session is created with
	// (client.CreateSession.Env), e.g. the provider's base URL and key.
	Env func(llm LLM) map[string]string
	// URLSuffix is appended to the base URLs LLM.URL returns ("/v1").
	URLSuffix string
	// Scenarios are extra fakellm scenarios (fakellm.Options.Scenarios).
	Scenarios map[string]*fakellm.Scenario
	// Cwd makes the directory of a new session (Host.Workspace by
	// default).
	Cwd func(t testing.TB) string
	// Host serves the API (EngineHost by default).
	Host Host
	// Timeout bounds the creation of a session and each turn
	// (DefaultTimeout).
	Timeout time.Duration
}

// Stack is the daemon's stack for end-to-end tests of one adapter: the
// HTTP API its Host serves on a real server with the adapter registered
// (by default a SQLite store and the session engine), the Go client over
// HTTP, and a fake LLM behind a scenario switcher (fakellm.ScenarioText
// until SetScenario).
type Stack struct {
	// C is the client of the stack's HTTP API.
	C *client.Client
	// LLM is the fake LLM; LLM.URL("") is the switcher's URL.
	LLM LLM
	// Adapter is the adapter StackOptions.New built.
	Adapter agent.Adapter
	// Host is the host serving the API.
	Host Host

	opts StackOptions
	sw   *switcher
}

// NewStack builds the stack; it is torn down (the host shut down, then
// the fake LLM closed) when t ends.
func NewStack(t testing.TB, opts StackOptions) *Stack {
	t.Helper()
	if opts.Name == "" || opts.New == nil {
		t.Fatal("agenttest: StackOptions needs Name and New")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Host == nil {
		opts.Host = EngineHost{}
	}
	if opts.Cwd == nil {
		opts.Cwd = opts.Host.Workspace
	}
	srv, err := fakellm.Start(context.Background(), fakellm.Options{Scenarios: opts.Scenarios})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switcher{llm: srv, cur: fakellm.ScenarioText}
	swSrv := httptest.NewServer(sw)
	llm := &fakeLLM{srv: srv, swURL: swSrv.URL, suffix: opts.URLSuffix}
	ad := opts.New(t, llm)
	t.Cleanup(func() {
		swSrv.Close()
		_ = srv.Close()
	})
	reg := agent.NewRegistry()
	reg.Register(opts.Name, ad)
	// Cleanups run last first: the host shuts down before the fake LLM
	// closes.
	c := opts.Host.Serve(t, reg)
	return &Stack{C: c, LLM: llm, Adapter: ad, Host: opts.Host, opts: opts, sw: sw}
}

// SetScenario selects the fakellm scenario the switcher serves from now on
// (an agent's base URL is fixed when it starts; the scenario is not).
func (s *Stack) SetScenario(name string) { s.sw.set(name) }

// Create creates a session in a fresh directory (StackOptions.Cwd) and
// returns it with that directory. Its environment is StackOptions.Env's
// with env on top (nil when both are empty).
func (s *Stack) Create(t testing.TB, mode string, env map[string]string) (client.Session, string) {
	t.Helper()
	return s.CreateWith(t, client.CreateSession{PermissionMode: mode, Env: env})
}

// CreateWith is Create with more of the request (e.g. MCPServers): its
// agent and policy are the stack's, its cwd too unless req has one, and
// its env is added to the stack's.
func (s *Stack) CreateWith(t testing.TB, req client.CreateSession) (client.Session, string) {
	t.Helper()
	env := req.Env
	cwd := req.Cwd
	if cwd == "" {
		cwd = s.opts.Cwd(t)
	}
	var all map[string]string
	if s.opts.Env != nil {
		all = s.opts.Env(s.LLM)
	}
	if len(env) > 0 {
		if all == nil {
			all = map[string]string{}
		}
		maps.Copy(all, env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	start := time.Now()
	req.Agent, req.Cwd, req.Env, req.Policy = s.opts.Name, cwd, all, s.Host.Policy()
	ses, err := s.C.CreateSession(ctx, req)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Logf("session %s created in %s", ses.ID, time.Since(start).Round(time.Millisecond))
	return ses, cwd
}

// Turn sends text and follows the turn to its end; onEvent (may be nil)
// sees each event first. It returns the turn's turn.completed and its
// events.
func (s *Stack) Turn(t testing.TB, sid, text string, onEvent func(event.Event)) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	after, err := s.C.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.C.Send(ctx, sid, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	var evs []event.Event
	tc, err := s.C.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
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

// Answer returns an onEvent for Turn that answers every permission request
// of session sid with decision ("allow", "deny").
func (s *Stack) Answer(t testing.TB, sid, decision string) func(event.Event) {
	return func(e event.Event) {
		if e.Type != event.TypePermissionRequested {
			return
		}
		p := decode[event.PermissionRequested](e)
		if _, err := s.C.AnswerPermission(context.Background(), sid, p.ID, client.PermissionAnswer{Decision: decision}); err != nil {
			t.Errorf("answer permission %s: %v", p.ID, err)
		}
	}
}

// switcher is a reverse proxy in front of the fake LLM whose scenario
// changes between turns (an agent's base URL is fixed when it starts).
type switcher struct {
	llm *fakellm.Server
	mu  sync.Mutex
	cur string
	log []carried // the requests carried, for failure messages
}

// carried is one request the switcher carried to the fake LLM, and how it
// ended: a test whose stream ended early shows which side gave up first.
type carried struct {
	start, end time.Time
	method     string
	path       string
	scenario   string
	err        string // the proxy's error, "" when the answer went through whole
	clientGone bool   // the agent's side went away before the answer ended
}

// maxCarried bounds the switcher's log (the oldest go).
const maxCarried = 256

func (sw *switcher) set(name string) {
	sw.mu.Lock()
	sw.cur = name
	sw.mu.Unlock()
}

func (sw *switcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw.mu.Lock()
	scenario := sw.cur
	target, err := url.Parse(sw.llm.ScenarioURL(scenario))
	sw.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// One request per connection on the agent's side too: after an aborted
	// stream (interrupt), Bun-based agents have been seen reusing a pooled
	// socket the server was closing, failing the next turn with "socket
	// connection was closed unexpectedly" before it reached the fake LLM.
	w.Header().Set("Connection", "close")
	rec := carried{start: time.Now(), method: r.Method, path: r.URL.Path, scenario: scenario}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: proxyTransport,
		// Errors go into the record (and Recent's failure messages), not
		// to the process's log, where nothing ties them to a test.
		ErrorLog: log.New(writerFunc(func(p []byte) (int, error) {
			rec.err = strings.TrimSpace(string(p))
			return len(p), nil
		}), "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			rec.err = err.Error()
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	defer func() {
		rec.end, rec.clientGone = time.Now(), r.Context().Err() != nil
		sw.mu.Lock()
		if len(sw.log) == maxCarried {
			sw.log = slices.Delete(sw.log, 0, 1)
		}
		sw.log = append(sw.log, rec)
		sw.mu.Unlock()
	}()
	// As the egress proxy does (internal/sandbox/egress, forward): the
	// fake LLM answers once it has the body, maybe before this proxy's
	// transport has read the body's end.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// since renders the requests carried since t, one a line.
func (sw *switcher) since(t time.Time) string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var sb strings.Builder
	for _, c := range sw.log {
		if c.end.Before(t) {
			continue
		}
		fmt.Fprintf(&sb, "  %s +%s %s %s (scenario %s) client gone: %t, error: %q\n",
			c.start.Format("15:04:05.000"), c.end.Sub(c.start).Round(time.Millisecond), c.method, c.path, c.scenario, c.clientGone, c.err)
	}
	if sb.Len() == 0 {
		return "  none\n"
	}
	return sb.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// proxyTransport opens a fresh connection to the fake LLM per request: a
// pooled one may have been closed under it by an aborted (interrupted)
// stream, which the agent would see as a transport error.
var proxyTransport = &http.Transport{DisableKeepAlives: true}

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

// Items returns the items of the item.completed events among evs.
func Items(t testing.TB, evs []event.Event) []event.Item {
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

// FindItem returns the first item of one of kinds, or nil.
func FindItem(its []event.Item, kinds ...event.ItemKind) *event.Item {
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

// LastMessage returns the text of the last assistant message among its
// ("" without one).
func LastMessage(its []event.Item) string {
	if m := lastAssistant(its); m != nil {
		return m.Text()
	}
	return ""
}

// RequireInstalled returns the agent CLI in the agent cache, failing (never
// skipping) the test when it is not there: a missing CLI is a broken set-up,
// which `make test` mends by installing it.
func RequireInstalled(t testing.TB, name string) install.Installed {
	t.Helper()
	in, ok, err := install.Lookup(name)
	if err != nil || !ok {
		t.Fatalf("the %s CLI is not installed in the agent cache (lookup: ok=%v, err=%v): run `make test`, which installs it (or `go run ./cmd/agentbox agents install %s`)", name, ok, err, name)
	}
	return in
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/stacktest"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	// The mock agent's commands run under the agent-tree supervisor, a
	// re-execution of this binary.
	reexec.Init()
	goleak.VerifyTestMain(m)
}

// newStack serves the real stack (internal/stacktest) with the mock agent
// (or opts.Agents); its Client has opts.ClientOptions.
func newStack(t *testing.T, opts stacktest.Options) *stacktest.Stack {
	t.Helper()
	if opts.Agents == nil {
		opts.Agents = agent.NewRegistry()
		opts.Agents.Register(mock.Name, mock.New())
	}
	// The SDK cannot see a power failure: writes need not wait for the disk.
	opts.Store.Sync = sqlite.SyncNormal
	return stacktest.New(t, opts)
}

// mockScript is the text that makes the mock agent run steps.
func mockScript(t *testing.T, steps ...mock.Step) string {
	t.Helper()
	b, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	return "/mock " + string(b)
}

// hang is a message whose turn runs until it is interrupted.
const hang = "/scenario sleep 1h"

func TestEndpoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newStack(t, stacktest.Options{}).Client

	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" || h.SchemaVersion != event.SchemaVersion {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	agents, err := c.Agents(ctx)
	if err != nil || len(agents.Agents) != 1 || agents.Agents[0].Name != "mock" || !agents.Agents[0].Available {
		t.Fatalf("Agents = %+v, %v", agents, err)
	}

	var ids []string
	for range 3 {
		s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Model: "m1", PermissionMode: client.PermissionAcceptEdits, Metadata: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Agent != "mock" || s.Model != "m1" || s.PermissionMode != client.PermissionAcceptEdits || s.Metadata["k"] != "v" || s.Status != client.StatusIdle {
			t.Fatalf("CreateSession = %+v", s)
		}
		ids = append(ids, s.ID)
	}

	// Newest first, paged by NextBefore.
	var listed []string
	opts := client.ListOptions{Limit: 2}
	for {
		page, err := c.ListSessions(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Sessions {
			listed = append(listed, s.ID)
		}
		if page.NextBefore == "" {
			break
		}
		opts.Before = page.NextBefore
	}
	if want := []string{ids[2], ids[1], ids[0]}; !gocmp.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}

	id := ids[0]
	turn, err := c.Send(ctx, id, "hi there")
	if err != nil || turn.TurnID == "" {
		t.Fatalf("Send = %+v, %v", turn, err)
	}
	var text strings.Builder
	var lastSeen int64
	tc, err := c.WaitTurn(ctx, id, turn.TurnID, 1, func(ev event.Event) error {
		lastSeen = ev.Seq
		if ev.Type == event.TypeItemDelta {
			p, err := ev.Decode()
			if err != nil {
				return err
			}
			text.WriteString(p.(*event.ItemDelta).Delta)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tc.TurnID != turn.TurnID || tc.StopReason != event.StopEndTurn || tc.Usage == nil {
		t.Fatalf("turn.completed = %+v", tc)
	}
	if text.String() != "You said: hi there" {
		t.Fatalf("streamed text %q", text.String())
	}

	page, err := c.Events(ctx, id, 0, 3)
	if err != nil || len(page.Events) != 3 || !page.HasMore || page.NextAfter != 3 || page.Events[0].Type != event.TypeSessionStarted {
		t.Fatalf("Events = %+v, %v", page, err)
	}
	last, err := c.LastSeq(ctx, id)
	if err != nil || last != lastSeen { // the turn's turn.completed
		t.Fatalf("LastSeq = %d, %v", last, err)
	}

	reqs, err := c.Requests(ctx, id, client.RequestsPending)
	if err != nil || len(reqs.Requests) != 0 {
		t.Fatalf("Requests = %+v, %v", reqs, err)
	}

	if err := c.DeleteSession(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	s, err := c.GetSession(ctx, id)
	if err != nil || s.Status != client.StatusEnded || s.EndedAt == nil {
		t.Fatalf("GetSession after delete = %+v, %v", s, err)
	}
	if _, err := c.Send(ctx, id, "again"); !client.IsNotLive(err) {
		t.Fatalf("Send to ended session: %v, want not-live", err)
	}
	if err := c.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(ctx, id); !client.IsNotFound(err) {
		t.Fatalf("GetSession after purge: %v, want not-found", err)
	}
}

func TestPermissionsAndQuestions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// Permission, then the command it gates, then a question: the agent
	// says what it was answered.
	c := newStack(t, stacktest.Options{}).Client
	script := mockScript(t,
		mock.Step{Kind: mock.KindPermission, Text: "Run ls"},
		mock.Step{Kind: mock.KindCommand, Command: "true"},
		mock.Step{Kind: mock.KindQuestion, Text: "Which?", Options: []event.QuestionOption{{ID: "a", Label: "A"}}})
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(ctx, s.ID, script)
	if err != nil {
		t.Fatal(err)
	}
	var resolved []event.Event
	var said []string
	ran := false
	tc, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, func(ev event.Event) error {
		p, err := ev.Decode()
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *event.PermissionRequested:
			reqs, err := c.Requests(ctx, s.ID, client.RequestsPending)
			if err != nil || len(reqs.Requests) != 1 || reqs.Requests[0].ID != p.ID || reqs.Requests[0].Kind != "permission" {
				t.Errorf("pending requests = %+v, %v", reqs, err)
			}
			r, err := c.AnswerPermission(ctx, s.ID, p.ID, client.PermissionAnswer{Decision: "allow", OptionID: "allow"})
			if err != nil {
				return err
			}
			resolved = append(resolved, r.Event)
			if _, err := c.AnswerPermission(ctx, s.ID, p.ID, client.PermissionAnswer{Decision: "deny"}); !client.IsAlreadyResolved(err) {
				t.Errorf("second answer: %v, want already-resolved", err)
			}
		case *event.QuestionRequested:
			r, err := c.AnswerQuestion(ctx, s.ID, p.ID, client.QuestionAnswer{OptionID: p.Options[0].ID})
			if err != nil {
				return err
			}
			resolved = append(resolved, r.Event)
		case *event.ItemCompleted:
			switch it := p.Item; {
			case it.Kind == event.ItemCommand:
				ran = it.Status == event.StatusCompleted
			case it.Kind == event.ItemMessage && it.Role == event.RoleAssistant:
				said = append(said, it.Text())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tc.StopReason != event.StopEndTurn || !ran || !slices.Contains(said, "You answered: A") {
		t.Fatalf("the agent saw the wrong answers: %+v, command ran %v, said %q", tc, ran, said)
	}
	if len(resolved) != 2 || resolved[0].Type != event.TypePermissionResolved || resolved[1].Type != event.TypeQuestionResolved || resolved[0].Seq == 0 {
		t.Fatalf("resolved events = %+v", resolved)
	}
	reqs, err := c.Requests(ctx, s.ID, client.RequestsResolved)
	if err != nil || len(reqs.Requests) != 2 {
		t.Fatalf("resolved requests = %+v, %v", reqs, err)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	stk := newStack(t, stacktest.Options{API: httpapi.Config{Token: "s3cret"}, ClientOptions: []client.Option{client.WithToken("s3cret")}})
	c := stk.Client
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, s.ID, hang); err != nil {
		t.Fatal(err)
	}
	bad, err := client.New(stk.URL, client.WithToken("wrong-token"))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		call   func() error
		is     func(error) bool
		status int
		kind   string
	}{
		{"unknown session", func() error { _, err := c.GetSession(ctx, "ses_nope"); return err }, client.IsNotFound, 404, "not-found"},
		{"empty agent", func() error { _, err := c.CreateSession(ctx, client.CreateSession{}); return err }, client.IsValidation, 422, "validation"},
		{"unknown agent", func() error { _, err := c.CreateSession(ctx, client.CreateSession{Agent: "nope"}); return err }, client.IsUnknownAgent, 422, "unknown-agent"},
		{"busy", func() error { _, err := c.Send(ctx, s.ID, "again"); return err }, client.IsBusy, 409, "busy"},
		{"no turn to interrupt", func() error { _, err := c.Interrupt(ctx, idle.ID); return err }, client.IsNoTurn, 409, "no-turn"},
		{"unknown permission", func() error {
			_, err := c.AnswerPermission(ctx, s.ID, "perm_x", client.PermissionAnswer{Decision: "allow"})
			return err
		}, client.IsNotFound, 404, "not-found"},
		{"wrong token", func() error { _, err := bad.Agents(ctx); return err }, client.IsUnauthorized, 401, "unauthorized"},
	}
	for _, tt := range tests {
		err := tt.call()
		var ae *client.APIError
		if !errors.As(err, &ae) {
			t.Errorf("%s: error %v (%T) is not an *APIError", tt.name, err, err)
			continue
		}
		if !tt.is(err) || ae.Status != tt.status || ae.Kind() != tt.kind || ae.Type != client.ProblemTypeBase+tt.kind || ae.Title == "" || ae.Detail == "" {
			t.Errorf("%s: %+v", tt.name, ae)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong-token") {
			t.Errorf("%s: error leaks the token: %v", tt.name, err)
		}
	}

	_, err = c.CreateSession(ctx, client.CreateSession{})
	if msg := err.Error(); !strings.Contains(msg, "POST /v1/sessions: 422") || !strings.Contains(msg, "body.agent") {
		t.Errorf("validation error text %q", msg)
	}
	if _, err := c.Interrupt(ctx, s.ID); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
}

func TestErrorsWithoutProblemBody(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/health":
			http.Error(w, "upstream exploded", http.StatusBadGateway)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusTeapot)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<h1>nope</h1>"))
		}
	}))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Health(t.Context())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Kind() != "other" || !ae.Temporary() || ae.Detail != "upstream exploded" {
		t.Fatalf("502: %#v", err)
	}
	_, err = c.GetSession(t.Context(), "x")
	if !client.IsNotFound(err) || client.IsConflict(err) || client.ProblemKind(err) != "not-found" {
		t.Fatalf("404 html: %v", err)
	}
	_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "x"})
	if client.ProblemKind(err) != "other" || err.Error() != "POST /v1/sessions: 418 I'm a teapot" {
		t.Fatalf("418: %v", err)
	}
	if client.IsNotFound(errors.New("plain")) || client.ProblemKind(nil) != "" {
		t.Fatal("a plain error classified as a problem")
	}
}

func TestNewAndHeaders(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "ftp://x", "http://", "unix://relative.sock", "http://h/?q=1", "http://u:p@h", "::"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}

	type seen struct{ path, auth, ua, ct, accept string }
	got := make(chan seen, 10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("User-Agent"), r.Header.Get("Content-Type"), r.Header.Get("Accept")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"turn_id":"t1"}`))
	}))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL+"/prefix/", client.WithToken("tok"), client.WithUserAgent("test-ua/1"), client.WithHTTPClient(&http.Client{}))
	if err != nil {
		t.Fatal(err)
	}
	turn, err := c.Send(t.Context(), "ses/1 x", "hi")
	if err != nil || turn.TurnID != "t1" {
		t.Fatalf("Send = %+v, %v", turn, err)
	}
	want := seen{"/prefix/v1/sessions/ses%2F1%20x/messages", "Bearer tok", "test-ua/1", "application/json", "application/json, application/problem+json"}
	if s := <-got; s != want {
		t.Fatalf("request %+v, want %+v", s, want)
	}
	if _, err := c.GetSession(t.Context(), ""); err == nil {
		t.Fatal("empty id accepted")
	}
	if _, err := c.AnswerPermission(t.Context(), "s", "", client.PermissionAnswer{}); err == nil {
		t.Fatal("empty permission id accepted")
	}
}

func TestUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "ab.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix sockets unavailable: %v", err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" || r.Host != "agentbox" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(client.Health{Status: "ok", Version: "unix"})
	})}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	})

	for _, opts := range [][]client.Option{nil, {client.WithHTTPClient(&http.Client{Transport: &http.Transport{}})}} {
		c, err := client.New("unix://"+sock, opts...)
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Health(t.Context())
		if err != nil || h.Version != "unix" {
			t.Fatalf("Health over unix socket = %+v, %v", h, err)
		}
		c.CloseIdleConnections()
	}
	if _, err := client.New("unix://"+sock, client.WithHTTPClient(&http.Client{Transport: roundTripper(nil)})); err == nil {
		t.Fatal("a non-*http.Transport was accepted for a unix socket")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestModels: Agent returns the agent with the models its sessions
// announced; UpdateSession switches a session's model between turns, and
// its problems (unknown agent or model, a running turn) come back typed.
func TestModels(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	models := []client.Choice{{ID: "m1", Name: "One"}, {ID: "m2"}}
	reg := agent.NewRegistry()
	reg.Register(mock.Name, stacktest.WithModels(mock.New(), models))
	c := newStack(t, stacktest.Options{Agents: reg}).Client
	// The engine learns the agent's models from its first session.
	if _, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"}); err != nil {
		t.Fatal(err)
	}
	a, err := c.Agent(ctx, "mock")
	if err != nil || a.Name != "mock" || !gocmp.Equal(a.Models, models) || a.DefaultModel != "m1" {
		t.Fatalf("Agent = %+v, %v", a, err)
	}
	if _, err := c.Agent(ctx, "nope"); !client.IsNotFound(err) {
		t.Fatalf("Agent(nope) = %v, want not found", err)
	}
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Model: "m9"}); !client.HasProblemType(err, client.ProblemUnknownModel) {
		t.Fatalf("create with an unknown model = %v", err)
	}
	got, err := c.UpdateSession(ctx, s.ID, client.UpdateSession{Model: "m2"})
	if err != nil || got.Model != "m2" {
		t.Fatalf("UpdateSession = %+v, %v", got, err)
	}
	if _, err := c.UpdateSession(ctx, s.ID, client.UpdateSession{Model: "m9"}); !client.HasProblemType(err, client.ProblemUnknownModel) {
		t.Fatalf("update to an unknown model = %v", err)
	}
	if _, err := c.Send(ctx, s.ID, hang); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateSession(ctx, s.ID, client.UpdateSession{Model: "m1"}); !client.HasProblemType(err, client.ProblemBusy) {
		t.Fatalf("update during a turn = %v, want busy", err)
	}
	if _, err := c.UpdateSession(ctx, "", client.UpdateSession{Model: "m1"}); err == nil {
		t.Fatal("update without an id succeeded")
	}
}

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "s3cret-token_value"

type harness struct {
	t    *testing.T
	srv  *httptest.Server
	eng  *fakeEngine
	m    *metrics.Metrics
	logs *syncBuffer
	hc   *http.Client
	tok  string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, eng: newFakeEngine(), m: metrics.New(), logs: &syncBuffer{}, tok: cfg.Token}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	h.srv = httptest.NewServer(New(cfg, h.eng, h.m, log))
	h.hc = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		h.hc.CloseIdleConnections()
		h.srv.Close()
	})
	return h
}

type response struct {
	*http.Response
	body []byte
}

// do sends a request; body "" means none. Header pairs follow: "Name", "value".
// The harness token is sent unless an Authorization header is given; pass
// "Authorization", "" to send none.
func (h *harness) do(method, path, body string, hdr ...string) response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.tok != "" {
		req.Header.Set("Authorization", "Bearer "+h.tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		switch {
		case hdr[i] == "Host":
			req.Host = hdr[i+1]
		case hdr[i+1] == "":
			req.Header.Del(hdr[i])
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{resp, b}
}

// ok asserts the status and decodes the JSON body into v (if not nil).
func (r response) ok(t *testing.T, status int, v any) {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body: %s", r.Request.Method, r.Request.URL.Path, r.StatusCode, status, r.body)
	}
	if v == nil {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	reflect.ValueOf(v).Elem().SetZero()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem asserts a problem+json answer with the status and type.
func (r response) problem(t *testing.T, status int, typ string) client.Problem {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body: %s", r.Request.Method, r.Request.URL, r.StatusCode, status, r.body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body: %s", ct, r.body)
	}
	var p client.Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode problem %s: %v", r.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" {
		t.Fatalf("problem = %+v, want type %s status %d", p, typ, status)
	}
	return p
}

func (h *harness) createSession() client.Session {
	h.t.Helper()
	var s client.Session
	h.do("POST", "/v1/sessions", `{"agent":"mock"}`).ok(h.t, 201, &s)
	return s
}

func TestHealth(t *testing.T) {
	h := newHarness(t, Config{Token: testToken, Version: "1.2.3"})
	var got client.Health
	h.do("GET", "/v1/health", "", "Authorization", "").ok(t, 200, &got)
	if got.Status != "ok" || got.Version != "1.2.3" || got.SchemaVersion != event.SchemaVersion || got.UptimeMS < 0 {
		t.Fatalf("health = %+v", got)
	}
}

func TestAgents(t *testing.T) {
	h := newHarness(t, Config{})
	var got client.AgentList
	h.do("GET", "/v1/agents", "").ok(t, 200, &got)
	want := client.AgentList{Agents: []client.Agent{
		{Name: "mock", Title: "Mock agent", Available: true, Installed: true, Version: "1.0.0",
			Capabilities: client.Capabilities{Text: true, Deltas: true, Permissions: true, Questions: true, Interrupt: true}},
		{Name: "broken", Title: "Not installed", Reason: "not installed"},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("agents (-want +got):\n%s", d)
	}
}

// TestAgentDetail: GET /v1/agents/{name} answers the agent with its
// catalog, an unavailable one without lists and a note, and an unknown one
// 404.
func TestAgentDetail(t *testing.T) {
	h := newHarness(t, Config{})
	var got client.AgentDetail
	h.do("GET", "/v1/agents/mock", "").ok(t, 200, &got)
	at := h.eng.now
	want := client.AgentDetail{
		Agent: client.Agent{Name: "mock", Title: "Mock agent", Available: true, Installed: true, Version: "1.0.0",
			Capabilities: client.Capabilities{Text: true, Deltas: true, Permissions: true, Questions: true, Interrupt: true}},
		Models: []client.Choice{{ID: "m1"}, {ID: "m2"}}, DefaultModel: "m1", CatalogSession: "ses_cat", CatalogTime: &at,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("agent (-want +got):\n%s", d)
	}
	h.do("GET", "/v1/agents/broken", "").ok(t, 200, &got)
	if got.Available || got.Models != nil || got.Modes != nil || got.CatalogNote == "" {
		t.Fatalf("unavailable agent = %+v, want no lists and a note", got)
	}
	h.do("GET", "/v1/agents/nope", "").problem(t, 404, client.ProblemNotFound)
}

// TestUpdateSession: PATCH /v1/sessions/{id} changes the model between
// turns; during a turn it answers 409 busy, an unknown model or mode 422
// naming the field, an unknown session 404.
func TestUpdateSession(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	base := "/v1/sessions/" + s.ID
	var got client.Session
	h.do("PATCH", base, `{"model":"m2"}`).ok(t, 200, &got)
	if got.Model != "m2" {
		t.Fatalf("updated = %+v, want model m2", got)
	}
	h.do("PATCH", base, `{"model":"gpt-nope"}`).problem(t, 422, client.ProblemUnknownModel)
	h.do("PATCH", base, `{"mode":"yolo"}`).problem(t, 422, client.ProblemUnknownMode)
	h.do("PATCH", base, `{"model":"`+strings.Repeat("m", 201)+`"}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", base+"/messages", `{"text":"hello"}`).ok(t, 202, nil)
	p := h.do("PATCH", base, `{"model":"m1"}`).problem(t, 409, client.ProblemBusy)
	if p.Detail == "" {
		t.Fatalf("409 without detail: %+v", p)
	}
	h.do("PATCH", "/v1/sessions/ses_nope", `{"model":"m1"}`).problem(t, 404, client.ProblemNotFound)
}

func TestSessionLifecycle(t *testing.T) {
	h := newHarness(t, Config{})
	var created client.Session
	r := h.do("POST", "/v1/sessions", `{"agent":"mock","model":"m1","permission_mode":"plan","metadata":{"k":"v"}}`)
	r.ok(t, 201, &created)
	if loc := r.Header.Get("Location"); loc != "/v1/sessions/"+created.ID {
		t.Fatalf("Location = %q", loc)
	}
	if created.Agent != "mock" || created.Model != "m1" || created.PermissionMode != "plan" ||
		created.Metadata["k"] != "v" || created.Status != client.StatusIdle || created.CreatedAt.IsZero() {
		t.Fatalf("created = %+v", created)
	}

	var got client.Session
	h.do("GET", "/v1/sessions/"+created.ID, "").ok(t, 200, &got)
	if d := cmp.Diff(created, got); d != "" {
		t.Fatalf("get (-created +got):\n%s", d)
	}

	// Paging: newest first, next_before continues.
	s2, s3 := h.createSession(), h.createSession()
	var page client.SessionList
	h.do("GET", "/v1/sessions?limit=2", "").ok(t, 200, &page)
	if len(page.Sessions) != 2 || page.Sessions[0].ID != s3.ID || page.Sessions[1].ID != s2.ID || page.NextBefore != s2.ID {
		t.Fatalf("page 1 = %+v", page)
	}
	before := page.NextBefore
	page = client.SessionList{}
	h.do("GET", "/v1/sessions?limit=2&before="+before, "").ok(t, 200, &page)
	if len(page.Sessions) != 1 || page.Sessions[0].ID != created.ID || page.NextBefore != "" {
		t.Fatalf("page 2 = %+v", page)
	}

	// Delete ends it; status filter sees it.
	h.do("DELETE", "/v1/sessions/"+s2.ID, "").ok(t, 204, nil)
	h.do("GET", "/v1/sessions?status=ended", "").ok(t, 200, &page)
	if len(page.Sessions) != 1 || page.Sessions[0].ID != s2.ID {
		t.Fatalf("ended = %+v", page)
	}
	h.do("GET", "/v1/sessions?status=bogus", "").problem(t, 422, client.ProblemValidation)

	// Purge removes it.
	h.do("DELETE", "/v1/sessions/"+s3.ID+"?purge=true", "").ok(t, 204, nil)
	h.do("GET", "/v1/sessions/"+s3.ID, "").problem(t, 404, client.ProblemNotFound)
	h.do("DELETE", "/v1/sessions/"+s3.ID, "").problem(t, 404, client.ProblemNotFound)

	// An empty list is [], not null.
	h2 := newHarness(t, Config{})
	r = h2.do("GET", "/v1/sessions", "")
	r.ok(t, 200, &page)
	if !strings.Contains(string(r.body), `"sessions":[]`) {
		t.Fatalf("empty list body = %s", r.body)
	}
}

func TestMessagesAndInterrupt(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	base := "/v1/sessions/" + s.ID

	var turn client.Turn
	h.do("POST", base+"/messages", `{"text":"hello"}`).ok(t, 202, &turn)
	if turn.TurnID == "" {
		t.Fatal("no turn id")
	}
	h.do("POST", base+"/messages", `{"text":"again"}`).problem(t, 409, client.ProblemBusy)

	var stopped client.Turn
	h.do("POST", base+"/interrupt", "").ok(t, 202, &stopped)
	if stopped != turn {
		t.Fatalf("interrupted %v, want %v", stopped, turn)
	}
	h.do("POST", base+"/interrupt", "").problem(t, 409, client.ProblemNoTurn)

	h.do("POST", base+"/messages", `{"content":[{"type":"text","text":"hi"},{"type":"image","mime_type":"image/png","data":"aGk="}]}`).ok(t, 202, &turn)
	h.do("POST", base+"/interrupt", "").ok(t, 202, nil)

	for _, body := range []string{`{}`, `{"text":""}`, `{"content":[]}`, `{"text":"a","content":[{"type":"text","text":"b"}]}`} {
		p := h.do("POST", base+"/messages", body).problem(t, 422, client.ProblemValidation)
		if len(p.Errors) == 0 {
			t.Fatalf("%s: no errors[] in %+v", body, p)
		}
	}
	p := h.do("POST", base+"/messages", `{"content":[{"type":"video"}]}`).problem(t, 422, client.ProblemValidation)
	if p.Errors[0].Location != "body.content[0].type" {
		t.Fatalf("errors = %+v", p.Errors)
	}

	h.do("POST", base+"/resume", "").problem(t, 409, client.ProblemLive)
	// The fake's sessions run on this host: none pauses.
	h.do("POST", base+"/pause", "").problem(t, 409, client.ProblemNotPausable)
	h.do("POST", "/v1/sessions/ses_nope/pause", "").problem(t, 404, client.ProblemNotFound)
	h.do("DELETE", base, "").ok(t, 204, nil)
	h.do("POST", base+"/messages", `{"text":"late"}`).problem(t, 409, client.ProblemNotLive)
	h.do("POST", base+"/resume", `{"bogus":1}`).problem(t, 422, client.ProblemValidation)
	var resumed client.Session
	h.do("POST", base+"/resume", `{"env":{"ANTHROPIC_BASE_URL":"http://127.0.0.1:1"}}`).ok(t, 200, &resumed)
	if resumed.Status != client.StatusIdle || h.eng.lastEnv["ANTHROPIC_BASE_URL"] != "http://127.0.0.1:1" {
		t.Fatalf("resumed %+v with env %v", resumed, h.eng.lastEnv)
	}
	h.do("DELETE", base, "").ok(t, 204, nil)
	h.do("POST", base+"/resume", "").ok(t, 200, &resumed)
	h.do("POST", "/v1/sessions/ses_nope/resume", "").problem(t, 404, client.ProblemNotFound)
	h.do("POST", "/v1/sessions/ses_nope/messages", `{"text":"x"}`).problem(t, 404, client.ProblemNotFound)
	h.do("POST", "/v1/sessions/ses_nope/interrupt", "").problem(t, 404, client.ProblemNotFound)
}

func TestPermissionsAndQuestions(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	base := "/v1/sessions/" + s.ID
	h.eng.ask(s.ID, "permission", "perm_1")
	h.eng.ask(s.ID, "question", "q_1")

	var reqs client.RequestList
	h.do("GET", base+"/requests?state=pending", "").ok(t, 200, &reqs)
	if len(reqs.Requests) != 2 || reqs.Requests[0].ID != "perm_1" || reqs.Requests[0].Kind != "permission" ||
		reqs.Requests[0].Payload == nil || reqs.Requests[0].Resolution != nil {
		t.Fatalf("pending = %+v", reqs)
	}

	var res client.Resolved
	h.do("POST", base+"/permissions/perm_1", `{"decision":"allow","option_id":"once"}`).ok(t, 200, &res)
	if res.Event.Type != event.TypePermissionResolved || res.Event.SessionID != s.ID {
		t.Fatalf("resolved = %+v", res)
	}
	p, err := res.Event.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if pr := p.(*event.PermissionResolved); pr.Decision != event.DecisionAllow || pr.By != event.ByUser || pr.OptionID != "once" {
		t.Fatalf("payload = %+v", pr)
	}
	h.do("POST", base+"/permissions/perm_1", `{"decision":"deny"}`).problem(t, 409, client.ProblemAlreadyResolved)
	h.do("POST", base+"/permissions/perm_404", `{"decision":"deny"}`).problem(t, 404, client.ProblemNotFound)
	h.do("POST", base+"/permissions/perm_1", `{"decision":"maybe"}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", base+"/permissions/perm_1", `{}`).problem(t, 422, client.ProblemValidation)

	h.do("POST", base+"/questions/q_1", `{"answer":"a","cancel":true}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", base+"/questions/q_1", `{}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", base+"/questions/q_1", `{"answer":"blue"}`).ok(t, 200, &res)
	if res.Event.Type != event.TypeQuestionResolved {
		t.Fatalf("resolved = %+v", res)
	}
	h.do("POST", base+"/questions/q_1", `{"cancel":true}`).problem(t, 409, client.ProblemAlreadyResolved)

	h.do("GET", base+"/requests?state=resolved", "").ok(t, 200, &reqs)
	if len(reqs.Requests) != 2 || reqs.Requests[1].Resolution == nil || reqs.Requests[1].ResolvedAt == nil {
		t.Fatalf("resolved = %+v", reqs)
	}
	h.do("GET", base+"/requests", "").ok(t, 200, &reqs)
	if len(reqs.Requests) != 2 {
		t.Fatalf("all = %+v", reqs)
	}
	h.do("GET", base+"/requests?state=done", "").problem(t, 422, client.ProblemValidation)
	h.do("GET", "/v1/sessions/ses_nope/requests", "").problem(t, 404, client.ProblemNotFound)
}

func TestEventsPaging(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession() // seq 1: session.started
	h.eng.emitN(s.ID, 4)   // seq 2..5
	base := "/v1/sessions/" + s.ID + "/events"

	var page client.EventPage
	h.do("GET", base+"?limit=2", "").ok(t, 200, &page)
	if len(page.Events) != 2 || page.Events[0].Seq != 1 || page.NextAfter != 2 || !page.HasMore {
		t.Fatalf("page 1 = %+v", page)
	}
	h.do("GET", base+"?after=2&limit=3", "").ok(t, 200, &page)
	if len(page.Events) != 3 || page.Events[0].Seq != 3 || page.NextAfter != 5 || page.HasMore {
		t.Fatalf("page 2 (exactly the rest) = %+v", page)
	}
	h.do("GET", base+"?after=4", "").ok(t, 200, &page)
	if len(page.Events) != 1 || page.Events[0].Seq != 5 || page.NextAfter != 5 || page.HasMore {
		t.Fatalf("default limit = %+v", page)
	}
	r := h.do("GET", base+"?after=9000000000000000000", "")
	r.ok(t, 200, &page)
	if len(page.Events) != 0 || page.HasMore || page.NextAfter != 9000000000000000000 || !strings.Contains(string(r.body), `"events":[]`) {
		t.Fatalf("past the end = %s", r.body)
	}
	for _, q := range []string{"after=-1", "after=abc", "after=99999999999999999999", "limit=0", "limit=1001", "limit=x", "bogus=1"} {
		h.do("GET", base+"?"+q, "").problem(t, 422, client.ProblemValidation)
	}
	h.do("GET", "/v1/sessions/ses_nope/events", "").problem(t, 404, client.ProblemNotFound)
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, Config{MaxBodyBytes: 1024, MaxMessageBytes: 4096})
	s := h.createSession()
	msgs := "/v1/sessions/" + s.ID + "/messages"

	h.do("POST", "/v1/sessions", `{"agent":`).problem(t, 400, client.ProblemBadRequest)
	h.do("POST", "/v1/sessions", `not json`).problem(t, 400, client.ProblemBadRequest)
	p := h.do("POST", "/v1/sessions", `{"agent":"mock","colour":"red"}`).problem(t, 422, client.ProblemValidation)
	if len(p.Errors) != 1 || p.Errors[0].Location != "body.colour" {
		t.Fatalf("unknown field problem = %+v", p)
	}
	h.do("POST", "/v1/sessions", `{"agent":""}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/sessions", `{"agent":"mock","permission_mode":"yolo"}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/sessions", `{"agent":"nope"}`).problem(t, 422, client.ProblemUnknownAgent)
	h.do("POST", "/v1/sessions", `{"agent":"broken"}`).problem(t, 503, client.ProblemUnavailable)
	h.do("POST", "/v1/sessions", "").problem(t, 400, client.ProblemBadRequest)
	h.do("GET", "/v1/sessions/ses_nope", "").problem(t, 404, client.ProblemNotFound)

	// Media types.
	h.do("POST", "/v1/sessions", `{"agent":"mock"}`, "Content-Type", "text/plain").problem(t, 415, client.ProblemUnsupportedMediaType)
	h.do("POST", "/v1/sessions", `agent=mock`, "Content-Type", "application/x-www-form-urlencoded").problem(t, 415, client.ProblemUnsupportedMediaType)
	h.do("POST", "/v1/sessions", `{"agent":"mock"}`, "Content-Type", "").problem(t, 415, client.ProblemUnsupportedMediaType)
	h.do("POST", "/v1/sessions", `{"agent":"mock"}`, "Content-Type", "application/json; charset=utf-8").ok(t, 201, nil)

	// Sizes: the general limit, and the larger one of messages.
	big := `{"agent":"mock","model":"` + strings.Repeat("m", 1100) + `"}`
	h.do("POST", "/v1/sessions", big).problem(t, 413, client.ProblemPayloadTooLarge)
	exact := `{"agent":"mock","cwd":"/` + strings.Repeat("d", 1024-len(`{"agent":"mock","cwd":"/"}`)) + `"}`
	if len(exact) != 1024 {
		t.Fatalf("len %d", len(exact))
	}
	h.do("POST", "/v1/sessions", exact).ok(t, 201, nil)
	img := `{"content":[{"type":"image","mime_type":"image/png","data":"` + strings.Repeat("A", 2000) + `"}]}`
	h.do("POST", msgs, img).ok(t, 202, nil)
	huge := `{"content":[{"type":"image","mime_type":"image/png","data":"` + strings.Repeat("A", 5000) + `"}]}`
	h.do("POST", msgs, huge).problem(t, 413, client.ProblemPayloadTooLarge)

	// Routing.
	h.do("GET", "/v2/nothing", "").problem(t, 404, client.ProblemNotFound)
	r := h.do("PUT", "/v1/sessions", `{}`)
	r.problem(t, 405, client.ProblemMethodNotAllowed)
	if allow := r.Header.Get("Allow"); !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
	h.do("GET", "/v1/health?x=1", "").problem(t, 422, client.ProblemValidation)
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		typ    string
	}{
		{engine.ErrShuttingDown, 503, client.ProblemShuttingDown},
		{store.ErrClosed, 503, client.ProblemShuttingDown},
		{engine.ErrInvalid, 422, client.ProblemValidation},
		{store.ErrExists, 409, client.ProblemConflict},
		{engine.ErrNotResumable, 409, client.ProblemNotResumable},
		{&engine.EnvRequiredError{ID: "ses_1", Names: []string{"OPENAI_API_KEY"}}, 422, client.ProblemEnvRequired},
		{&engine.ContentError{Index: 1, Type: event.PartImage, Agent: "pi"}, 422, client.ProblemUnsupportedContent},
		{&engine.ChoiceError{Field: "model", Value: "x", Agent: "mock"}, 422, client.ProblemUnknownModel},
		{&engine.ChoiceError{Field: "mode", Value: "x", Agent: "mock"}, 422, client.ProblemUnknownMode},
		{fmt.Errorf("%w: no", engine.ErrSwitchUnsupported), 422, client.ProblemSwitchUnsupported},
		{fmt.Errorf("%w: %w", engine.ErrInvalid, agent.ErrInvalidMCP), 422, client.ProblemInvalidMCPServer},
		{fmt.Errorf("%w: agent pi", engine.ErrMCPUnsupported), 422, client.ProblemMCPUnsupported},
		{&engine.MCPRequiredError{ID: "ses_1", Names: []string{"docs.env.TOKEN"}}, 422, client.ProblemMCPRequired},
		{errors.New("disk full at /var/lib/secret"), 500, client.ProblemInternal},
	} {
		h := newHarness(t, Config{})
		h.eng.failWith = tc.err
		r := h.do("GET", "/v1/sessions/ses_1", "")
		p := r.problem(t, tc.status, tc.typ)
		if tc.status == 500 {
			if strings.Contains(string(r.body), "secret") {
				t.Fatalf("500 leaks the error: %s", r.body)
			}
			if !strings.Contains(p.Instance, r.Header.Get("X-Request-Id")) {
				t.Fatalf("instance %q does not name the request", p.Instance)
			}
			if !strings.Contains(h.logs.String(), "disk full at /var/lib/secret") {
				t.Fatalf("the error is not logged: %s", h.logs.String())
			}
		}
	}
}

func TestAuth(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	s := h.createSession()

	r := h.do("GET", "/v1/agents", "", "Authorization", "")
	r.problem(t, 401, client.ProblemUnauthorized)
	if r.Header.Get("WWW-Authenticate") != `Bearer realm="agentbox"` {
		t.Fatalf("WWW-Authenticate = %q", r.Header.Get("WWW-Authenticate"))
	}
	for _, a := range []string{"Bearer wrong", "Bearer " + testToken + "x", "Basic " + testToken, "Bearer", testToken} {
		r = h.do("GET", "/v1/agents", "", "Authorization", a)
		r.problem(t, 401, client.ProblemUnauthorized)
		if !strings.Contains(r.Header.Get("WWW-Authenticate"), "invalid_token") {
			t.Fatalf("%q: WWW-Authenticate = %q", a, r.Header.Get("WWW-Authenticate"))
		}
	}
	h.do("GET", "/v1/agents", "", "Authorization", "bearer "+testToken).ok(t, 200, nil)
	h.do("GET", "/v1/health", "", "Authorization", "").ok(t, 200, nil)
	h.do("GET", "/metrics", "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/openapi.json", "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/v2/unknown", "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/metrics", "").ok(t, 200, nil)

	// access_token only on the stream route.
	h.do("GET", "/v1/sessions/"+s.ID+"?access_token="+testToken, "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/v1/sessions/"+s.ID+"/events/stream?access_token=nope", "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	// (a good access_token on the stream route is tested in sse_test.go)

	if strings.Contains(h.logs.String(), testToken) {
		t.Fatal("the token appears in the logs")
	}
	if !strings.Contains(h.logs.String(), "http request") {
		t.Fatal("requests are not logged at debug level")
	}
}

func TestCORS(t *testing.T) {
	h := newHarness(t, Config{Token: testToken, CORSOrigins: []string{"https://app.example"}})
	r := h.do("OPTIONS", "/v1/sessions", "", "Authorization", "", "Origin", "https://app.example",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type")
	r.ok(t, 204, nil)
	if r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight headers = %v", r.Header)
	}
	r = h.do("GET", "/v1/agents", "", "Origin", "https://app.example")
	r.ok(t, 200, nil)
	if r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("ACAO = %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	r = h.do("GET", "/v1/agents", "", "Origin", "https://evil.example")
	r.problem(t, 403, client.ProblemForbidden)
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("ACAO for another origin = %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	r = h.do("OPTIONS", "/v1/sessions", "", "Authorization", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	r.problem(t, 403, client.ProblemForbidden)

	star := newHarness(t, Config{CORSOrigins: []string{"*"}})
	r = star.do("GET", "/v1/agents", "", "Origin", "https://any.example")
	if r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("ACAO = %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
	// No CORS configured: no CORS headers, and browser requests from
	// other origins are refused.
	none := newHarness(t, Config{})
	r = none.do("GET", "/v1/agents", "", "Origin", "https://any.example")
	r.problem(t, 403, client.ProblemForbidden)
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("ACAO without CORS = %q", r.Header.Get("Access-Control-Allow-Origin"))
	}
}

// TestHostCheck is DNS rebinding: a web page whose name resolves to the
// daemon's loopback address makes the browser send its own name as Host.
// Only the names the daemon is reached by pass, whatever the token.
func TestHostCheck(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	port := h.srv.Listener.Addr().(*net.TCPAddr).Port
	at := func(host string) string { return host + ":" + strconv.Itoa(port) }
	tests := []struct {
		host string
		ok   bool
	}{
		{at("127.0.0.1"), true},
		{at("localhost"), true},
		{at("LocalHost."), true},
		{at("[::1]"), true},
		{at("127.0.0.2"), true},
		// The daemon's own URL when it listens on a wildcard address.
		{at("0.0.0.0"), true},
		{at("[::]"), true},
		{"0.0.0.0:1", false},
		{"[::]", false},
		{at("attacker.example"), false},
		{at("localhost.attacker.example"), false},
		{at("127.0.0.1.nip.io"), false},
		{at("10.0.0.1"), false},
		{"localhost:1", false},
		{"127.0.0.1", false},
		{"attacker.example", false},
	}
	for _, tt := range tests {
		for _, route := range []struct{ method, path, body string }{
			{"GET", "/v1/health", ""},
			{"POST", "/v1/sessions", `{"agent":"mock"}`},
		} {
			r := h.do(route.method, route.path, route.body, "Host", tt.host, "Content-Type", "application/json")
			switch {
			case tt.ok && r.StatusCode >= 400:
				t.Errorf("Host %q %s %s: %d %s", tt.host, route.method, route.path, r.StatusCode, r.body)
			case !tt.ok:
				r.problem(t, 403, client.ProblemForbidden)
			}
		}
	}
	h.eng.mu.Lock()
	n := len(h.eng.order)
	h.eng.mu.Unlock()
	if n != 7 {
		t.Errorf("%d sessions created, want 7 (one per allowed Host)", n)
	}

	// The operator's allowlist: a name for any port, or a name and port.
	allow := newHarness(t, Config{AllowedHosts: []string{"agentbox.internal", "proxy.example:8443"}})
	for host, ok := range map[string]bool{
		"agentbox.internal": true, "AgentBox.Internal:443": true, at("agentbox.internal"): true,
		"proxy.example:8443": true, "proxy.example": false, "proxy.example:443": false, at("attacker.example"): false,
	} {
		r := allow.do("GET", "/v1/health", "", "Host", host)
		if (r.StatusCode == 200) != ok {
			t.Errorf("allowlist, Host %q: %d", host, r.StatusCode)
		}
	}
	any := newHarness(t, Config{AllowedHosts: []string{"*"}})
	any.do("GET", "/v1/health", "", "Host", "whatever.example").ok(t, 200, nil)
}

// TestHostCheckUnixSocket: a unix socket listener is not checked; no name
// leads a browser to it.
func TestHostCheckUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: New(Config{}, newFakeEngine(), nil, nil)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://attacker.example/v1/health", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("over a unix socket: %d", resp.StatusCode)
	}
}

// TestOriginCheck: a web page's requests carry its origin; only the
// daemon's own origin and those CORS allows pass, even for requests a
// browser sends without a preflight (a form post).
func TestOriginCheck(t *testing.T) {
	h := newHarness(t, Config{Token: testToken, CORSOrigins: []string{"https://app.example"}})
	self := h.srv.URL
	tests := []struct {
		name string
		hdr  []string
		ok   bool
	}{
		{"no browser headers", nil, true},
		{"own origin", []string{"Origin", self}, true},
		{"allowed origin", []string{"Origin", "https://app.example"}, true},
		{"foreign origin", []string{"Origin", "https://evil.example"}, false},
		{"another port of localhost", []string{"Origin", "http://localhost:3000"}, false},
		{"null origin", []string{"Origin", "null"}, false},
		{"user typed the URL", []string{"Sec-Fetch-Site", "none"}, true},
		{"same origin", []string{"Sec-Fetch-Site", "same-origin"}, true},
		{"cross-site without origin", []string{"Sec-Fetch-Site", "cross-site"}, false},
		{"same-site without origin", []string{"Sec-Fetch-Site", "same-site"}, false},
		{"cross-site from an allowed origin", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://app.example"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := append([]string{"Content-Type", "text/plain"}, tt.hdr...)
			// A form post: text/plain, no preflight; it would be refused
			// for its media type anyway, so the answer must be the 403.
			r := h.do("POST", "/v1/sessions", `{"agent":"mock"}`, hdr...)
			if tt.ok {
				r.problem(t, 415, client.ProblemUnsupportedMediaType)
				h.do("GET", "/v1/agents", "", tt.hdr...).ok(t, 200, nil)
			} else {
				r.problem(t, 403, client.ProblemForbidden)
				h.do("GET", "/v1/agents", "", tt.hdr...).problem(t, 403, client.ProblemForbidden)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	h.do("GET", "/v1/sessions/"+s.ID, "").ok(t, 200, nil)
	h.do("GET", "/v1/sessions/nope", "").problem(t, 404, client.ProblemNotFound)
	h.do("GET", "/nowhere/"+s.ID, "").problem(t, 404, client.ProblemNotFound)
	r := h.do("GET", "/metrics", "")
	r.ok(t, 200, nil)
	body := string(r.body)
	for _, want := range []string{
		`agentbox_http_request_duration_seconds_count{code="200",method="GET",route="/v1/sessions/{id}"} 1`,
		`agentbox_http_request_duration_seconds_count{code="404",method="GET",route="/v1/sessions/{id}"} 1`,
		`agentbox_http_request_duration_seconds_count{code="201",method="POST",route="/v1/sessions"} 1`,
		`agentbox_http_request_duration_seconds_count{code="404",method="GET",route="unmatched"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, s.ID) {
		t.Error("a raw path made it into a label")
	}
}

func TestRequireToken(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":          false,
		"127.1.2.3:80":            false,
		"[::1]:7000":              false,
		"localhost:7000":          false,
		"LOCALHOST:1":             false,
		"[::ffff:127.0.0.1]:1":    false,
		"unix:/run/agentbox.sock": false,
		"/tmp/agentbox.sock":      false,
		":8080":                   true,
		"0.0.0.0:8080":            true,
		"[::]:8080":               true,
		"192.168.1.10:8080":       true,
		"example.com:443":         true,
		"":                        true,
	} {
		if got := RequireToken(addr); got != want {
			t.Errorf("RequireToken(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                true,
		"Application/JSON; charset=utf-8": true,
		"application/merge-patch+json":    true,
		"application/json-seq":            false,
		"text/json":                       false,
		"text/plain":                      false,
		"":                                false,
		"application/+json":               false,
	} {
		if got := isJSON(ct); got != want {
			t.Errorf("isJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestPanicBecomesProblem(t *testing.T) {
	s := &server{cfg: Config{}.withDefaults(), log: slog.New(slog.DiscardHandler), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
	srv := httptest.NewServer(s)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	response{resp, b}.problem(t, 500, client.ProblemInternal)
}

// A handler panicking with http.ErrAbortHandler, even wrapped, aborts its
// response through net/http instead of becoming a 500 problem.
func TestAbortHandlerPanicPassesThrough(t *testing.T) {
	for _, v := range []error{http.ErrAbortHandler, errors.Join(errors.New("client went away"), http.ErrAbortHandler)} {
		s := &server{cfg: Config{}.withDefaults(), log: slog.New(slog.DiscardHandler), mux: http.NewServeMux()}
		s.mux.HandleFunc("GET /abort", func(http.ResponseWriter, *http.Request) { panic(v) })
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if got := recover(); got != any(v) {
					t.Errorf("panic(%v): ServeHTTP panicked with %v, want the same value", v, got)
				}
			}()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/abort", nil))
		}()
		if rec.Body.Len() != 0 {
			t.Errorf("panic(%v): wrote %q, want nothing", v, rec.Body)
		}
	}
}

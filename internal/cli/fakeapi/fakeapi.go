// Package fakeapi is an in-memory fake of the agentbox HTTP API for tests of
// the client SDK and the CLI: sessions, scripted turns, permission and
// question requests, event pages, an SSE stream that can be told to
// misbehave (drop connections mid-event, repeat events, leave gaps), a
// sandboxed session's network rules and the daemon's secrets (whose values
// it never returns).
//
// It follows the API contract, not the daemon's code; the real server is
// tested on its own.
package fakeapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// Config configures a Server. The zero value serves one available agent
// named "mock" whose turns answer with Echo.
type Config struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// Agents lists the agents; nil means one available "mock" agent.
	Agents []client.Agent
	// Script runs each turn on its own goroutine; nil means Echo.
	Script func(*Turn)
	// Heartbeat is the interval of ": ping" comments on streams; 0 means
	// 15s.
	Heartbeat time.Duration
	// Retry, when set, is sent as the stream's retry field.
	Retry time.Duration
	// MaxPage caps the events of one page; 0 means 100.
	MaxPage int
	// Faults makes the SSE stream misbehave.
	Faults Faults
	// Network is the sandbox network of sessions created with a policy (or
	// policy_source); mode proxy and default deny when empty. Sessions
	// created without one have no sandbox.
	Network client.SessionNetwork
	// GlobalAllow is the operator's global network allow list: a rule of
	// PUT /v1/sessions/{id}/network that no entry covers (an equal rule,
	// "*", or "*.domain" for a name in the domain) is refused with 422
	// policy. Nil permits any rule.
	GlobalAllow []string
	// Models are the models every agent lists in GET /v1/agents/{name}
	// (as its sessions would have announced them); a create or PATCH
	// naming another is refused with 422 unknown-model. Nil: no lists,
	// any model.
	Models []client.Choice
}

// Faults are deliberate stream failures, each decided per event sent with
// a seeded random source.
type Faults struct {
	Seed uint64
	// Drop is the chance to end the connection instead of sending an event,
	// after sending a random prefix of it; half of the drops are abrupt
	// (connection reset), half are a clean end of the response.
	Drop float64
	// Duplicate is the chance to send an already sent event again.
	Duplicate float64
	// Skip is the chance to leave an event out of the stream (it stays in
	// the log), creating a gap. The last event available is never skipped.
	Skip float64
	// Vary varies the line endings per connection (LF, CRLF, CR) and splits
	// some events' data over several lines.
	Vary bool
}

// Server is a running fake. Its URL field is the base URL for client.New.
type Server struct {
	*httptest.Server
	cfg Config

	ctx     context.Context // ends when the fake closes; turn scripts run under it
	cancel  context.CancelFunc
	turns   sync.WaitGroup
	streams atomic.Int64
	started time.Time

	mu       sync.Mutex
	sessions map[string]*session
	order    []string // session ids, oldest first
	nextID   int
	changed  chan struct{} // closed and replaced whenever an event is appended
	rnd      *rand.Rand
	secrets  map[string]secret
}

type session struct {
	client.Session
	events   []event.Event
	requests []*request
	turn     *Turn // the running turn, if any
	// network is the sandbox's network; nil when the session has no
	// sandbox.
	network *client.SessionNetwork
}

type request struct {
	client.Request
	answer chan any // receives a client.PermissionAnswer or client.QuestionAnswer
}

// New starts a fake and closes it when the test ends.
func New(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	if cfg.Agents == nil {
		cfg.Agents = []client.Agent{{
			Name: "mock", Title: "Mock agent", Available: true, Installed: true, Version: "1.0.0",
			Capabilities: client.Capabilities{Text: true, Deltas: true, Permissions: true, Questions: true},
		}}
	}
	if cfg.Script == nil {
		cfg.Script = Echo
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.MaxPage <= 0 {
		cfg.MaxPage = 100
	}
	s := &Server{
		cfg: cfg, sessions: map[string]*session{}, changed: make(chan struct{}), secrets: map[string]secret{},
		rnd: rand.New(rand.NewPCG(cfg.Faults.Seed, 0x5eed)), started: time.Now(),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.Server = httptest.NewServer(s.routes())
	tb.Cleanup(s.Close)
	return s
}

// Close stops every turn and stream, then the HTTP server. It is idempotent.
func (s *Server) Close() {
	s.cancel()
	s.turns.Wait()
	s.Server.Close()
}

// StreamConnections returns how many SSE connections were accepted.
func (s *Server) StreamConnections() int { return int(s.streams.Load()) }

// AddSession creates an idle session of the agent "mock" directly, without
// a session.started event, and returns its id.
func (s *Server) AddSession() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newSessionLocked(client.CreateSession{Agent: "mock"}).ID
}

// Append appends events built from payloads to a session's log, as the
// daemon would, and returns them as stored.
func (s *Server) Append(sessionID string, payloads ...event.Payload) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]event.Event, 0, len(payloads))
	for _, p := range payloads {
		out = append(out, s.appendLocked(sessionID, "", event.SourceAgent, p))
	}
	return out
}

// Events returns a copy of a session's log.
func (s *Server) Events(sessionID string) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		return slices.Clone(ss.events)
	}
	return nil
}

func (s *Server) newSessionLocked(req client.CreateSession) *session {
	s.nextID++
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(s.nextID) * time.Minute)
	ss := &session{Session: client.Session{
		ID: fmt.Sprintf("ses_%04d", s.nextID), Agent: req.Agent, Model: req.Model, Mode: req.Mode,
		PermissionMode: req.PermissionMode, Cwd: req.Cwd, Metadata: req.Metadata,
		Status: client.StatusIdle, CreatedAt: now, UpdatedAt: now,
	}}
	if ss.Cwd == "" {
		ss.Cwd = "/work/" + ss.ID
	}
	s.sessions[ss.ID] = ss
	s.order = append(s.order, ss.ID)
	return ss
}

// appendLocked stores one event, stamped like the store would, and wakes
// the streams.
func (s *Server) appendLocked(sessionID, turnID string, src event.Source, p event.Payload) event.Event {
	ss := s.sessions[sessionID]
	if ss == nil {
		return event.Event{}
	}
	ev := event.New(src, p)
	ev.Seq = int64(len(ss.events)) + 1
	ev.ID = fmt.Sprintf("evt_%s_%d", sessionID, ev.Seq)
	ev.SessionID = sessionID
	ev.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(ev.Seq) * time.Millisecond)
	ev.Schema = event.SchemaVersion
	ev.TurnID = turnID
	ss.events = append(ss.events, ev)
	close(s.changed)
	s.changed = make(chan struct{})
	return ev
}

// Turn is one running turn, handed to Config.Script. Its methods are safe to
// call from the script's goroutine.
type Turn struct {
	ID        string
	SessionID string
	// Text is the user's message.
	Text string

	// The script may set these; they go into turn.completed. An empty Stop
	// means end_turn, or interrupted when the turn was interrupted.
	Stop    event.StopReason
	Usage   *event.Usage
	Message string

	srv    *Server
	ctx    context.Context
	cancel context.CancelFunc
}

// Context ends when the turn is interrupted or the fake closes.
func (t *Turn) Context() context.Context { return t.ctx }

// Emit appends agent events to the turn.
func (t *Turn) Emit(payloads ...event.Payload) {
	t.srv.mu.Lock()
	defer t.srv.mu.Unlock()
	for _, p := range payloads {
		t.srv.appendLocked(t.SessionID, t.ID, event.SourceAgent, p)
	}
}

// Permission asks the client and waits for the answer. The request gets an
// id and allow_once/deny_once options when it has none. When the turn ends
// first, the request is denied by the daemon.
func (t *Turn) Permission(req event.PermissionRequested) client.PermissionAnswer {
	if req.Options == nil {
		req.Options = []event.PermissionOption{
			{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow once"},
			{ID: "deny", Kind: event.OptionDenyOnce, Label: "Deny"},
		}
	}
	ans, ok := t.ask("permission", &req, &req.ID, "perm").(client.PermissionAnswer)
	if !ok {
		return client.PermissionAnswer{Decision: string(event.DecisionDeny)}
	}
	return ans
}

// Question asks the user and waits for the answer; when the turn ends first
// the question is cancelled by the daemon.
func (t *Turn) Question(q event.QuestionRequested) client.QuestionAnswer {
	ans, ok := t.ask("question", &q, &q.ID, "q").(client.QuestionAnswer)
	if !ok {
		return client.QuestionAnswer{Cancel: true}
	}
	return ans
}

func (t *Turn) ask(kind string, payload event.Payload, id *string, prefix string) any {
	s := t.srv
	s.mu.Lock()
	ss := s.sessions[t.SessionID]
	if ss == nil {
		s.mu.Unlock()
		return nil
	}
	if *id == "" {
		*id = fmt.Sprintf("%s_%d", prefix, len(ss.requests)+1)
	}
	r := &request{answer: make(chan any, 1), Request: client.Request{
		ID: *id, Kind: kind, State: client.RequestsPending, Payload: payload, CreatedAt: time.Now().UTC(),
	}}
	ss.requests = append(ss.requests, r)
	s.appendLocked(t.SessionID, t.ID, event.SourceDaemon, payload)
	s.mu.Unlock()

	select {
	case ans := <-r.answer:
		return ans
	case <-t.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.State == client.RequestsPending {
		var res event.Payload = &event.PermissionResolved{ID: *id, Decision: event.DecisionDeny, By: event.ByDaemon, Message: "turn ended"}
		if kind == "question" {
			res = &event.QuestionResolved{ID: *id, Cancelled: true, By: event.ByDaemon}
		}
		s.resolveLocked(t.SessionID, t.ID, r, res)
		return nil
	}
	return <-r.answer // answered just as the turn ended
}

func (s *Server) resolveLocked(sessionID, turnID string, r *request, res event.Payload) event.Event {
	now := time.Now().UTC()
	r.State, r.Resolution, r.ResolvedAt = client.RequestsResolved, res, &now
	return s.appendLocked(sessionID, turnID, event.SourceDaemon, res)
}

// Echo is the default script: it streams "echo: <text>" as an assistant
// message in two deltas and reports some usage.
func Echo(t *Turn) {
	text := "echo: " + t.Text
	half := len(text) / 2
	t.Emit(
		&event.ItemStarted{Item: event.Item{ID: t.ID + "_msg", Kind: event.ItemMessage, Status: event.StatusInProgress, Role: event.RoleAssistant}},
		&event.ItemDelta{ItemID: t.ID + "_msg", Field: event.DeltaText, Delta: text[:half]},
		&event.ItemDelta{ItemID: t.ID + "_msg", Field: event.DeltaText, Delta: text[half:]},
		&event.ItemCompleted{Item: event.Item{ID: t.ID + "_msg", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleAssistant, Content: []event.ContentPart{event.TextPart(text)}}},
	)
	t.Usage = &event.Usage{InputTokens: 10, OutputTokens: int64(len(text))}
}

// routes builds the API's routes.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("GET /v1/agents", s.agents)
	mux.HandleFunc("GET /v1/agents/{name}", s.agent)
	mux.HandleFunc("PATCH /v1/sessions/{id}", s.updateSession)
	mux.HandleFunc("POST /v1/sessions", s.createSession)
	mux.HandleFunc("GET /v1/sessions", s.listSessions)
	mux.HandleFunc("GET /v1/sessions/{id}", s.getSession)
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.deleteSession)
	mux.HandleFunc("POST /v1/sessions/{id}/messages", s.sendMessage)
	mux.HandleFunc("POST /v1/sessions/{id}/interrupt", s.interrupt)
	mux.HandleFunc("POST /v1/sessions/{id}/permissions/{rid}", s.answer)
	mux.HandleFunc("POST /v1/sessions/{id}/questions/{rid}", s.answer)
	mux.HandleFunc("GET /v1/sessions/{id}/requests", s.requests)
	mux.HandleFunc("GET /v1/sessions/{id}/events", s.events)
	mux.HandleFunc("GET /v1/sessions/{id}/events/stream", s.stream)
	mux.HandleFunc("GET /v1/sessions/{id}/network", s.getNetwork)
	mux.HandleFunc("PUT /v1/sessions/{id}/network", s.setNetwork)
	mux.HandleFunc("GET /v1/secrets", s.listSecrets)
	mux.HandleFunc("PUT /v1/secrets/{name}", s.putSecret)
	mux.HandleFunc("DELETE /v1/secrets/{name}", s.deleteSecret)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "no such route: "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.Token {
			problem(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// problem writes a problem+json answer.
func problem(w http.ResponseWriter, status int, kind, detail string, fields ...client.ProblemField) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(client.Problem{
		Type: client.ProblemTypeBase + kind, Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields,
	})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON body into v, answering the problem itself on failure.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "unsupported-media-type", "send application/json")
		return false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2<<20))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "payload-too-large", "body over 2 MiB")
			return false
		}
		problem(w, http.StatusBadRequest, "validation", err.Error())
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		problem(w, http.StatusUnprocessableEntity, "validation", "body: "+err.Error())
		return false
	}
	return true
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, client.Health{Status: "ok", Version: "fake-1.2.3", SchemaVersion: event.SchemaVersion, UptimeMS: time.Since(s.started).Milliseconds()})
}

func (s *Server) agents(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, client.AgentList{Agents: s.cfg.Agents})
}

func (s *Server) agent(w http.ResponseWriter, r *http.Request) {
	i := slices.IndexFunc(s.cfg.Agents, func(a client.Agent) bool { return a.Name == r.PathValue("name") })
	if i < 0 {
		problem(w, http.StatusNotFound, "not-found", "agent "+strconv.Quote(r.PathValue("name"))+" not found")
		return
	}
	out := client.AgentDetail{Agent: s.cfg.Agents[i]}
	if out.Available && len(s.cfg.Models) > 0 {
		out.Models, out.DefaultModel, out.CatalogSession = s.cfg.Models, s.cfg.Models[0].ID, "ses_catalog"
	} else {
		out.CatalogNote = "no session of the agent has started"
	}
	reply(w, http.StatusOK, out)
}

// knownModel says whether model may be used (see Config.Models).
func (s *Server) knownModel(model string) bool {
	return model == "" || s.cfg.Models == nil || slices.ContainsFunc(s.cfg.Models, func(c client.Choice) bool { return c.ID == model })
}

func (s *Server) updateSession(w http.ResponseWriter, r *http.Request) {
	var req client.UpdateSession
	if !decode(w, r, &req) {
		return
	}
	if req.Model == "" && req.Mode == "" {
		problem(w, http.StatusUnprocessableEntity, "validation", "set model, mode or both")
		return
	}
	if !s.knownModel(req.Model) {
		problem(w, http.StatusUnprocessableEntity, "unknown-model", "model "+strconv.Quote(req.Model)+": the agent does not offer it")
		return
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	if ss.turn != nil {
		s.mu.Unlock()
		problem(w, http.StatusConflict, "busy", "a turn is running in session "+ss.ID+": change the model or mode after its turn.completed, or interrupt it first")
		return
	}
	ch := event.SessionConfigured{PreviousModel: ss.Model, PreviousMode: ss.Mode}
	ss.Model, ss.Mode = cmp.Or(req.Model, ss.Model), cmp.Or(req.Mode, ss.Mode)
	ch.Model, ch.Mode = ss.Model, ss.Mode
	s.appendLocked(ss.ID, "", event.SourceDaemon, &ch)
	out := ss.Session
	s.mu.Unlock()
	reply(w, http.StatusOK, out)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req client.CreateSession
	if !decode(w, r, &req) {
		return
	}
	if req.Agent == "" {
		problem(w, http.StatusUnprocessableEntity, "validation", "validation failed", client.ProblemField{Location: "body.agent", Message: "expected length >= 1"})
		return
	}
	switch req.PermissionMode {
	case "", client.PermissionDefault, client.PermissionAcceptEdits, client.PermissionBypass, client.PermissionPlan:
	default:
		problem(w, http.StatusUnprocessableEntity, "validation", "validation failed", client.ProblemField{Location: "body.permission_mode", Message: "not one of the allowed values", Value: req.PermissionMode})
		return
	}
	i := slices.IndexFunc(s.cfg.Agents, func(a client.Agent) bool { return a.Name == req.Agent })
	if i < 0 {
		problem(w, http.StatusUnprocessableEntity, "unknown-agent", "unknown agent "+strconv.Quote(req.Agent))
		return
	}
	if !s.knownModel(req.Model) {
		problem(w, http.StatusUnprocessableEntity, "unknown-model", "model "+strconv.Quote(req.Model)+": the agent does not offer it")
		return
	}
	if a := s.cfg.Agents[i]; !a.Available {
		problem(w, http.StatusServiceUnavailable, "unavailable", a.Name+": "+a.Reason)
		return
	}
	s.mu.Lock()
	ss := s.newSessionLocked(req)
	if len(req.Policy) > 0 || req.PolicySource != nil {
		ss.network = newNetwork(s.cfg.Network)
		ss.Sandboxed = true
		ss.Sandbox = &client.SessionSandbox{Runtime: "process", PolicyHash: strings.Repeat("ab", 32),
			Mechanisms: []string{"userns", "landlock:abi7", "seccomp"}}
	}
	s.appendLocked(ss.ID, "", event.SourceDaemon, &event.SessionStarted{Agent: ss.Agent, Model: ss.Model, Cwd: ss.Cwd})
	out := ss.Session
	s.mu.Unlock()
	reply(w, http.StatusCreated, out)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			problem(w, http.StatusUnprocessableEntity, "validation", "limit must be a positive integer")
			return
		}
		limit = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := client.SessionList{Sessions: []client.Session{}}
	before := q.Get("before")
	for i := len(s.order) - 1; i >= 0; i-- {
		ss := s.sessions[s.order[i]]
		if before != "" {
			if ss.ID == before {
				before = ""
			}
			continue
		}
		if st := q.Get("status"); st != "" && ss.Status != st {
			continue
		}
		if len(out.Sessions) == limit {
			out.NextBefore = out.Sessions[limit-1].ID
			break
		}
		out.Sessions = append(out.Sessions, ss.Session)
	}
	reply(w, http.StatusOK, out)
}

// lookup finds the session of the request's {id} or answers 404; on
// success s.mu is held and the caller must unlock it.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *session {
	s.mu.Lock()
	ss := s.sessions[r.PathValue("id")]
	if ss == nil {
		s.mu.Unlock()
		problem(w, http.StatusNotFound, "not-found", "session "+r.PathValue("id")+" not found")
	}
	return ss
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	out := ss.Session
	s.mu.Unlock()
	reply(w, http.StatusOK, out)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	purge, err := strconv.ParseBool(r.URL.Query().Get("purge"))
	if err != nil && r.URL.Query().Has("purge") {
		problem(w, http.StatusUnprocessableEntity, "validation", "purge must be true or false")
		return
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	if ss.turn != nil {
		ss.turn.cancel()
	}
	if live(ss.Status) {
		now := time.Now().UTC()
		ss.Status, ss.EndedAt = client.StatusEnded, &now
		s.appendLocked(ss.ID, "", event.SourceDaemon, &event.SessionEnded{Reason: event.EndTerminated, Message: "deleted through the API"})
	}
	if purge {
		delete(s.sessions, ss.ID)
		s.order = slices.DeleteFunc(s.order, func(id string) bool { return id == ss.ID })
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func live(status string) bool {
	return status == client.StatusIdle || status == client.StatusRunning || status == client.StatusStarting
}

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) {
	var msg client.SendMessage
	if !decode(w, r, &msg) {
		return
	}
	if (msg.Text == "") == (len(msg.Content) == 0) {
		problem(w, http.StatusUnprocessableEntity, "validation", "exactly one of text and content must be set")
		return
	}
	content := msg.Content
	if msg.Text != "" {
		content = []event.ContentPart{event.TextPart(msg.Text)}
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	switch {
	case !live(ss.Status):
		problem(w, http.StatusConflict, "not-live", "session "+ss.ID+" is "+ss.Status)
		return
	case ss.turn != nil:
		problem(w, http.StatusConflict, "busy", "a turn is already running")
		return
	}
	t := &Turn{ID: fmt.Sprintf("turn_%d", len(ss.events)+1), SessionID: ss.ID, srv: s}
	for _, p := range content {
		t.Text += p.Text
	}
	t.ctx, t.cancel = context.WithCancel(s.ctx)
	ss.turn, ss.Status, ss.CurrentTurnID = t, client.StatusRunning, t.ID
	s.appendLocked(ss.ID, t.ID, event.SourceDaemon, &event.TurnStarted{TurnID: t.ID})
	user := event.Item{ID: t.ID + "_user", Kind: event.ItemMessage, Status: event.StatusCompleted, Role: event.RoleUser, Content: content}
	s.appendLocked(ss.ID, t.ID, event.SourceDaemon, &event.ItemCompleted{Item: user})
	s.turns.Add(1)
	go s.run(t)
	reply(w, http.StatusAccepted, client.Turn{TurnID: t.ID})
}

// run runs a turn's script and completes the turn.
func (s *Server) run(t *Turn) {
	defer s.turns.Done()
	began := time.Now()
	s.cfg.Script(t)
	stop := t.Stop
	if stop == "" {
		stop = event.StopEndTurn
		if t.ctx.Err() != nil {
			stop = event.StopInterrupted
		}
	}
	t.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendLocked(t.SessionID, t.ID, event.SourceDaemon, &event.TurnCompleted{
		TurnID: t.ID, StopReason: stop, Usage: t.Usage, Message: t.Message, DurationMS: time.Since(began).Milliseconds(),
	})
	if ss := s.sessions[t.SessionID]; ss != nil && ss.turn == t {
		ss.turn, ss.CurrentTurnID = nil, ""
		if ss.Status == client.StatusRunning {
			ss.Status = client.StatusIdle
		}
	}
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	if ss.turn == nil {
		problem(w, http.StatusConflict, "no-turn", "no turn is running")
		return
	}
	ss.turn.cancel()
	reply(w, http.StatusAccepted, client.Turn{TurnID: ss.turn.ID})
}

// answer serves both the permission and the question endpoints.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	kind := "permission"
	if strings.Contains(r.URL.Path, "/questions/") {
		kind = "question"
	}
	var pa client.PermissionAnswer
	var qa client.QuestionAnswer
	if kind == "permission" {
		if !decode(w, r, &pa) {
			return
		}
		if pa.Decision != string(event.DecisionAllow) && pa.Decision != string(event.DecisionDeny) {
			problem(w, http.StatusUnprocessableEntity, "validation", "decision must be allow or deny")
			return
		}
	} else if !decode(w, r, &qa) {
		return
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	i := slices.IndexFunc(ss.requests, func(q *request) bool { return q.ID == r.PathValue("rid") && q.Kind == kind })
	if i < 0 {
		problem(w, http.StatusNotFound, "not-found", kind+" "+r.PathValue("rid")+" not found")
		return
	}
	req := ss.requests[i]
	if req.State != client.RequestsPending {
		problem(w, http.StatusConflict, "already-resolved", kind+" "+req.ID+" is already resolved")
		return
	}
	turnID := ""
	if ss.turn != nil {
		turnID = ss.turn.ID
	}
	var res event.Payload
	var ans any
	if kind == "permission" {
		res, ans = &event.PermissionResolved{ID: req.ID, Decision: event.Decision(pa.Decision), By: event.ByUser, OptionID: pa.OptionID, Message: pa.Message}, pa
	} else {
		res, ans = &event.QuestionResolved{ID: req.ID, Answer: qa.Answer, OptionID: qa.OptionID, Cancelled: qa.Cancel, By: event.ByUser}, qa
	}
	ev := s.resolveLocked(ss.ID, turnID, req, res)
	req.answer <- ans
	reply(w, http.StatusOK, client.Resolved{Event: ev})
}

func (s *Server) requests(w http.ResponseWriter, r *http.Request) {
	state := r.URL.Query().Get("state")
	if state != "" && state != client.RequestsPending && state != client.RequestsResolved {
		problem(w, http.StatusUnprocessableEntity, "validation", "state must be pending or resolved")
		return
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	out := client.RequestList{Requests: []client.Request{}}
	for _, q := range ss.requests {
		if state == "" || q.State == state {
			out.Requests = append(out.Requests, q.Request)
		}
	}
	reply(w, http.StatusOK, out)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil && q.Has("after") {
		problem(w, http.StatusUnprocessableEntity, "validation", "after must be an integer")
		return
	}
	limit := s.cfg.MaxPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			problem(w, http.StatusUnprocessableEntity, "validation", "limit must be a positive integer")
			return
		}
		limit = min(n, s.cfg.MaxPage)
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	page := client.EventPage{Events: []event.Event{}, NextAfter: after}
	for _, ev := range ss.events {
		if ev.Seq <= after {
			continue
		}
		if len(page.Events) == limit {
			page.HasMore = true
			break
		}
		page.Events = append(page.Events, ev)
		page.NextAfter = ev.Seq
	}
	reply(w, http.StatusOK, page)
}

// stream serves the SSE endpoint, misbehaving as Config.Faults says.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	after, err := resumePoint(r)
	if err != nil {
		problem(w, http.StatusUnprocessableEntity, "validation", err.Error())
		return
	}
	ss := s.lookup(w, r)
	if ss == nil {
		return
	}
	id := ss.ID
	s.mu.Unlock()

	flusher := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.streams.Add(1)

	eol := "\n"
	if s.cfg.Faults.Vary {
		eol = []string{"\n", "\r\n", "\r"}[s.intN(3)]
	}
	if s.cfg.Retry > 0 {
		_, _ = fmt.Fprintf(w, "retry: %d%s", s.cfg.Retry.Milliseconds(), eol)
	}
	_, _ = io.WriteString(w, ": hello"+eol+eol)
	flusher.Flush()

	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	cursor := after
	for {
		s.mu.Lock()
		var evs []event.Event
		if ss := s.sessions[id]; ss != nil {
			evs = slices.Clone(ss.events[min(cursor, int64(len(ss.events))):])
		}
		changed := s.changed
		s.mu.Unlock()

		for i, ev := range evs {
			cursor = ev.Seq
			f := s.cfg.Faults
			switch {
			case i < len(evs)-1 && s.chance(f.Skip):
				continue
			case s.chance(f.Drop):
				enc := s.encode(ev, eol)
				_, _ = io.WriteString(w, enc[:s.intN(len(enc))])
				flusher.Flush()
				if s.chance(0.5) {
					panic(http.ErrAbortHandler)
				}
				return
			}
			_, _ = io.WriteString(w, s.encode(ev, eol))
			if s.chance(f.Duplicate) {
				_, _ = io.WriteString(w, s.encode(evs[s.intN(i+1)], eol))
			}
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			_, _ = io.WriteString(w, ": ping"+eol+eol)
			flusher.Flush()
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// resumePoint reads Last-Event-ID, falling back to ?after=.
func resumePoint(r *http.Request) (int64, error) {
	v, what := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		v, what = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a non-negative integer", what)
	}
	return n, nil
}

// encode renders one event as SSE; with Faults.Vary some events' data is
// indented JSON spread over several data lines.
func (s *Server) encode(ev event.Event, eol string) string {
	var b []byte
	if s.cfg.Faults.Vary && s.chance(0.3) {
		b, _ = json.MarshalIndent(ev, "", " ")
	} else {
		b, _ = json.Marshal(ev)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "id: %d%sevent: %s%s", ev.Seq, eol, ev.Type, eol)
	for line := range strings.SplitSeq(string(b), "\n") {
		sb.WriteString("data: " + line + eol)
	}
	sb.WriteString(eol)
	return sb.String()
}

func (s *Server) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Float64() < p
}

func (s *Server) intN(n int) int {
	if n <= 1 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.IntN(n)
}

package opencode

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// session is one OpenCode session on a (possibly shared) server.
type session struct {
	a    *adapter
	srv  *server
	cfg  agent.Config
	host agent.Host
	id   string // OpenCode's session id

	ctx    context.Context // lives until Close
	cancel context.CancelFunc

	mu      sync.Mutex // guards m, turnCtx
	m       *Mapper
	turnCtx context.Context

	connected chan struct{}      // the event stream delivered its first event
	idle      chan struct{}      // session.status idle (buffered 1)
	retry     chan Retry         // session.status retry
	pumpDone  chan struct{}      // the event pump has returned
	done      chan struct{}      // closed when the server died under the session
	exit      event.SessionEnded // set before done is closed
	closeOnce sync.Once
	turnMu    sync.Mutex // one turn at a time
	// unsettled (guarded by turnMu) is set when a turn ended before
	// OpenCode said the session was idle (an abort that outlasted
	// InterruptTimeout): that idle may still come, and must not end the
	// next turn, so the next Prompt waits for it first.
	unsettled bool

	// cmu guards the models and agents (modes) OpenCode listed and the
	// ones the next prompts name ("": the server's default).
	cmu           sync.Mutex
	models, modes []agent.Choice
	model, mode   string
}

var (
	_ agent.Session    = (*session)(nil)
	_ agent.Cataloger  = (*session)(nil)
	_ agent.Configurer = (*session)(nil)
	_ agent.Exiter     = (*session)(nil)
)

func startSession(ctx context.Context, a *adapter, srv *server, cfg agent.Config, host agent.Host, rules []rule) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	s := &session{a: a, srv: srv, cfg: cfg, host: host, ctx: sctx, cancel: cancel,
		m:         NewMapper("", cfg.Cwd),
		connected: make(chan struct{}), idle: make(chan struct{}, 1), retry: make(chan Retry, 16),
		pumpDone: make(chan struct{}), done: make(chan struct{})}
	s.m.Raw = a.opts.Raw
	go s.pump()
	fail := func(err error) (*session, error) {
		cancel()
		<-s.pumpDone
		return nil, err
	}
	select {
	case <-s.connected:
	case <-srv.done:
		return fail(fmt.Errorf("opencode: %s", srv.exit.Message))
	case <-ctx.Done():
		return fail(fmt.Errorf("opencode: subscribing to events: %w", ctx.Err()))
	}
	var created struct {
		ID string `json:"id"`
	}
	body := map[string]any{"permission": rules}
	if err := srv.call(ctx, http.MethodPost, "/session", cfg.Cwd, body, &created); err != nil {
		return fail(err)
	}
	if created.ID == "" {
		return fail(errors.New("opencode: POST /session returned no id"))
	}
	s.id = created.ID
	s.mu.Lock()
	s.m.SessionID = created.ID
	s.mu.Unlock()
	if err := host.SetNativeSessionID(ctx, created.ID); err != nil {
		return fail(fmt.Errorf("opencode: %w", err))
	}
	if err := s.loadCatalog(ctx); err != nil {
		return fail(err)
	}
	go s.watch()
	return s, nil
}

// loadCatalog asks the server for its models (GET /config/providers, our
// provider's) and its primary agents (GET /agent), OpenCode's modes.
func (s *session) loadCatalog(ctx context.Context) error {
	var provs struct {
		Providers []struct {
			ID     string `json:"id"`
			Models map[string]struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"models"`
		} `json:"providers"`
	}
	if err := s.srv.call(ctx, http.MethodGet, "/config/providers", s.cfg.Cwd, nil, &provs); err != nil {
		return err
	}
	var agents []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Mode        string `json:"mode"`
		Hidden      bool   `json:"hidden"`
	}
	if err := s.srv.call(ctx, http.MethodGet, "/agent", s.cfg.Cwd, nil, &agents); err != nil {
		return err
	}
	var models, modes []agent.Choice
	for _, p := range provs.Providers {
		if p.ID != providerID {
			continue
		}
		for id, m := range p.Models {
			models = append(models, agent.Choice{ID: cmp.Or(m.ID, id), Name: agent.Clip(m.Name, 200)})
		}
	}
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	for _, a := range agents {
		if (a.Mode == "primary" || a.Mode == "all") && !a.Hidden {
			modes = append(modes, agent.Choice{ID: a.Name, Description: agent.Clip(a.Description, 500)})
		}
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.models, s.modes = models, modes
	// The server's configured model (its key's), not /config/providers'
	// default, which is OpenCode's own pick among the declared ones.
	s.model = cmp.Or(s.cfg.Model, s.a.opts.Model)
	s.mode = s.cfg.Mode
	return nil
}

// Catalog implements agent.Cataloger.
func (s *session) Catalog() agent.Catalog {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return agent.Catalog{Models: slices.Clone(s.models), Model: s.model, Modes: slices.Clone(s.modes), Mode: s.mode}
}

// Configure implements agent.Configurer: OpenCode takes the model and the
// agent (mode) with each prompt, so the next prompts name them.
func (s *session) Configure(_ context.Context, model, mode string) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.model, s.mode = cmp.Or(model, s.model), cmp.Or(mode, s.mode)
	return nil
}

// watch ends the session when the server dies under it.
func (s *session) watch() {
	select {
	case <-s.srv.done:
		end := s.srv.exit
		if end.Message != "" {
			end.Message += " (OpenCode session " + s.id + ")"
		}
		s.exit = end
		close(s.done)
	case <-s.ctx.Done():
	}
}

// Done implements agent.Exiter.
func (s *session) Done() <-chan struct{} { return s.done }

// Exit implements agent.Exiter.
func (s *session) Exit() event.SessionEnded { return s.exit }

// pump reads the server's event stream for the session's directory for
// the session's life, translates the session's events and emits them.
func (s *session) pump() {
	defer close(s.pumpDone)
	var once sync.Once
	for s.ctx.Err() == nil && s.srv.alive() {
		err := s.stream(func() { once.Do(func() { close(s.connected) }) })
		if s.ctx.Err() != nil || !s.srv.alive() {
			return
		}
		_ = err // a dropped stream is reopened; events in between are lost
		select {
		case <-s.ctx.Done():
			return
		case <-s.srv.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *session) stream(connected func()) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() { // the server's death ends the stream too
		select {
		case <-s.srv.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.url+"/event", nil)
	if err != nil {
		return err
	}
	s.srv.auth(req, s.cfg.Cwd)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.srv.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("opencode: GET /event: %s", resp.Status)
	}
	rd := newSSEReader(resp.Body, DefaultMaxEvent)
	for {
		data, err := rd.next()
		if errors.Is(err, errLineTooLong) {
			s.emit(event.New(event.SourceDaemon, &event.Error{Code: "event_too_long", Message: "opencode: an event longer than the adapter accepts was skipped"}))
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		connected()
		s.handle(data)
	}
}

func (s *session) emit(evs ...event.Event) {
	if len(evs) > 0 {
		_ = s.host.Emit(context.WithoutCancel(s.ctx), evs...) // fails only once the session has ended
	}
}

// handle maps one event and acts on it.
func (s *session) handle(data []byte) {
	if s.a.tap != nil {
		s.a.tap(s.cfg.Cwd, data)
	}
	s.mu.Lock()
	out := s.m.Map(data)
	var itemID, tool string
	var input json.RawMessage
	if p := out.Permission; p != nil {
		itemID = s.m.ItemID(p.Tool.CallID)
		tool, input = s.m.Tool(p.Tool.CallID)
	}
	turnCtx := s.turnCtx
	s.mu.Unlock()
	s.emit(out.Events...)
	if turnCtx == nil {
		turnCtx = s.ctx
	}
	if p := out.Permission; p != nil {
		go s.permission(turnCtx, p, itemID, tool, input)
	}
	if out.Question != "" {
		// Questions are not supported yet: reject them so the turn goes on.
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			defer cancel()
			_ = s.srv.call(ctx, http.MethodPost, "/question/"+out.Question+"/reject", s.cfg.Cwd, map[string]any{}, nil)
		}()
	}
	if out.Retry != nil {
		select {
		case s.retry <- *out.Retry:
		default:
		}
	}
	if out.Idle {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// Option ids of a permission request.
const (
	optOnce   = "once"
	optAlways = "always"
	optReject = "reject"
)

// permissionRequest builds the universal request for an OpenCode one.
func permissionRequest(p *PermissionAsked, itemID, tool string, input json.RawMessage, cwd string) agent.PermissionRequest {
	var meta struct {
		Command  string `json:"command"`
		Filepath string `json:"filepath"`
		Diff     string `json:"diff"`
	}
	_ = json.Unmarshal(p.Metadata, &meta)
	req := agent.PermissionRequest{ItemID: itemID, Tool: tool, Input: input, Kind: event.PermTool}
	if req.Tool == "" {
		req.Tool = p.Permission
	}
	subject := strings.Join(p.Patterns, ", ")
	switch p.Permission {
	case "bash":
		req.Kind = event.PermCommand
		if meta.Command != "" {
			subject = meta.Command
		}
	case "edit":
		req.Kind = event.PermFileWrite
		if meta.Filepath != "" {
			subject = (&Mapper{Cwd: cwd}).rel(meta.Filepath)
		}
		req.Detail = meta.Diff
	}
	req.Title = req.Tool
	if subject != "" {
		req.Title += ": " + subject
	}
	always := "Allow always"
	if len(p.Always) > 0 {
		always += " (" + strings.Join(p.Always, ", ") + ")"
	}
	req.Options = []event.PermissionOption{
		{ID: optOnce, Kind: event.OptionAllowOnce, Label: "Allow once"},
		{ID: optAlways, Kind: event.OptionAllowAlways, Label: always},
		{ID: optReject, Kind: event.OptionDenyOnce, Label: "Reject"},
	}
	return req
}

// permissionReply is OpenCode's reply to an answer: "always" only when the
// client picked that option by name.
func permissionReply(ans agent.PermissionAnswer) map[string]string {
	if ans.Decision != event.DecisionAllow {
		// With a message OpenCode hands the refusal to the model and the
		// turn goes on (as with the other agents); without one it stops.
		msg := ans.Message
		if msg == "" {
			msg = "The user denied this action."
			if ans.By == event.ByTimeout {
				msg = "Nobody answered the permission request in time; it was denied."
			}
		}
		return map[string]string{"reply": optReject, "message": msg}
	}
	if ans.OptionID == optAlways {
		return map[string]string{"reply": optAlways}
	}
	return map[string]string{"reply": optOnce}
}

func (s *session) permission(ctx context.Context, p *PermissionAsked, itemID, tool string, input json.RawMessage) {
	ans, err := s.host.RequestPermission(ctx, permissionRequest(p, itemID, tool, input, s.cfg.Cwd))
	if err != nil {
		return // the turn ended; its abort rejects the request in OpenCode
	}
	reply := permissionReply(ans)
	if reply["reply"] == optReject {
		s.mu.Lock()
		s.m.Denied(p.Tool.CallID)
		s.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.srv.call(rctx, http.MethodPost, "/permission/"+p.ID+"/reply", s.cfg.Cwd, reply, nil); err != nil && s.srv.alive() {
		s.emit(event.New(event.SourceDaemon, &event.Error{Code: "permission_reply_failed", Message: err.Error()}))
	}
}

// promptParts converts the turn's input to OpenCode parts.
func promptParts(in agent.Input) []map[string]any {
	var parts []map[string]any
	for _, p := range in.Content {
		switch p.Type {
		case event.PartText:
			parts = append(parts, map[string]any{"type": "text", "text": p.Text})
		case event.PartImage, event.PartFile:
			u := p.URI
			if p.Data != "" {
				u = "data:" + p.MimeType + ";base64," + p.Data
			}
			if u == "" && p.Path != "" {
				u = "file://" + p.Path
			}
			if u != "" {
				parts = append(parts, map[string]any{"type": "file", "mime": p.MimeType, "url": u, "filename": p.Path})
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, map[string]any{"type": "text", "text": ""})
	}
	return parts
}

// Prompt implements agent.Session: it posts the prompt and follows the
// session's events until OpenCode reports it idle.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	s.turnMu.Lock()
	defer s.turnMu.Unlock()
	select {
	case <-s.done:
		return agent.Result{StopReason: event.StopError, Message: s.exit.Message}, errors.New(s.exit.Message)
	default:
	}
	s.mu.Lock()
	s.turnCtx = ctx
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turnCtx = nil
		s.mu.Unlock()
	}()
	if s.unsettled {
		select {
		case <-s.idle:
			s.unsettled = false
		case <-time.After(s.a.opts.InterruptTimeout):
			s.unsettled = false
		case <-ctx.Done():
			return agent.Result{StopReason: event.StopInterrupted}, nil
		case <-s.done:
			return agent.Result{StopReason: event.StopError, Message: s.exit.Message}, errors.New(s.exit.Message)
		}
	}
	for drained := false; !drained; { // stale signals of an earlier turn
		select {
		case <-s.idle:
		case <-s.retry:
		default:
			drained = true
		}
	}
	body := map[string]any{"parts": promptParts(in)}
	s.cmu.Lock()
	if s.model != "" {
		body["model"] = map[string]string{"providerID": providerID, "modelID": s.model}
	}
	if s.mode != "" {
		body["agent"] = s.mode
	}
	s.cmu.Unlock()
	if err := s.srv.call(ctx, http.MethodPost, "/session/"+s.id+"/prompt_async", s.cfg.Cwd, body, nil); err != nil {
		if ctx.Err() != nil {
			return agent.Result{StopReason: event.StopInterrupted}, nil
		}
		return agent.Result{StopReason: event.StopError, Message: err.Error()}, err
	}
	var (
		interrupted, gaveUp bool
		deadline            <-chan time.Time
		turnCtxDone         = ctx.Done()
		failMsg             string
	)
	abort := func() {
		actx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		_ = s.srv.call(actx, http.MethodPost, "/session/"+s.id+"/abort", s.cfg.Cwd, nil, nil)
	}
wait:
	for {
		select {
		case <-s.idle:
			break wait
		case r := <-s.retry:
			if gaveUp || interrupted || r.Attempt <= s.a.opts.MaxRetries {
				continue
			}
			gaveUp = true
			failMsg = r.Message
			s.emit(event.New(event.SourceAgent, &event.Error{Code: "api_error", Message: r.Message, Retryable: true}))
			go abort()
			deadline = time.After(s.a.opts.InterruptTimeout)
		case <-turnCtxDone:
			turnCtxDone = nil
			interrupted = true
			go abort()
			deadline = time.After(s.a.opts.InterruptTimeout)
		case <-deadline:
			s.unsettled = true
			break wait
		case <-s.done:
			s.finish("the opencode server died")
			return agent.Result{StopReason: event.StopError, Message: s.exit.Message}, errors.New(s.exit.Message)
		}
	}
	reason := ""
	if interrupted {
		reason = "interrupted"
	} else if gaveUp {
		reason = "failed"
	}
	usage, finish, errMsg := s.finish(reason)
	res := agent.Result{StopReason: event.StopEndTurn, Usage: usage}
	switch {
	case interrupted:
		res.StopReason = event.StopInterrupted
	case gaveUp:
		res.StopReason, res.Message = event.StopError, failMsg
	case errMsg != "":
		res.StopReason, res.Message = event.StopError, errMsg
	case finish == "length":
		res.StopReason = event.StopMaxTokens
	}
	return res, nil
}

// finish closes the turn's open items and returns its accounting.
func (s *session) finish(reason string) (*event.Usage, string, string) {
	s.mu.Lock()
	evs, usage, finish, errMsg := s.m.EndTurn(reason)
	s.mu.Unlock()
	s.emit(evs...)
	return usage, finish, errMsg
}

// Close implements agent.Session: it aborts the OpenCode session's work,
// stops following its events and lets go of the server (the last session
// on a server stops it).
func (s *session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if s.srv.alive() && s.id != "" {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_ = s.srv.call(actx, http.MethodPost, "/session/"+s.id+"/abort", s.cfg.Cwd, nil, nil)
			cancel()
		}
		s.cancel()
		select {
		case <-s.pumpDone:
		case <-ctx.Done():
		}
		s.a.release(s.srv)
	})
	return nil
}

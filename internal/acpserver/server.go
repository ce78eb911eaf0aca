package acpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	acp "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/version"
)

// Backend is the part of agentbox's API the server drives. *client.Client
// implements it, against a local or a remote daemon.
type Backend interface {
	CreateSession(ctx context.Context, req client.CreateSession) (client.Session, error)
	GetSession(ctx context.Context, id string) (client.Session, error)
	Resume(ctx context.Context, id string, req client.ResumeSession) (client.Session, error)
	SendMessage(ctx context.Context, id string, msg client.SendMessage) (client.Turn, error)
	Interrupt(ctx context.Context, id string) (client.Turn, error)
	AnswerPermission(ctx context.Context, id, permissionID string, ans client.PermissionAnswer) (client.Resolved, error)
	AnswerQuestion(ctx context.Context, id, questionID string, ans client.QuestionAnswer) (client.Resolved, error)
	LastSeq(ctx context.Context, id string) (int64, error)
	EventsAll(ctx context.Context, id string, after int64, fn func(event.Event) error) error
	WaitTurn(ctx context.Context, sessionID, turnID string, after int64, fn func(event.Event) error, opts ...client.StreamOption) (event.TurnCompleted, error)
}

var _ Backend = (*client.Client)(nil)

// Config says which agentbox sessions an ACP connection creates.
type Config struct {
	// Agent is the agentbox agent new sessions run (required).
	Agent string
	// Model, PermissionMode and Env are passed to every new session.
	Model          string
	PermissionMode string
	Env            map[string]string
	// Logger gets the connection's diagnostics (default: discarded).
	Logger *slog.Logger
}

// callTimeout bounds one call to the backend that is not a turn.
const callTimeout = 2 * time.Minute

// Serve speaks ACP as an agent on r and w (an editor's stdio, or an
// upgraded HTTP connection) until the peer disconnects or ctx ends. The
// agentbox sessions it creates stay in the daemon afterwards: they are
// durable, and session/load picks them up again.
func Serve(ctx context.Context, b Backend, cfg Config, r io.Reader, w io.Writer) error {
	if cfg.Agent == "" {
		return errors.New("acpserver: no agent name")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &acpAgent{b: b, cfg: cfg, sessions: map[string]*sessionState{}, prompts: map[acp.SessionId]*promptRun{}, ready: make(chan struct{})}
	conn := acp.NewConn(a.handle, w, r, acp.Options{Logger: cfg.Logger})
	// The connection reads (and calls a) from the start; a's handlers
	// wait for it to be known.
	a.conn = conn
	close(a.ready)
	select {
	case <-conn.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acpAgent serves the ACP agent methods over a Backend.
type acpAgent struct {
	b     Backend
	cfg   Config
	conn  *acp.Conn
	ready chan struct{} // closed once conn is set

	mu       sync.Mutex
	sessions map[string]*sessionState     // the sessions this connection created or loaded
	prompts  map[acp.SessionId]*promptRun // the running prompt of a session, cancelled by session/cancel
}

// promptRun is a running session/prompt.
type promptRun struct{ cancel context.CancelFunc }

// sessionState is one ACP session (an agentbox session).
type sessionState struct {
	turn sync.Mutex // one prompt at a time
}

// c returns the connection, once it is set.
func (a *acpAgent) c() *acp.Conn {
	<-a.ready
	return a.conn
}

// decode reads a request's params; check says what is missing, if anything.
func decode[T any](params json.RawMessage, check func(*T) string) (T, *acp.RequestError) {
	var p T
	if err := json.Unmarshal(params, &p); err != nil {
		return p, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if check != nil {
		if missing := check(&p); missing != "" {
			return p, acp.NewInvalidParams(map[string]any{"error": missing + " is required"})
		}
	}
	return p, nil
}

// answer is a handler's result, or its error as a JSON-RPC error.
func answer[T any](res T, err error) (any, *acp.RequestError) {
	if err != nil {
		return nil, acp.ToRequestError(err)
	}
	return res, nil
}

// handle serves the client's requests and notifications. Methods agentbox
// does not offer (modes, config options, session/list and resume,
// extension methods) are not found.
func (a *acpAgent) handle(ctx context.Context, method string, params json.RawMessage) (any, *acp.RequestError) {
	switch method {
	case acp.AgentMethodInitialize:
		if _, rerr := decode[acp.InitializeRequest](params, nil); rerr != nil {
			return nil, rerr
		}
		return a.initialize(), nil
	case acp.AgentMethodAuthenticate:
		if _, rerr := decode(params, func(p *acp.AuthenticateRequest) string { return orMissing(p.MethodId == "", "methodId") }); rerr != nil {
			return nil, rerr
		}
		// There is nothing to authenticate: the daemon's token is the
		// transport's business.
		return acp.AuthenticateResponse{}, nil
	case acp.AgentMethodSessionNew:
		p, rerr := decode(params, func(p *acp.NewSessionRequest) string {
			return orMissing(p.Cwd == "", "cwd") + orMissing(p.Cwd != "" && p.McpServers == nil, "mcpServers")
		})
		if rerr != nil {
			return nil, rerr
		}
		return answer(a.newSession(ctx, p))
	case acp.AgentMethodSessionLoad:
		p, rerr := decode(params, func(p *acp.LoadSessionRequest) string {
			return orMissing(p.Cwd == "", "cwd") + orMissing(p.Cwd != "" && p.McpServers == nil, "mcpServers")
		})
		if rerr != nil {
			return nil, rerr
		}
		return answer(a.loadSession(ctx, p))
	case acp.AgentMethodSessionPrompt:
		p, rerr := decode(params, func(p *acp.PromptRequest) string { return orMissing(p.Prompt == nil, "prompt") })
		if rerr != nil {
			return nil, rerr
		}
		res, err := a.prompt(ctx, p)
		return answer(res, err)
	case acp.AgentMethodSessionCancel:
		p, rerr := decode[acp.CancelNotification](params, nil)
		if rerr != nil {
			return nil, rerr
		}
		// The running prompt's context ends, which interrupts its turn
		// (see follow).
		a.mu.Lock()
		if run := a.prompts[p.SessionId]; run != nil {
			run.cancel()
			delete(a.prompts, p.SessionId)
		}
		a.mu.Unlock()
		return nil, nil
	case acp.AgentMethodSessionClose:
		p, rerr := decode[acp.CloseSessionRequest](params, nil)
		if rerr != nil {
			return nil, rerr
		}
		// Not advertised: the session is forgotten by this connection;
		// the agentbox session stays.
		a.mu.Lock()
		delete(a.sessions, string(p.SessionId))
		a.mu.Unlock()
		return acp.CloseSessionResponse{}, nil
	}
	return nil, acp.NewMethodNotFound(method)
}

// orMissing is name when missing is true, else "".
func orMissing(missing bool, name string) string {
	if missing {
		return name
	}
	return ""
}

func (a *acpAgent) session(id acp.SessionId) (*sessionState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[string(id)]
	if s == nil {
		return nil, acp.NewInvalidParams(map[string]any{"error": fmt.Sprintf("unknown session %q: create it with session/new or load it with session/load", id)})
	}
	return s, nil
}

func (a *acpAgent) add(id string) {
	a.mu.Lock()
	if a.sessions[id] == nil {
		a.sessions[id] = &sessionState{}
	}
	a.mu.Unlock()
}

// initialize answers initialize: session/load, images and embedded context.
func (a *acpAgent) initialize() acp.InitializeResponse {
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: acp.PromptCapabilities{Image: true, EmbeddedContext: true},
		},
		AgentInfo:   &acp.Implementation{Name: "agentbox", Title: acp.Ptr("agentbox (" + a.cfg.Agent + ")"), Version: version.String()},
		AuthMethods: []json.RawMessage{},
	}
}

// newSession serves session/new: a new agentbox session of the
// configured agent in the client's directory. MCP servers are not passed
// on (agentbox's agents get their tools from their own configuration).
func (a *acpAgent) newSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	s, err := a.b.CreateSession(ctx, client.CreateSession{Agent: a.cfg.Agent, Cwd: p.Cwd, Model: a.cfg.Model,
		PermissionMode: a.cfg.PermissionMode, Env: a.cfg.Env})
	if err != nil {
		return acp.NewSessionResponse{}, fmt.Errorf("agentbox: create a %s session: %w", a.cfg.Agent, err)
	}
	a.add(s.ID)
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.ID)}, nil
}

// loadSession serves session/load: the agentbox session's log is
// replayed as session updates, and a session whose agent is no longer
// running is resumed (its agent continues its own conversation when it
// supports resume).
func (a *acpAgent) loadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	id := string(p.SessionId)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	s, err := a.b.GetSession(cctx, id)
	if err != nil {
		return acp.LoadSessionResponse{}, fmt.Errorf("agentbox: session %s: %w", id, err)
	}
	tr := newTranslator(true)
	err = a.b.EventsAll(cctx, id, 0, func(e event.Event) error {
		for _, u := range tr.updates(e) {
			if err := a.c().Notify(ctx, acp.ClientMethodSessionUpdate, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return acp.LoadSessionResponse{}, fmt.Errorf("agentbox: replay session %s: %w", id, err)
	}
	switch s.Status {
	case client.StatusEnded, client.StatusFailed, client.StatusInterrupted:
		if _, err := a.b.Resume(cctx, id, client.ResumeSession{Env: a.cfg.Env}); err != nil {
			return acp.LoadSessionResponse{}, fmt.Errorf("agentbox: resume session %s: %w", id, err)
		}
	}
	a.add(id)
	return acp.LoadSessionResponse{}, nil
}

// prompt serves session/prompt: the prompt becomes one agentbox turn, whose
// events are sent back as session updates until it completes. Permission
// requests go to the client; questions, which ACP cannot ask, are
// declined.
func (a *acpAgent) prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	ss, err := a.session(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	if !ss.turn.TryLock() {
		return acp.PromptResponse{}, acp.NewInvalidRequest(map[string]any{"error": "a prompt is already running in this session"})
	}
	defer ss.turn.Unlock()
	// session/cancel cancels the running prompt (there is one at a time:
	// a second one is refused above, and does not disturb the first).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := &promptRun{cancel: cancel}
	a.mu.Lock()
	a.prompts[p.SessionId] = run
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.prompts[p.SessionId] == run {
			delete(a.prompts, p.SessionId)
		}
		a.mu.Unlock()
	}()
	sid := string(p.SessionId)
	parts, err := contentParts(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}

	// The turn is followed on a context of its own: a cancelled prompt
	// (session/cancel) interrupts the turn, and its last events, up to
	// turn.completed, are still sent.
	follow, stop := context.WithCancel(context.Background())
	defer stop()
	cctx, cancel := context.WithTimeout(follow, callTimeout)
	after, err := a.b.LastSeq(cctx, sid)
	if err == nil {
		var tr client.Turn
		tr, err = a.b.SendMessage(cctx, sid, client.SendMessage{Content: parts})
		if err == nil {
			cancel()
			return a.follow(ctx, follow, sid, tr.TurnID, after)
		}
	}
	cancel()
	return acp.PromptResponse{}, fmt.Errorf("agentbox: %w", err)
}

// follow streams one turn to the client.
func (a *acpAgent) follow(ctx, follow context.Context, sid, turnID string, after int64) (acp.PromptResponse, error) {
	turnDone := make(chan struct{})
	defer close(turnDone)
	go func() {
		select {
		case <-ctx.Done(): // session/cancel, or the client went away
			ictx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			if _, err := a.b.Interrupt(ictx, sid); err != nil && !client.IsConflict(err) {
				a.cfg.Logger.Warn("acp: interrupt", "session", sid, "err", err)
			}
		case <-turnDone:
		}
	}()

	tr := newTranslator(false)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		pending = map[string]context.CancelFunc{} // permission id → its request to the client
	)
	defer func() {
		mu.Lock()
		for _, c := range pending {
			c()
		}
		mu.Unlock()
		wg.Wait()
	}()
	send := func(u acp.SessionUpdate) {
		if err := a.c().Notify(follow, acp.ClientMethodSessionUpdate, acp.SessionNotification{SessionId: acp.SessionId(sid), Update: u}); err != nil {
			a.cfg.Logger.Debug("acp: session update", "session", sid, "err", err)
		}
	}
	tc, err := a.b.WaitTurn(follow, sid, turnID, after, func(e event.Event) error {
		for _, u := range tr.updates(e) {
			send(u)
		}
		p, derr := e.Decode()
		if derr != nil {
			return nil
		}
		switch p := p.(type) {
		case *event.PermissionRequested:
			toolCallID := p.ItemID
			if toolCallID == "" || tr.items[toolCallID] == nil {
				// No tool call to attach it to: announce one.
				toolCallID = p.ID
				send(acp.SessionUpdate{ToolCall: &acp.SessionUpdateToolCall{ToolCallId: acp.ToolCallId(p.ID), Title: p.Title, Status: acp.ToolCallStatusPending}})
			}
			rctx, rcancel := context.WithCancel(ctx)
			mu.Lock()
			pending[p.ID] = rcancel
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer rcancel()
				a.askPermission(rctx, sid, p, toolCallID)
			}()
		case *event.PermissionResolved:
			// Settled elsewhere (policy, timeout, another client): the
			// client's dialog is withdrawn.
			mu.Lock()
			if c := pending[p.ID]; c != nil {
				c()
				delete(pending, p.ID)
			}
			mu.Unlock()
		case *event.QuestionRequested:
			qctx, cancel := context.WithTimeout(follow, callTimeout)
			// ACP has no questions: declined by this server's rule,
			// nobody asked, and recorded so.
			_, err := a.b.AnswerQuestion(qctx, sid, p.ID, client.QuestionAnswer{Cancel: true, By: string(event.ByPolicy)})
			cancel()
			if err != nil && !client.IsConflict(err) {
				a.cfg.Logger.Warn("acp: decline a question", "session", sid, "err", err)
			}
		}
		return nil
	})
	if err != nil {
		return acp.PromptResponse{}, fmt.Errorf("agentbox: %w", err)
	}
	sr, ok := stopReason(tc.StopReason)
	if !ok {
		msg := tc.Message
		if msg == "" {
			msg = "the turn failed"
		}
		return acp.PromptResponse{}, acp.NewInternalError(map[string]any{"error": "agentbox: " + msg, "stop_reason": string(tc.StopReason)})
	}
	return acp.PromptResponse{StopReason: sr, Usage: usage(tc.Usage)}, nil
}

// askPermission puts one permission request to the client and answers
// agentbox with its choice (deny when the client cancels or fails).
func (a *acpAgent) askPermission(ctx context.Context, sid string, p *event.PermissionRequested, toolCallID string) {
	req := permissionRequest(sid, p, toolCallID)
	resp, err := acp.Request[acp.RequestPermissionResponse](ctx, a.c(), acp.ClientMethodSessionRequestPermission, req)
	if err != nil && ctx.Err() != nil {
		return // withdrawn: settled elsewhere, or the turn is over
	}
	decision, optionID := permissionAnswer(req, resp)
	ans := client.PermissionAnswer{Decision: decision, OptionID: optionID}
	if err != nil {
		// Nobody answered: the deny is this server's rule.
		ans.Message = "the ACP client failed to answer: " + clip(err.Error(), 500)
		ans.By = string(event.ByPolicy)
	}
	actx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := a.b.AnswerPermission(actx, sid, p.ID, ans); err != nil && !client.IsConflict(err) && !client.IsAlreadyResolved(err) && !client.IsNotFound(err) {
		a.cfg.Logger.Warn("acp: answer permission", "session", sid, "permission", p.ID, "err", err)
	}
}

// contentParts converts an ACP prompt into agentbox content parts: text,
// images, embedded text resources (as text naming their URI) and resource
// links (as file references).
func contentParts(blocks []acp.ContentBlock) ([]event.ContentPart, error) {
	var parts []event.ContentPart
	for _, b := range blocks {
		switch {
		case b.Text != nil:
			parts = append(parts, event.TextPart(b.Text.Text))
		case b.Image != nil:
			parts = append(parts, event.ContentPart{Type: event.PartImage, MimeType: b.Image.MimeType, Data: b.Image.Data})
		case b.Resource != nil && b.Resource.Resource.TextResourceContents != nil:
			r := b.Resource.Resource.TextResourceContents
			parts = append(parts, event.TextPart(fmt.Sprintf("\n<file uri=%q>\n%s\n</file>\n", r.Uri, r.Text)))
		case b.Resource != nil && b.Resource.Resource.BlobResourceContents != nil:
			r := b.Resource.Resource.BlobResourceContents
			part := event.ContentPart{Type: event.PartFile, URI: r.Uri, Data: r.Blob}
			if r.MimeType != nil {
				part.MimeType = *r.MimeType
			}
			parts = append(parts, part)
		case b.ResourceLink != nil:
			part := event.ContentPart{Type: event.PartFile, URI: b.ResourceLink.Uri}
			if p, ok := strings.CutPrefix(b.ResourceLink.Uri, "file://"); ok {
				part.Path = p
			}
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 {
		return nil, errors.New("the prompt has no text, image or resource")
	}
	return parts, nil
}

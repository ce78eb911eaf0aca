package acp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
	"github.com/agentbox/agentbox/internal/version"
)

// session is one agent process with one ACP session in it: the runtime
// runs the process, an acpwire.Conn speaks JSON-RPC over its pipes.
type session struct {
	*procrt.Runtime
	a    *adapter
	host agent.Host
	cfg  agent.Config
	conn *wire.Conn
	fs   *confinedFS // nil when fs/* is not served
	// terms are the agent's terminals (nil when terminal/* is not served).
	terms *terminals
	sid   wire.SessionId
	// prompt is what the agent declared it takes in a prompt at
	// initialize (promptBlocks refuses what it did not).
	prompt wire.PromptCapabilities

	// mu guards the translator and the turn, and is held while the
	// events of one message are emitted, so they stay in order.
	mu      sync.Mutex
	tr      *Translator
	loading bool
	turn    *turn
	// early holds what the agent said before the first turn: the engine
	// logs session.started only once Start has returned, and nothing may
	// come before it.
	early   []event.Event
	started bool

	// cmu guards what the agent said the session may use (session/new or
	// session/load) and the choices in force, kept up to date as the
	// session switches.
	cmu     sync.Mutex
	modes   *wire.SessionModeState
	models  *wire.SessionModelState
	options []wire.SessionConfigOption
}

type turn struct {
	ctx       context.Context
	cancelled atomic.Bool // session/cancel was sent
}

var (
	_ agent.Session    = (*session)(nil)
	_ agent.Exiter     = (*session)(nil)
	_ agent.Cataloger  = (*session)(nil)
	_ agent.Configurer = (*session)(nil)
)

// startSession starts the process, initializes the agent and opens its
// session. The process's lifetime is the session's, never ctx's: ctx only
// bounds the start-up calls.
func startSession(ctx context.Context, a *adapter, proc *agent.Proc, cfg agent.Config, host agent.Host) (*session, error) {
	name := a.spec.Name
	s := &session{a: a, host: host, cfg: cfg, tr: NewTranslator(cfg.Cwd)}
	s.tr.Raw = a.opts.Raw
	if a.spec.ServeFS && cfg.Sandbox == nil {
		s.fs = &confinedFS{dir: cfg.Cwd}
	}
	if a.spec.ServeTerminal {
		s.terms = newTerminals(cfg.Cwd, proc.Env, cfg.Sandbox)
	}
	rt, err := procrt.Start(proc, procrt.Config{
		Name: name, Who: "the " + name + " agent", ErrPrefix: name + ": the agent",
		CloseGrace: a.opts.CloseGrace, ExitsOnEOF: a.spec.ExitsOnEOF,
		OnExit: func() {
			if s.terms != nil {
				s.terms.closeAll() // the agent is gone: so are the commands it ran
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.Runtime = rt
	// Protocol trouble is not logged: the agent's own complaints are in
	// its stderr tail, which is what we report.
	s.conn = wire.NewConn(s.handle, rt.Stdin(), rt.Stdout(), wire.Options{})
	rt.Serve(func(io.Reader) { <-s.conn.Done() })

	sctx, cancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer cancel()
	if err := s.open(sctx); err != nil {
		s.Kill()
		<-s.Exited()
		if tail := s.Stderr().Summary(); tail != "" {
			err = fmt.Errorf("%w; its stderr ends with: %s", err, tail)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// call sends one request, failing early when the process has exited.
func call[T any](ctx context.Context, s *session, method string, params any) (T, error) {
	v, err := wire.Request[T](ctx, s.conn, method, params)
	if err != nil {
		select {
		case <-s.Exited():
			return v, fmt.Errorf("%s: the agent %s", method, s.ExitDesc())
		default:
		}
		return v, fmt.Errorf("%s: %w", method, err)
	}
	return v, nil
}

// open runs initialize, session/new or session/load, and applies the
// session's mode and model.
func (s *session) open(ctx context.Context) error {
	caps := wire.ClientCapabilities{}
	if s.fs != nil {
		caps.Fs = wire.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}
	}
	caps.Terminal = s.terms != nil
	init, err := call[wire.InitializeResponse](ctx, s, wire.AgentMethodInitialize, wire.InitializeRequest{
		ProtocolVersion:    wire.ProtocolVersionNumber,
		ClientCapabilities: caps,
		ClientInfo:         &wire.Implementation{Name: "agentbox", Version: version.String()},
	})
	if err != nil {
		return err
	}
	s.prompt = init.AgentCapabilities.PromptCapabilities
	if err := checkMCPTransports(s.cfg.MCPServers, init.AgentCapabilities.McpCapabilities); err != nil {
		return err
	}
	mcp, err := mcpServers(s.cfg.MCPServers)
	if err != nil {
		return err
	}
	var (
		modes   *wire.SessionModeState
		models  *wire.SessionModelState
		options []wire.SessionConfigOption
	)
	if id := s.cfg.NativeSessionID; id != "" {
		if !init.AgentCapabilities.LoadSession {
			return fmt.Errorf("the agent cannot load session %s (it does not offer session/load)", id)
		}
		// The agent replays the conversation as updates while it loads;
		// they are history, kept as native events, not a new turn.
		s.mu.Lock()
		s.loading = true
		s.mu.Unlock()
		res, err := call[wire.LoadSessionResponse](ctx, s, wire.AgentMethodSessionLoad, wire.LoadSessionRequest{
			Cwd: s.cfg.Cwd, SessionId: wire.SessionId(id), McpServers: mcp, Meta: s.a.spec.SessionMeta})
		s.mu.Lock()
		s.loading = false
		s.mu.Unlock()
		if err != nil {
			return err
		}
		s.sid, modes, models, options = wire.SessionId(id), res.Modes, res.Models, res.ConfigOptions
	} else {
		res, err := call[wire.NewSessionResponse](ctx, s, wire.AgentMethodSessionNew, wire.NewSessionRequest{
			Cwd: s.cfg.Cwd, McpServers: mcp, Meta: s.a.spec.SessionMeta})
		if err != nil {
			return err
		}
		s.sid, modes, models, options = res.SessionId, res.Modes, res.Models, res.ConfigOptions
	}
	if err := s.host.SetNativeSessionID(ctx, string(s.sid)); err != nil {
		return err
	}
	s.cmu.Lock()
	s.modes, s.models, s.options = modes, models, options
	s.cmu.Unlock()
	mode, explicit := s.cfg.Mode, true
	if mode == "" {
		mode, explicit = s.a.spec.PermissionModes[s.cfg.PermissionMode], false
	}
	if mode != "" {
		if err := s.setMode(ctx, mode); err != nil && explicit {
			return err
		}
	}
	if s.cfg.Model != "" {
		return s.setModel(ctx, s.cfg.Model)
	}
	return nil
}

// Configure switches the session's model and mode between turns, with the
// same requests the start uses.
func (s *session) Configure(ctx context.Context, model, mode string) error {
	if mode != "" {
		if err := s.setMode(ctx, mode); err != nil {
			return err
		}
	}
	if model != "" {
		return s.setModel(ctx, model)
	}
	return nil
}

// Catalog is what the agent offered in session/new (or session/load): its
// models and modes, from the config options of category model and mode
// when it has no list of its own, with the ones in force.
func (s *session) Catalog() agent.Catalog {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var c agent.Catalog
	if s.models != nil {
		for _, m := range s.models.AvailableModels {
			c.Models = append(c.Models, agent.Choice{ID: string(m.ModelId), Name: m.Name, Description: deref(m.Description)})
		}
		c.Model = string(s.models.CurrentModelId)
	}
	if s.modes != nil {
		for _, m := range s.modes.AvailableModes {
			c.Modes = append(c.Modes, agent.Choice{ID: string(m.Id), Name: m.Name, Description: deref(m.Description)})
		}
		c.Mode = string(s.modes.CurrentModeId)
	}
	for _, o := range s.options {
		sel := o.Select
		if sel == nil || sel.Category == nil {
			continue
		}
		list, cur := &c.Models, &c.Model
		switch *sel.Category {
		case wire.SessionConfigOptionCategoryModel:
		case wire.SessionConfigOptionCategoryMode:
			list, cur = &c.Modes, &c.Mode
		default:
			continue
		}
		if len(*list) > 0 {
			continue // the agent's own list comes first
		}
		for _, v := range selectValues(sel) {
			*list = append(*list, agent.Choice{ID: string(v.Value), Name: v.Name, Description: deref(v.Description)})
		}
		*cur = string(sel.CurrentValue)
	}
	return c
}

// selectValues lists a select option's values, grouped or not.
func selectValues(sel *wire.SessionConfigOptionSelect) []wire.SessionConfigSelectOption {
	var out []wire.SessionConfigSelectOption
	if sel.Options.Ungrouped != nil {
		out = append(out, *sel.Options.Ungrouped...)
	}
	if sel.Options.Grouped != nil {
		for _, g := range *sel.Options.Grouped {
			out = append(out, g.Options...)
		}
	}
	return out
}

// noteMode follows a mode the agent switched to itself (e.g. leaving plan
// mode), so that Catalog says the mode in force.
func (s *session) noteMode(params json.RawMessage) {
	var n struct {
		Update struct {
			Kind string `json:"sessionUpdate"`
			Mode string `json:"currentModeId"`
		} `json:"update"`
	}
	if json.Unmarshal(params, &n) != nil || n.Update.Kind != "current_mode_update" || n.Update.Mode == "" {
		return
	}
	s.cmu.Lock()
	if s.modes != nil {
		s.modes.CurrentModeId = wire.SessionModeId(n.Update.Mode)
	}
	s.cmu.Unlock()
}

// setMode switches the session's mode with session/set_mode, or with the
// config option of category "mode" when that is how the agent offers it.
func (s *session) setMode(ctx context.Context, mode string) error {
	s.cmu.Lock()
	modes := s.modes
	s.cmu.Unlock()
	if modes != nil {
		for _, m := range modes.AvailableModes {
			if string(m.Id) == mode {
				if s.currentMode() == m.Id {
					return nil
				}
				if _, err := call[json.RawMessage](ctx, s, wire.AgentMethodSessionSetMode, wire.SetSessionModeRequest{SessionId: s.sid, ModeId: m.Id}); err != nil {
					return err
				}
				s.cmu.Lock()
				s.modes.CurrentModeId = m.Id
				s.cmu.Unlock()
				return nil
			}
		}
	}
	if ok, err := s.setOption(ctx, wire.SessionConfigOptionCategoryMode, mode); ok || err != nil {
		return err
	}
	return fmt.Errorf("the agent offers no mode %q", mode)
}

func (s *session) currentMode() wire.SessionModeId {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.modes.CurrentModeId
}

// setModel selects the model with session/set_model, or with the config
// option of category "model".
func (s *session) setModel(ctx context.Context, model string) error {
	s.cmu.Lock()
	models := s.models
	var cur wire.ModelId
	if models != nil {
		cur = models.CurrentModelId
	}
	s.cmu.Unlock()
	if models != nil {
		for _, m := range models.AvailableModels {
			if string(m.ModelId) == model {
				if cur == m.ModelId {
					return nil
				}
				if _, err := call[json.RawMessage](ctx, s, wire.AgentMethodSessionSetModel, map[string]string{"sessionId": string(s.sid), "modelId": model}); err != nil {
					return err
				}
				s.cmu.Lock()
				s.models.CurrentModelId = m.ModelId
				s.cmu.Unlock()
				return nil
			}
		}
	}
	if ok, err := s.setOption(ctx, wire.SessionConfigOptionCategoryModel, model); ok || err != nil {
		return err
	}
	return fmt.Errorf("the agent offers no model %q", model)
}

// setOption sets the select option of a category to value, if the agent
// offers one with that value.
func (s *session) setOption(ctx context.Context, cat wire.SessionConfigOptionCategory, value string) (bool, error) {
	s.cmu.Lock()
	options := slices.Clone(s.options)
	s.cmu.Unlock()
	for _, o := range options {
		sel := o.Select
		if sel == nil || sel.Category == nil || *sel.Category != cat {
			continue
		}
		if !slices.ContainsFunc(selectValues(sel), func(v wire.SessionConfigSelectOption) bool { return string(v.Value) == value }) {
			continue
		}
		s.cmu.Lock()
		cur := sel.CurrentValue
		s.cmu.Unlock()
		if cur == wire.SessionConfigValueId(value) {
			return true, nil
		}
		if _, err := call[json.RawMessage](ctx, s, wire.AgentMethodSessionSetConfigOption,
			map[string]string{"sessionId": string(s.sid), "configId": string(sel.Id), "value": value}); err != nil {
			return true, err
		}
		s.cmu.Lock()
		sel.CurrentValue = wire.SessionConfigValueId(value) // shared with s.options
		s.cmu.Unlock()
		return true, nil
	}
	return false, nil
}

// emit hands events to the engine; it is called with s.mu held.
func (s *session) emit(evs []event.Event) {
	if !s.started {
		s.early = append(s.early, evs...)
		return
	}
	if len(evs) > 0 {
		// Detached from any request: the events belong to the session.
		_ = s.host.Emit(context.Background(), evs...)
	}
}

// handle serves the agent's requests and notifications.
func (s *session) handle(ctx context.Context, method string, params json.RawMessage) (any, *wire.RequestError) {
	if s.terms != nil {
		if res, rerr, ok := s.terms.handle(ctx, method, params); ok {
			return res, rerr
		}
	}
	switch method {
	case wire.ClientMethodSessionUpdate:
		s.noteMode(params)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.loading || s.turn == nil {
			// Outside a turn there is no turn for items to belong to: what
			// the agent says then (history replayed by session/load,
			// Gemini's "[MODE_UPDATE]" message after set_mode, command
			// lists) is kept as it is.
			var n struct {
				Update json.RawMessage `json:"update"`
			}
			_ = json.Unmarshal(params, &n)
			typ := "session/update"
			if s.loading {
				typ = "session/load/replay"
			}
			s.emit([]event.Event{event.New(event.SourceAgent, &event.Native{NativeType: typ, Payload: validOrNull(n.Update)})})
			return nil, nil
		}
		s.emit(s.tr.Update(params))
		return nil, nil
	case wire.ClientMethodSessionRequestPermission:
		var req wire.RequestPermissionRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, wire.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		return s.permission(ctx, params, req), nil
	case wire.ClientMethodFsReadTextFile:
		if s.fs == nil {
			return nil, wire.NewMethodNotFound(method)
		}
		var req wire.ReadTextFileRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, wire.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		line, limit := 0, 0
		if req.Line != nil {
			line = *req.Line
		}
		if req.Limit != nil {
			limit = *req.Limit
		}
		text, err := s.fs.ReadText(req.Path, line, limit)
		if err != nil {
			return nil, fsError(err)
		}
		return wire.ReadTextFileResponse{Content: text}, nil
	case wire.ClientMethodFsWriteTextFile:
		if s.fs == nil {
			return nil, wire.NewMethodNotFound(method)
		}
		var req wire.WriteTextFileRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, wire.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		if err := s.fs.WriteText(req.Path, req.Content); err != nil {
			return nil, fsError(err)
		}
		return wire.WriteTextFileResponse{}, nil
	}
	return nil, wire.NewMethodNotFound(method)
}

func fsError(err error) *wire.RequestError {
	if errors.Is(err, errOutside) {
		return wire.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return wire.NewInternalError(map[string]any{"error": err.Error()})
}

// autoAllowed says whether the permission mode settles a request without
// asking: accept_edits allows file changes, bypass everything. (Agents
// with a matching mode of their own do not ask in the first place.)
func (s *session) autoAllowed(kind event.PermissionKind) bool {
	switch s.cfg.PermissionMode {
	case "bypass":
		return true
	case "accept_edits":
		return kind == event.PermFileWrite
	}
	return false
}

// permission asks the engine (and so the client) about a tool call and
// answers the agent with the option of the decision's kind.
func (s *session) permission(ctx context.Context, params json.RawMessage, req wire.RequestPermissionRequest) wire.RequestPermissionResponse {
	s.mu.Lock()
	pr, evs := s.tr.Permission(params, req)
	s.emit(evs)
	t := s.turn
	s.mu.Unlock()
	cancelled := wire.RequestPermissionResponse{Outcome: wire.Cancelled()}

	var ans agent.PermissionAnswer
	if s.autoAllowed(pr.Kind) {
		ans = agent.PermissionAnswer{Decision: event.DecisionAllow, By: event.ByPolicy}
	} else {
		// ctx ends when the agent withdraws the request or the process
		// ends; the turn's context when the turn is interrupted.
		if t != nil {
			var stop context.CancelFunc
			ctx, stop = context.WithCancel(ctx)
			defer stop()
			defer context.AfterFunc(t.ctx, stop)()
		}
		var err error
		ans, err = s.host.RequestPermission(ctx, pr)
		if err != nil {
			if t != nil && t.ctx.Err() != nil {
				// ACP: pending requests of a cancelled turn are answered
				// "cancelled".
				return cancelled
			}
			ans = agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon}
		}
	}
	id, ok := ChooseOption(req.Options, ans)
	if ans.Decision != event.DecisionAllow {
		s.mu.Lock()
		s.emit(s.tr.Denied(string(req.ToolCall.ToolCallId)))
		s.mu.Unlock()
	}
	if !ok {
		return cancelled
	}
	return wire.RequestPermissionResponse{Outcome: wire.Selected(id)}
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	end, err := s.BeginTurn()
	if err != nil {
		return agent.Result{}, err
	}
	defer end()
	blocks, err := promptBlocks(in, s.prompt, s.cfg.Cwd)
	if err != nil {
		return agent.Result{}, err
	}
	t := &turn{ctx: ctx}
	s.mu.Lock()
	s.turn = t
	if !s.started {
		s.started = true
		s.emit(s.early)
		s.early = nil
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	type reply struct {
		resp wire.PromptResponse
		err  error
	}
	// The request's own context is not the turn's: cancelling the turn
	// sends session/cancel and still waits for the prompt's answer.
	rctx, stopReq := context.WithCancel(context.Background())
	defer stopReq()
	ch := make(chan reply, 1)
	go func() {
		r, err := wire.Request[wire.PromptResponse](rctx, s.conn, wire.AgentMethodSessionPrompt, wire.PromptRequest{SessionId: s.sid, Prompt: blocks})
		ch <- reply{r, err}
	}()
	var timeout <-chan time.Time
	for {
		select {
		case r := <-ch:
			return s.finish(t, r.resp, r.err)
		case <-s.Exited():
			select {
			case r := <-ch: // it answered just before it exited
				if r.err == nil {
					return s.finish(t, r.resp, nil)
				}
			default:
			}
			s.finishItems(nil)
			return agent.Result{}, s.ExitError()
		case <-ctx.Done():
			if t.cancelled.Swap(true) {
				continue
			}
			_ = s.conn.Notify(context.Background(), wire.AgentMethodSessionCancel, wire.CancelNotification{SessionId: s.sid})
			tm := time.NewTimer(s.a.opts.InterruptTimeout)
			defer tm.Stop()
			timeout = tm.C
			ctx = context.Background() // seen once
		case <-timeout:
			// The agent did not stop: end it, as a user would.
			s.Kill()
			s.finishItems(nil)
			return agent.Result{StopReason: event.StopInterrupted,
				Message: fmt.Sprintf("the agent did not stop within %s of session/cancel and was killed", s.a.opts.InterruptTimeout)}, nil
		}
	}
}

// finish ends a turn with the prompt's answer.
func (s *session) finish(t *turn, resp wire.PromptResponse, err error) (agent.Result, error) {
	if err != nil {
		s.finishItems(nil)
		if ended, exitErr := s.Failed(err, s.conn.Done()); ended {
			return agent.Result{}, exitErr
		}
		if t.cancelled.Load() {
			return agent.Result{StopReason: event.StopInterrupted, Message: err.Error()}, nil
		}
		return agent.Result{}, fmt.Errorf("%s: %w", s.a.spec.Name, promptError(err))
	}
	usage := s.finishItems(&resp)
	stop, msg := StopReason(resp.StopReason, t.cancelled.Load())
	if t.cancelled.Load() {
		stop = event.StopInterrupted
	}
	return agent.Result{StopReason: stop, Usage: usage, Message: msg}, nil
}

func (s *session) finishItems(resp *wire.PromptResponse) *event.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, u := s.tr.Finish(resp)
	s.emit(evs)
	return u
}

// promptError says what a failed prompt's JSON-RPC error holds.
func promptError(err error) error {
	var re *wire.RequestError
	if errors.As(err, &re) && re.Data != nil {
		if b, jerr := json.Marshal(re.Data); jerr == nil {
			msg := re.Message
			if what := upstreamWhat(re.Data); what != "" {
				msg = what + ": " + msg
			}
			return fmt.Errorf("%s: %s", msg, agent.Clip(string(b), 2000))
		}
	}
	return err
}

// upstreamWhat says in plain words which upstream failure an error's data
// names, when it carries codex-acp's codex_error_info: Codex replaces the
// provider's message with its own ("high demand"), which hides that the
// provider failed and how.
func upstreamWhat(data any) string {
	info, ok := asMap(data)["codex_error_info"]
	if !ok {
		return ""
	}
	switch v := info.(type) {
	case string:
		switch v {
		case "internal_server_error", "server_overloaded":
			return "upstream internal error (HTTP 5xx)"
		case "usage_limit_exceeded", "rate_limit_exceeded":
			return "upstream rate limit (HTTP 429)"
		case "unauthorized":
			return "upstream refused the API key (HTTP 401)"
		case "context_window_exceeded":
			return "the model's context window is full"
		}
	case map[string]any:
		// {"http_connection_failed": {"http_status_code": 502}} and the like.
		for kind, detail := range v {
			if code, ok := asMap(detail)["http_status_code"].(float64); ok {
				return fmt.Sprintf("upstream %s (HTTP %d)", strings.ReplaceAll(kind, "_", " "), int(code))
			}
		}
	}
	return ""
}

// promptBlocks converts the turn's input to ACP content blocks, as far as
// the agent's promptCapabilities (pc, from initialize) allow: an image
// with data becomes an image block when the agent declared image; a file
// becomes an embedded resource (text when it is UTF-8 text, else a blob)
// when it declared embeddedContext, else a resource_link to its path in
// the workspace cwd (which the agent reads itself). A part the agent did
// not declare refuses the whole message (agent.ErrUnsupportedContent,
// naming the part), so a static flag that disagrees with the agent is
// never a silent drop. The engine (internal/engine) has already read
// every path part into data, confined to the workspace; a part's path is
// then its name relative to cwd.
func promptBlocks(in agent.Input, pc wire.PromptCapabilities, cwd string) ([]wire.ContentBlock, error) {
	var blocks []wire.ContentBlock
	for i, p := range in.Content {
		refuse := func(what string) error {
			return fmt.Errorf("acp: content[%d]: %w: the agent did not declare %s in its promptCapabilities", i, agent.ErrUnsupportedContent, what)
		}
		uri := p.URI
		if p.Path != "" {
			uri = (&url.URL{Scheme: "file", Path: filepath.Join(cwd, p.Path)}).String()
		}
		switch p.Type {
		case event.PartText:
			if p.Text != "" {
				blocks = append(blocks, wire.TextBlock(p.Text))
			}
		case event.PartImage:
			switch {
			case p.Data == "":
				blocks = append(blocks, wire.ResourceLinkBlock(orDefault(p.Path, uri), uri))
			case !pc.Image:
				return nil, refuse("image")
			default:
				b := wire.ImageBlock(p.Data, orDefault(p.MimeType, "image/png"))
				if uri != "" {
					b.Image.Uri = &uri
				}
				blocks = append(blocks, b)
			}
		case event.PartFile:
			name := orDefault(p.Path, uri)
			switch {
			case p.Data != "" && pc.EmbeddedContext:
				raw, err := base64.StdEncoding.DecodeString(p.Data)
				if err != nil {
					return nil, fmt.Errorf("acp: content[%d]: data is not base64: %w", i, err)
				}
				if uri == "" {
					uri = "attachment:" + url.PathEscape(orDefault(name, fmt.Sprintf("content-%d", i)))
				}
				var mt *string
				if p.MimeType != "" {
					mt = &p.MimeType
				}
				res := wire.EmbeddedResourceResource{BlobResourceContents: &wire.BlobResourceContents{Blob: p.Data, MimeType: mt, Uri: uri}}
				if utf8.Valid(raw) && !bytes.ContainsRune(raw, 0) {
					res = wire.EmbeddedResourceResource{TextResourceContents: &wire.TextResourceContents{Text: string(raw), MimeType: mt, Uri: uri}}
				}
				blocks = append(blocks, wire.ResourceBlock(res))
			case uri != "" && (p.Path != "" || p.Data == ""):
				blocks = append(blocks, wire.ResourceLinkBlock(name, uri))
			default:
				return nil, refuse("embeddedContext (a file with content and no path)")
			}
		}
	}
	if len(blocks) == 0 {
		return nil, errors.New("acp: the message is empty")
	}
	return blocks, nil
}

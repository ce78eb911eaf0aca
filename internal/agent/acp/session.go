package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
	"github.com/agentbox/agentbox/internal/version"
)

// session is one agent process with one ACP session in it: the runtime
// runs the process, the SDK's connection speaks JSON-RPC over its pipes.
type session struct {
	*procrt.Runtime
	a    *adapter
	host agent.Host
	cfg  agent.Config
	conn *sdk.Connection
	fs   *confinedFS // nil when fs/* is not served
	// terms are the agent's terminals (nil when terminal/* is not served).
	terms *terminals
	sid   sdk.SessionId

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
}

type turn struct {
	ctx       context.Context
	cancelled atomic.Bool // session/cancel was sent
}

var (
	_ agent.Session = (*session)(nil)
	_ agent.Exiter  = (*session)(nil)
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
	s.conn = sdk.NewConnection(s.handle, rt.Stdin(), rt.Stdout())
	// The SDK logs protocol trouble through slog; the agent's own
	// complaints are in its stderr tail, which is what we report.
	s.conn.SetLogger(slog.New(slog.DiscardHandler))
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
	v, err := sdk.SendRequest[T](s.conn, ctx, method, params)
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
	caps := sdk.ClientCapabilities{}
	if s.fs != nil {
		caps.Fs = sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}
	}
	caps.Terminal = s.terms != nil
	init, err := call[sdk.InitializeResponse](ctx, s, sdk.AgentMethodInitialize, sdk.InitializeRequest{
		ProtocolVersion:    sdk.ProtocolVersionNumber,
		ClientCapabilities: caps,
		ClientInfo:         &sdk.Implementation{Name: "agentbox", Version: version.String()},
	})
	if err != nil {
		return err
	}
	var (
		modes   *sdk.SessionModeState
		models  *sdk.SessionModelState
		options []sdk.SessionConfigOption
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
		res, err := call[sdk.LoadSessionResponse](ctx, s, sdk.AgentMethodSessionLoad, sdk.LoadSessionRequest{
			Cwd: s.cfg.Cwd, SessionId: sdk.SessionId(id), McpServers: []sdk.McpServer{}})
		s.mu.Lock()
		s.loading = false
		s.mu.Unlock()
		if err != nil {
			return err
		}
		s.sid, modes, models, options = sdk.SessionId(id), res.Modes, res.Models, res.ConfigOptions
	} else {
		res, err := call[sdk.NewSessionResponse](ctx, s, sdk.AgentMethodSessionNew, sdk.NewSessionRequest{
			Cwd: s.cfg.Cwd, McpServers: []sdk.McpServer{}})
		if err != nil {
			return err
		}
		s.sid, modes, models, options = res.SessionId, res.Modes, res.Models, res.ConfigOptions
	}
	if err := s.host.SetNativeSessionID(ctx, string(s.sid)); err != nil {
		return err
	}
	mode, explicit := s.cfg.Mode, true
	if mode == "" {
		mode, explicit = s.a.spec.PermissionModes[s.cfg.PermissionMode], false
	}
	if mode != "" {
		if err := s.setMode(ctx, mode, modes, options); err != nil && explicit {
			return err
		}
	}
	if s.cfg.Model != "" {
		return s.setModel(ctx, s.cfg.Model, models, options)
	}
	return nil
}

// setMode switches the session's mode with session/set_mode, or with the
// config option of category "mode" when that is how the agent offers it.
func (s *session) setMode(ctx context.Context, mode string, modes *sdk.SessionModeState, options []sdk.SessionConfigOption) error {
	if modes != nil {
		for _, m := range modes.AvailableModes {
			if string(m.Id) == mode {
				if modes.CurrentModeId == m.Id {
					return nil
				}
				_, err := call[sdk.SetSessionModeResponse](ctx, s, sdk.AgentMethodSessionSetMode, sdk.SetSessionModeRequest{SessionId: s.sid, ModeId: m.Id})
				return err
			}
		}
	}
	if ok, err := s.setOption(ctx, sdk.SessionConfigOptionCategoryMode, mode, options); ok || err != nil {
		return err
	}
	return fmt.Errorf("the agent offers no mode %q", mode)
}

// setModel selects the model with session/set_model, or with the config
// option of category "model".
func (s *session) setModel(ctx context.Context, model string, models *sdk.SessionModelState, options []sdk.SessionConfigOption) error {
	if models != nil {
		for _, m := range models.AvailableModels {
			if string(m.ModelId) == model {
				if models.CurrentModelId == m.ModelId {
					return nil
				}
				_, err := call[json.RawMessage](ctx, s, sdk.AgentMethodSessionSetModel, map[string]string{"sessionId": string(s.sid), "modelId": model})
				return err
			}
		}
	}
	if ok, err := s.setOption(ctx, sdk.SessionConfigOptionCategoryModel, model, options); ok || err != nil {
		return err
	}
	return fmt.Errorf("the agent offers no model %q", model)
}

// setOption sets the select option of a category to value, if the agent
// offers one with that value.
func (s *session) setOption(ctx context.Context, cat sdk.SessionConfigOptionCategory, value string, options []sdk.SessionConfigOption) (bool, error) {
	for _, o := range options {
		sel := o.Select
		if sel == nil || sel.Category == nil || *sel.Category != cat {
			continue
		}
		var values []sdk.SessionConfigValueId
		if sel.Options.Ungrouped != nil {
			for _, v := range *sel.Options.Ungrouped {
				values = append(values, v.Value)
			}
		}
		if sel.Options.Grouped != nil {
			for _, g := range *sel.Options.Grouped {
				for _, v := range g.Options {
					values = append(values, v.Value)
				}
			}
		}
		if !slices.Contains(values, sdk.SessionConfigValueId(value)) {
			continue
		}
		if sel.CurrentValue == sdk.SessionConfigValueId(value) {
			return true, nil
		}
		_, err := call[json.RawMessage](ctx, s, sdk.AgentMethodSessionSetConfigOption,
			map[string]string{"sessionId": string(s.sid), "configId": string(sel.Id), "value": value})
		return true, err
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
func (s *session) handle(ctx context.Context, method string, params json.RawMessage) (any, *sdk.RequestError) {
	if s.terms != nil {
		if res, rerr, ok := s.terms.handle(ctx, method, params); ok {
			return res, rerr
		}
	}
	switch method {
	case sdk.ClientMethodSessionUpdate:
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
	case sdk.ClientMethodSessionRequestPermission:
		var req sdk.RequestPermissionRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		return s.permission(ctx, params, req), nil
	case sdk.ClientMethodFsReadTextFile:
		if s.fs == nil {
			return nil, sdk.NewMethodNotFound(method)
		}
		var req sdk.ReadTextFileRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
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
		return sdk.ReadTextFileResponse{Content: text}, nil
	case sdk.ClientMethodFsWriteTextFile:
		if s.fs == nil {
			return nil, sdk.NewMethodNotFound(method)
		}
		var req sdk.WriteTextFileRequest
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
		}
		if err := s.fs.WriteText(req.Path, req.Content); err != nil {
			return nil, fsError(err)
		}
		return sdk.WriteTextFileResponse{}, nil
	}
	return nil, sdk.NewMethodNotFound(method)
}

func fsError(err error) *sdk.RequestError {
	if errors.Is(err, errOutside) {
		return sdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	return sdk.NewInternalError(map[string]any{"error": err.Error()})
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
func (s *session) permission(ctx context.Context, params json.RawMessage, req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	s.mu.Lock()
	pr, evs := s.tr.Permission(params, req)
	s.emit(evs)
	t := s.turn
	s.mu.Unlock()
	cancelled := sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}

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
	return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(id)}
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	end, err := s.BeginTurn()
	if err != nil {
		return agent.Result{}, err
	}
	defer end()
	blocks, err := promptBlocks(in)
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
		resp sdk.PromptResponse
		err  error
	}
	// The request's own context is not the turn's: cancelling the turn
	// sends session/cancel and still waits for the prompt's answer.
	rctx, stopReq := context.WithCancel(context.Background())
	defer stopReq()
	ch := make(chan reply, 1)
	go func() {
		r, err := sdk.SendRequest[sdk.PromptResponse](s.conn, rctx, sdk.AgentMethodSessionPrompt, sdk.PromptRequest{SessionId: s.sid, Prompt: blocks})
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
			_ = s.conn.SendNotification(context.Background(), sdk.AgentMethodSessionCancel, sdk.CancelNotification{SessionId: s.sid})
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
func (s *session) finish(t *turn, resp sdk.PromptResponse, err error) (agent.Result, error) {
	if err != nil {
		s.finishItems(nil)
		if exitErr, ended := s.Failed(err, s.conn.Done()); ended {
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

func (s *session) finishItems(resp *sdk.PromptResponse) *event.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, u := s.tr.Finish(resp)
	s.emit(evs)
	return u
}

// promptError says what a failed prompt's JSON-RPC error holds.
func promptError(err error) error {
	var re *sdk.RequestError
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

// promptBlocks converts the turn's input to ACP content blocks.
func promptBlocks(in agent.Input) ([]sdk.ContentBlock, error) {
	var blocks []sdk.ContentBlock
	for _, p := range in.Content {
		switch p.Type {
		case event.PartText:
			if p.Text != "" {
				blocks = append(blocks, sdk.TextBlock(p.Text))
			}
		case event.PartImage:
			if p.Data != "" {
				blocks = append(blocks, sdk.ImageBlock(p.Data, orDefault(p.MimeType, "image/png")))
			} else {
				blocks = append(blocks, sdk.ResourceLinkBlock(orDefault(p.Path, p.URI), orDefault(p.URI, "file://"+p.Path)))
			}
		case event.PartFile:
			blocks = append(blocks, sdk.ResourceLinkBlock(orDefault(p.Path, p.URI), orDefault(p.URI, "file://"+p.Path)))
		}
	}
	if len(blocks) == 0 {
		return nil, errors.New("acp: the message is empty")
	}
	return blocks, nil
}

package claude

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

var errBusy = procrt.ErrBusy

// session is one running CLI process: the runtime runs it, the session
// speaks stream-json to it.
type session struct {
	*procrt.Runtime
	opts Options
	host agent.Host
	cwd  string

	// mapper is used by the reader goroutine only.
	mapper *Mapper

	mu       sync.Mutex
	turn     *turn
	native   string
	requests map[string]context.CancelFunc // pending control requests from the CLI
	// ours are our own control requests waiting for their response.
	ours   map[string]chan controlResponse
	nextID atomic.Int64
	// models are what the CLI's initialize answer listed, model the
	// session's.
	models []agent.Choice
	model  string
}

// turn is the running turn.
type turn struct {
	ctx          context.Context
	result       chan agent.Result
	interrupting atomic.Bool
}

var (
	_ agent.Session    = (*session)(nil)
	_ agent.Exiter     = (*session)(nil)
	_ agent.Configurer = (*session)(nil)
	_ agent.Cataloger  = (*session)(nil)
)

// startSession starts the process and its reader goroutines.
func startSession(opts Options, c command, cfg agent.Config, host agent.Host, nativeID string) (*session, error) {
	m := NewMapper(cfg.Cwd)
	m.Raw = opts.Raw
	m.SetNativeSessionID(nativeID)
	s := &session{
		opts: opts, host: host, cwd: cfg.Cwd, mapper: m, native: nativeID,
		requests: map[string]context.CancelFunc{}, ours: map[string]chan controlResponse{},
	}
	rt, err := procrt.Start(&agent.Proc{Path: c.path, Args: c.args, Env: c.env, Dir: c.dir, Sandbox: cfg.Sandbox}, procrt.Config{
		Name: "claude", Who: "the claude CLI", Short: "the CLI", ErrPrefix: "claude: the CLI", Host: host,
		InterruptTimeout: opts.InterruptTimeout, CloseGrace: opts.CloseGrace, ExitsOnEOF: true,
		OnExit: func() {
			s.mu.Lock()
			for _, cancel := range s.requests {
				cancel()
			}
			s.mu.Unlock()
		},
	})
	if err != nil {
		return nil, err
	}
	s.Runtime = rt
	rt.ServeLines(opts.MaxLine, s.handle)
	return s, nil
}

func (s *session) currentTurn() *turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// handle maps one line and acts on it.
func (s *session) handle(line []byte) {
	t := s.currentTurn()
	s.mapper.Interrupting = t != nil && t.interrupting.Load()
	out := s.mapper.Map(line)
	if len(out.Events) > 0 {
		_ = s.host.Emit(s.Context(), out.Events...)
	}
	if id := out.NativeSessionID; id != "" {
		s.mu.Lock()
		s.native = id
		s.mu.Unlock()
		_ = s.host.SetNativeSessionID(s.Context(), id)
	}
	if out.Control != nil {
		s.control(out.Control, t)
	}
	if out.Result != nil && t != nil {
		select {
		case t.result <- *out.Result:
		default:
		}
	}
}

// control handles the CLI's control messages.
func (s *session) control(env *envelope, t *turn) {
	switch env.Type {
	case "control_response":
		// Our requests: set_model waits for its answer; for interrupts
		// the turn's result is what counts.
		var res controlResponse
		if json.Unmarshal(env.Response, &res) != nil {
			return
		}
		s.mu.Lock()
		ch := s.ours[res.RequestID]
		delete(s.ours, res.RequestID)
		s.mu.Unlock()
		if ch != nil {
			ch <- res
		}
	case "control_cancel_request":
		s.mu.Lock()
		if cancel := s.requests[env.RequestID]; cancel != nil {
			cancel()
		}
		s.mu.Unlock()
	case "control_request":
		var sub struct {
			Subtype string `json:"subtype"`
		}
		_ = json.Unmarshal(env.Request, &sub)
		if sub.Subtype != "can_use_tool" {
			s.respondError(env.RequestID, "agentbox does not handle control requests of subtype "+strconv.Quote(sub.Subtype))
			return
		}
		var req canUseTool
		if err := json.Unmarshal(env.Request, &req); err != nil {
			s.respondError(env.RequestID, "unreadable can_use_tool request: "+err.Error())
			return
		}
		itemID := s.mapper.ToolItemID(req.ToolUseID)
		base := s.Context()
		if t != nil {
			base = t.ctx
		}
		ctx, cancel := context.WithCancel(base)
		stop := context.AfterFunc(s.Context(), cancel)
		s.mu.Lock()
		s.requests[env.RequestID] = cancel
		s.mu.Unlock()
		go func() {
			defer func() {
				stop()
				cancel()
				s.mu.Lock()
				delete(s.requests, env.RequestID)
				s.mu.Unlock()
			}()
			var res permissionResult
			if req.ToolName == "AskUserQuestion" {
				res = s.ask(ctx, &req, itemID)
			} else {
				pr := permissionRequest(&req, itemID, s.cwd, s.readInCwd)
				ans, err := s.host.RequestPermission(ctx, pr)
				if err != nil {
					ans = agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon, Message: "agentbox could not ask for permission: " + err.Error()}
				}
				res = permissionAnswer(&req, ans)
			}
			s.respond(env.RequestID, res)
		}()
	}
}

// ask puts an AskUserQuestion call to the user, one question at a time.
func (s *session) ask(ctx context.Context, req *canUseTool, itemID string) permissionResult {
	qs, err := questions(req.Input, itemID)
	if err != nil {
		return permissionResult{Behavior: "deny", Message: err.Error()}
	}
	var answers []agent.Answer
	for _, q := range qs {
		a, err := s.host.AskQuestion(ctx, q)
		if err != nil || a.Cancelled {
			answers = append(answers, agent.Answer{Cancelled: true})
			break
		}
		answers = append(answers, a)
	}
	return questionAnswer(req.Input, answers)
}

// readInCwd reads a file inside the session's directory (at most 1 MiB),
// for the diff of a permission request.
func (s *session) readInCwd(path string) (string, bool) { return agent.ReadFileIn(s.cwd, path, 1<<20) }

func (s *session) respond(id string, res permissionResult) {
	_ = s.WriteJSON(context.Background(), controlResponseLine{Type: "control_response",
		Response: controlResponse{Subtype: "success", RequestID: id, Response: res}})
}

func (s *session) respondError(id, msg string) {
	_ = s.WriteJSON(context.Background(), controlResponseLine{Type: "control_response",
		Response: controlResponse{Subtype: "error", RequestID: id, Error: msg}})
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	end, err := s.BeginTurn()
	if err != nil {
		return agent.Result{}, err
	}
	defer end()
	s.mu.Lock()
	native := s.native
	t := &turn{ctx: ctx, result: make(chan agent.Result, 1)}
	s.turn = t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	msg, err := userMessageLine(in, native)
	if err != nil {
		return agent.Result{}, err
	}
	if err := s.WriteJSON(ctx, msg); err != nil {
		if ended, exitErr := s.Failed(err, nil); ended {
			return agent.Result{}, exitErr
		}
		if ctx.Err() != nil {
			return agent.Result{StopReason: event.StopInterrupted}, nil
		}
		return agent.Result{}, err
	}
	// An interrupt is a control request; the turn's result ends it.
	return s.Await(ctx, t.result, func(wctx context.Context) error {
		t.interrupting.Store(true)
		id := fmt.Sprintf("agentbox-interrupt-%d", s.nextID.Add(1))
		return s.WriteJSON(wctx, controlRequestLine{Type: "control_request", RequestID: id, Request: map[string]string{"subtype": "interrupt"}})
	})
}

// Configure implements agent.Configurer: the CLI's set_model control
// request, answered before the next turn. Claude Code has no modes here:
// its permission mode is agentbox's permission_mode, given at create (a
// mode switch must not undo the policy's choice of it).
func (s *session) Configure(ctx context.Context, model, mode string) error {
	if mode != "" {
		return errors.New("claude has no modes (its permission_mode is given at create)")
	}
	if model == "" {
		return nil
	}
	if _, err := s.request(ctx, map[string]string{"subtype": "set_model", "model": model}); err != nil {
		return fmt.Errorf("claude: set_model %q: %w", model, err)
	}
	s.mu.Lock()
	s.model = model
	s.mu.Unlock()
	return nil
}

// request sends a control request of ours and waits for its answer; an
// error answer is an error.
func (s *session) request(ctx context.Context, req map[string]string) (controlResponse, error) {
	id := fmt.Sprintf("agentbox-%s-%d", req["subtype"], s.nextID.Add(1))
	ch := make(chan controlResponse, 1)
	s.mu.Lock()
	s.ours[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ours, id)
		s.mu.Unlock()
	}()
	if err := s.WriteJSON(ctx, controlRequestLine{Type: "control_request", RequestID: id, Request: req}); err != nil {
		return controlResponse{}, err
	}
	select {
	case res := <-ch:
		if res.Subtype != "success" {
			return res, errors.New(orDefault(res.Error, "refused"))
		}
		return res, nil
	case <-s.Exited():
		return controlResponse{}, s.ExitError()
	case <-ctx.Done():
		return controlResponse{}, fmt.Errorf("no answer: %w", ctx.Err())
	}
}

// initialize sends the CLI the initialize control request (what its SDKs
// send first) and keeps the models its answer lists. current is the
// session's model ("": the CLI's "default" entry, when it lists one).
func (s *session) initialize(ctx context.Context, current string) error {
	res, err := s.request(ctx, map[string]string{"subtype": "initialize"})
	if err != nil {
		return fmt.Errorf("claude: initialize: %w", err)
	}
	b, err := json.Marshal(res.Response)
	if err != nil {
		return fmt.Errorf("claude: initialize: %w", err)
	}
	list, err := parseModels(b)
	if err != nil {
		return fmt.Errorf("claude: initialize: %w", err)
	}
	if current == "" && slices.ContainsFunc(list, func(c agent.Choice) bool { return c.ID == "default" }) {
		current = "default"
	}
	s.mu.Lock()
	s.models, s.model = list, current
	s.mu.Unlock()
	return nil
}

// maxModels bounds the list kept from the CLI's answer.
const maxModels = 256

// parseModels reads the models of the CLI's initialize answer: each one's
// value (what --model and set_model take: an alias such as "sonnet"), display
// name and description, then the full model names the aliases resolve to
// (which the CLI takes too), each once.
func parseModels(b []byte) ([]agent.Choice, error) {
	var init struct {
		Models []struct {
			Value         string `json:"value"`
			ResolvedModel string `json:"resolvedModel"`
			DisplayName   string `json:"displayName"`
			Description   string `json:"description"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &init); err != nil {
		return nil, err
	}
	var list []agent.Choice
	seen := map[string]bool{}
	add := func(id string, c agent.Choice) {
		id = agent.Clip(id, 200)
		if id == "" || seen[id] || len(list) == maxModels {
			return
		}
		seen[id] = true
		c.ID = id
		list = append(list, c)
	}
	for _, m := range init.Models {
		add(m.Value, agent.Choice{Name: agent.Clip(m.DisplayName, 200), Description: agent.Clip(m.Description, 500)})
	}
	for _, m := range init.Models {
		add(m.ResolvedModel, agent.Choice{Name: agent.Clip(m.ResolvedModel, 200), Description: agent.Clip(m.Description, 500)})
	}
	return list, nil
}

// Catalog implements agent.Cataloger: the models the CLI's initialize
// answer listed, and the session's model.
func (s *session) Catalog() agent.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Claude Code takes any model id its API serves (a dated full name, a
	// model behind ANTHROPIC_BASE_URL), not only those it lists.
	return agent.Catalog{Models: slices.Clone(s.models), Model: s.model, OpenModels: true}
}

// userMessageLine is the stream-json user message for a turn's input.
func userMessageLine(in agent.Input, sessionID string) (userLine, error) {
	var content []any
	for _, p := range in.Content {
		switch p.Type {
		case event.PartText:
			if p.Text != "" {
				content = append(content, map[string]string{"type": "text", "text": p.Text})
			}
		case event.PartImage:
			switch {
			case p.Data != "":
				if _, err := base64.StdEncoding.DecodeString(p.Data); err != nil {
					return userLine{}, fmt.Errorf("claude: image data is not base64: %w", err)
				}
				content = append(content, map[string]any{"type": "image", "source": map[string]string{
					"type": "base64", "media_type": orDefault(p.MimeType, "image/png"), "data": p.Data}})
			case strings.HasPrefix(p.URI, "https://") || strings.HasPrefix(p.URI, "http://"):
				content = append(content, map[string]any{"type": "image", "source": map[string]string{"type": "url", "url": p.URI}})
			default:
				content = append(content, map[string]string{"type": "text", "text": "(attached image: " + orDefault(p.Path, p.URI) + ")"})
			}
		case event.PartFile:
			switch {
			case p.Data != "" && p.MimeType == "application/pdf":
				content = append(content, map[string]any{"type": "document", "source": map[string]string{
					"type": "base64", "media_type": p.MimeType, "data": p.Data}})
			default:
				// Text files as their text; a binary file other than a
				// PDF, or a file by uri, is refused, never a mention.
				text, err := agent.FileText(p)
				if err != nil {
					return userLine{}, fmt.Errorf("claude: %w", err)
				}
				content = append(content, map[string]string{"type": "text", "text": text})
			}
		}
	}
	if len(content) == 0 {
		return userLine{}, errors.New("claude: the message is empty")
	}
	return userLine{Type: "user", Message: userMessage{Role: "user", Content: content}, SessionID: sessionID}, nil
}

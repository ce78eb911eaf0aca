package codex

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

var (
	errBusy   = errors.New("codex: a turn is already running")
	errClosed = errors.New("codex: session closed")
)

// session is one thread on a shared server, or on a server of its own.
type session struct {
	a    *adapter
	srv  *server
	host agent.Host
	pol  policy
	tid  string
	// own: srv is the session's own (sandboxed) server, stopped with it.
	own bool

	// ctx ends when the session has ended.
	ctx    context.Context
	cancel context.CancelFunc

	mmu    sync.Mutex // guards mapper
	mapper *Mapper

	turnMu sync.Mutex // held while a turn runs

	mu      sync.Mutex
	turn    *turn
	closing bool
	ended   bool
	// models are what model/list answered, model the thread's.
	models []agent.Choice
	model  string
	// switchTo is a model Configure chose, sent with the next turn/start
	// (which sets it for that turn and the thread's later ones).
	switchTo string

	done chan struct{}
}

// turn is the running turn.
type turn struct {
	ctx    context.Context
	id     string // native turn id, once known
	idSet  chan struct{}
	result chan agent.Result
}

var (
	_ agent.Session    = (*session)(nil)
	_ agent.Exiter     = (*session)(nil)
	_ agent.Cataloger  = (*session)(nil)
	_ agent.Configurer = (*session)(nil)
)

// startThread starts or resumes the session's thread.
func startThread(ctx context.Context, a *adapter, srv *server, cfg agent.Config, host agent.Host, pol policy) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	m := NewMapper()
	m.Raw = a.opts.Raw
	s := &session{a: a, srv: srv, host: host, pol: pol, ctx: sctx, cancel: cancel, mapper: m, done: make(chan struct{})}
	method := "thread/start"
	if cfg.NativeSessionID != "" {
		method = "thread/resume"
	}
	tctx, tcancel := context.WithTimeout(ctx, a.opts.StartTimeout)
	defer tcancel()
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if err := srv.call(tctx, method, threadParams(cfg, pol), &res); err != nil {
		cancel()
		return nil, fmt.Errorf("codex: %s: %w", method, err)
	}
	if res.Thread.ID == "" {
		cancel()
		return nil, fmt.Errorf("codex: %s returned no thread id", method)
	}
	s.tid = res.Thread.ID
	if !srv.register(s.tid, s) {
		cancel()
		return nil, srv.goneError()
	}
	if err := host.SetNativeSessionID(ctx, s.tid); err != nil {
		srv.unregister(s.tid)
		cancel()
		return nil, fmt.Errorf("codex: %w", err)
	}
	// The list is informative: a server that cannot list its models still
	// runs the session (with the model as given).
	_ = s.loadModels(tctx, cmp.Or(cfg.Model, a.opts.Model))
	return s, nil
}

// loadModels asks the app-server which models it offers (model/list).
func (s *session) loadModels(ctx context.Context, current string) error {
	var res struct {
		Data []struct {
			ID          string `json:"id"`
			Model       string `json:"model"`
			DisplayName string `json:"displayName"`
			Description string `json:"description"`
			IsDefault   bool   `json:"isDefault"`
		} `json:"data"`
	}
	if err := s.srv.call(ctx, "model/list", map[string]any{}, &res); err != nil {
		return fmt.Errorf("codex: model/list: %w", err)
	}
	var list []agent.Choice
	for _, m := range res.Data {
		id := cmp.Or(m.Model, m.ID)
		list = append(list, agent.Choice{ID: id, Name: agent.Clip(m.DisplayName, 200), Description: agent.Clip(m.Description, 500)})
		if current == "" && m.IsDefault {
			current = id
		}
	}
	s.mu.Lock()
	s.models, s.model = list, current
	s.mu.Unlock()
	return nil
}

// Catalog implements agent.Cataloger: the models model/list named.
func (s *session) Catalog() agent.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	// model/list names Codex's known models; its provider (ours, or one
	// of the session's) serves others by name, which Codex sends as given.
	return agent.Catalog{Models: slices.Clone(s.models), Model: s.model, OpenModels: true}
}

// Configure implements agent.Configurer. Codex has no request that only
// sets a thread's model: turn/start's model overrides it for that turn and
// the thread's later ones, so the model is kept and sent with the next
// turn. Codex has no modes.
func (s *session) Configure(_ context.Context, model, mode string) error {
	if mode != "" {
		return errors.New("codex has no modes")
	}
	if model == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.ended {
		return errClosed
	}
	s.switchTo, s.model = model, model
	return nil
}

func (s *session) currentTurn() *turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// notify implements threadHandler: map and emit.
func (s *session) notify(m *message) {
	s.mmu.Lock()
	out := s.mapper.Map(m.Method, m.Params)
	s.mmu.Unlock()
	if len(out.Events) > 0 {
		_ = s.host.Emit(s.ctx, out.Events...)
	}
	t := s.currentTurn()
	if t == nil {
		return
	}
	if out.TurnID != "" {
		s.setTurnID(t, out.TurnID)
	}
	if out.Result != nil {
		select {
		case t.result <- *out.Result:
		default:
		}
	}
}

func (s *session) setTurnID(t *turn, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.id == "" {
		t.id = id
		close(t.idSet)
	}
}

// request implements threadHandler: approvals go to the client, anything
// else gets an error reply.
func (s *session) request(m *message) {
	if !approvalMethods[m.Method] {
		go s.srv.replyError(m.ID, codeMethodNotFound, "agentbox does not handle "+m.Method)
		return
	}
	var p approvalParams
	_ = json.Unmarshal(m.Params, &p)
	native := p.ItemID
	if native == "" {
		native = p.CallID
	}
	s.mmu.Lock()
	item := s.mapper.Item(native)
	s.mmu.Unlock()
	if s.pol.autoAcceptEdits && (m.Method == "item/fileChange/requestApproval" || m.Method == "applyPatchApproval") {
		go func() {
			_ = s.srv.reply(m.ID, approvalResult(m.Method, m.Params, agent.PermissionAnswer{Decision: event.DecisionAllow, By: event.ByPolicy}))
		}()
		return
	}
	base := s.ctx
	if t := s.currentTurn(); t != nil {
		base = t.ctx
	}
	go func() {
		ctx, cancel := context.WithCancel(base)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		ans, err := s.host.RequestPermission(ctx, permissionRequest(m.Method, m.Params, item))
		if err != nil {
			ans = agent.PermissionAnswer{Decision: event.DecisionDeny, By: event.ByDaemon}
		}
		_ = s.srv.reply(m.ID, approvalResult(m.Method, m.Params, ans))
	}()
}

// serverGone implements threadHandler: the session ends; the engine
// records how a turn in flight ended.
func (s *session) serverGone() { s.end() }

// end closes done once.
func (s *session) end() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.mu.Unlock()
	s.cancel()
	close(s.done)
}

// userInput converts a turn's input to Codex's.
func userInput(in agent.Input) ([]map[string]any, error) {
	var out []map[string]any
	for i, p := range in.Content {
		switch p.Type {
		case event.PartText:
			if p.Text != "" {
				out = append(out, map[string]any{"type": "text", "text": p.Text})
			}
		case event.PartImage:
			switch {
			case p.Data != "":
				mt := p.MimeType
				if mt == "" {
					mt = "image/png"
				}
				out = append(out, map[string]any{"type": "image", "url": "data:" + mt + ";base64," + p.Data})
			case strings.HasPrefix(p.URI, "https://") || strings.HasPrefix(p.URI, "http://"):
				out = append(out, map[string]any{"type": "image", "url": p.URI})
			case p.Path != "":
				out = append(out, map[string]any{"type": "localImage", "path": p.Path})
			}
		case event.PartFile:
			text, err := agent.FileText(p)
			if err != nil {
				return nil, fmt.Errorf("codex: content[%d]: %w", i, err)
			}
			out = append(out, map[string]any{"type": "text", "text": text})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("codex: the message is empty")
	}
	return out, nil
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	if !s.turnMu.TryLock() {
		return agent.Result{}, errBusy
	}
	defer s.turnMu.Unlock()
	input, err := userInput(in)
	if err != nil {
		return agent.Result{}, err
	}
	s.mu.Lock()
	if s.closing || s.ended {
		s.mu.Unlock()
		select {
		case <-s.srv.done:
			return agent.Result{}, s.srv.goneError()
		default:
		}
		return agent.Result{}, errClosed
	}
	t := &turn{ctx: ctx, idSet: make(chan struct{}), result: make(chan agent.Result, 1)}
	s.turn = t
	params := map[string]any{"threadId": s.tid, "input": input}
	switchTo := s.switchTo
	if switchTo != "" {
		params["model"] = switchTo
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	var res struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	if err := s.srv.call(ctx, "turn/start", params, &res); err != nil {
		if ctx.Err() != nil && !s.srv.exitedYet() {
			return s.interrupt(t)
		}
		return agent.Result{}, err
	}
	if res.Turn.ID != "" {
		s.setTurnID(t, res.Turn.ID)
	}
	if switchTo != "" {
		// The server took the turn with the new model: the thread keeps it.
		s.mu.Lock()
		if s.switchTo == switchTo {
			s.switchTo = ""
		}
		s.mu.Unlock()
	}
	select {
	case r := <-t.result:
		return r, nil
	case <-s.srv.done:
		select {
		case r := <-t.result:
			return r, nil
		default:
		}
		return agent.Result{}, s.srv.goneError()
	case <-ctx.Done():
		return s.interrupt(t)
	}
}

// interrupt asks the server to stop the turn and waits for it to end. A
// shared server's turn that does not stop is abandoned, not killed.
func (s *session) interrupt(t *turn) (agent.Result, error) {
	select {
	case r := <-t.result:
		return r, nil
	default:
	}
	timer := time.NewTimer(s.a.opts.InterruptTimeout)
	defer timer.Stop()
	select {
	case <-t.idSet:
	case <-timer.C:
		return agent.Result{StopReason: event.StopInterrupted, Message: "the turn had not started when it was interrupted"}, nil
	case <-s.srv.done:
		return agent.Result{StopReason: event.StopInterrupted}, nil
	}
	s.mu.Lock()
	id := t.id
	s.mu.Unlock()
	ictx, cancel := context.WithTimeout(context.Background(), s.a.opts.InterruptTimeout)
	err := s.srv.call(ictx, "turn/interrupt", map[string]any{"threadId": s.tid, "turnId": id}, nil)
	cancel()
	if err == nil {
		select {
		case r := <-t.result:
			r.StopReason = event.StopInterrupted
			return r, nil
		case <-s.srv.done:
		case <-timer.C:
		}
	}
	msg := "the turn did not confirm the interrupt"
	if err != nil {
		msg += ": " + err.Error()
	}
	return agent.Result{StopReason: event.StopInterrupted, Message: msg}, nil
}

// Close implements agent.Session: the thread is dropped; the server stops
// with its last session.
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.closing
	s.closing = true
	s.mu.Unlock()
	if already {
		return nil
	}
	s.srv.unregister(s.tid)
	s.end()
	if s.own {
		s.srv.stop(ctx, s.a.opts.CloseGrace)
	} else {
		s.a.release(ctx, s.srv)
	}
	return ctx.Err()
}

// Done implements agent.Exiter.
func (s *session) Done() <-chan struct{} { return s.done }

// Exit implements agent.Exiter.
func (s *session) Exit() event.SessionEnded {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return event.SessionEnded{Reason: event.EndCompleted, Message: "the codex session was closed"}
	}
	code, desc := s.srv.exit()
	return event.SessionEnded{Reason: event.EndError, ExitCode: &code, StderrTail: s.srv.stderr.String(),
		Message: "the codex app-server " + desc}
}

package pi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// session is one running pi process: the runtime runs it, the session
// speaks pi's RPC mode to it.
type session struct {
	*procrt.Runtime
	opts Options
	host agent.Host
	cwd  string

	// mapper is used by the reader goroutine only (Decline aside).
	mapper *Mapper

	mu        sync.Mutex
	turn      *turn
	nextID    int
	responses map[string]chan *Line // command id → its response

	// models are what get_available_models listed for our provider,
	// model the one in force.
	models []agent.Choice
	model  string
}

// turn is the running turn.
type turn struct {
	ctx    context.Context
	result chan agent.Result
}

var (
	_ agent.Session    = (*session)(nil)
	_ agent.Exiter     = (*session)(nil)
	_ agent.Cataloger  = (*session)(nil)
	_ agent.Configurer = (*session)(nil)
)

// startSession starts pi (on the host or in the session's sandbox) and the
// goroutine reading its output. dir, the private agent directory, is
// removed when pi has exited.
func startSession(opts Options, proc *agent.Proc, cfg agent.Config, host agent.Host, dir string) (*session, error) {
	m := NewMapper(cfg.Cwd)
	m.Raw = opts.Raw
	s := &session{opts: opts, host: host, cwd: cfg.Cwd, mapper: m, responses: map[string]chan *Line{}}
	m.ReadFile = s.readInCwd
	rt, err := procrt.Start(proc, procrt.Config{
		Name: "pi", Who: "pi", Short: "pi", ErrPrefix: "pi", Host: host,
		InterruptTimeout: opts.InterruptTimeout, CloseGrace: opts.CloseGrace, ExitsOnEOF: true,
		OnExit: func() { _ = os.RemoveAll(dir) },
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
	out := s.mapper.Map(line)
	if len(out.Events) > 0 {
		_ = s.host.Emit(s.Context(), out.Events...)
	}
	if r := out.Response; r != nil {
		s.mu.Lock()
		ch := s.responses[r.ID]
		delete(s.responses, r.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if out.Dismiss != "" {
		_ = s.WriteJSON(context.Background(), uiResponse{Type: "extension_ui_response", ID: out.Dismiss, Cancelled: true})
	}
	if p := out.Permission; p != nil {
		s.askPermission(p)
	}
	if out.Result != nil {
		if t := s.currentTurn(); t != nil {
			select {
			case t.result <- *out.Result:
			default:
			}
		}
	}
}

// askPermission puts a tool call to the host and answers the extension.
// It does not block the reader: pi waits for the answer, and other lines
// (an abort's) must still be read meanwhile.
func (s *session) askPermission(p *Permission) {
	base := s.Context()
	if t := s.currentTurn(); t != nil {
		base = t.ctx
	}
	ctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(s.Context(), cancel)
	go func() {
		defer cancel()
		defer stop()
		ans, err := s.host.RequestPermission(ctx, p.Request)
		if err != nil {
			ans = agent.PermissionAnswer{Decision: event.DecisionDeny}
		}
		ok := ans.Decision == event.DecisionAllow
		if !ok {
			s.mapper.Decline(p.ToolCallID)
		}
		_ = s.WriteJSON(context.Background(), uiResponse{Type: "extension_ui_response", ID: p.UIID, Confirmed: &ok})
	}()
}

// readInCwd reads a file inside the session's directory (at most 1 MiB),
// for the diff of an edit.
func (s *session) readInCwd(path string) (string, bool) { return agent.ReadFileIn(s.cwd, path, 1<<20) }

// call sends a command and waits for its response.
func (s *session) call(ctx context.Context, typ string, cmd func(id string) any) (*Line, error) {
	s.mu.Lock()
	s.nextID++
	id := "agentbox-" + strconv.Itoa(s.nextID)
	ch := make(chan *Line, 1)
	s.responses[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.responses, id)
		s.mu.Unlock()
	}()
	if err := s.WriteJSON(ctx, cmd(id)); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Success == nil || !*r.Success {
			return r, fmt.Errorf("pi: %s failed: %s", typ, orDefault(jsonString(r.Error), "no reason given"))
		}
		return r, nil
	case <-s.Exited():
		return nil, s.ExitError()
	case <-ctx.Done():
		return nil, fmt.Errorf("pi: no answer to %s: %w", typ, ctx.Err())
	}
}

// sessionID asks pi for its session id.
func (s *session) sessionID(ctx context.Context) (string, error) {
	r, err := s.call(ctx, "get_state", func(id string) any { return simpleCommand{ID: id, Type: "get_state"} })
	if err != nil {
		return "", err
	}
	var st struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(r.Data, &st); err != nil || st.SessionID == "" {
		return "", fmt.Errorf("pi: get_state named no session id (%s)", agent.Clip(string(r.Data), 200))
	}
	return st.SessionID, nil
}

// loadModels asks pi which models it has (get_available_models) and keeps
// those of our provider, the one a session can use; current is the model
// pi was started with.
func (s *session) loadModels(ctx context.Context, current string) error {
	r, err := s.call(ctx, "get_available_models", func(id string) any { return simpleCommand{ID: id, Type: "get_available_models"} })
	if err != nil {
		return err
	}
	var data struct {
		Models []struct {
			ID       string `json:"id"`
			Name     string `json:"name"`
			Provider string `json:"provider"`
		} `json:"models"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return fmt.Errorf("pi: get_available_models: %w", err)
	}
	var list []agent.Choice
	for _, m := range data.Models {
		if m.Provider == DefaultProvider {
			list = append(list, agent.Choice{ID: m.ID, Name: agent.Clip(m.Name, 200)})
		}
	}
	s.mu.Lock()
	s.models, s.model = list, current
	s.mu.Unlock()
	return nil
}

// noList keeps the session's model without a list.
func (s *session) noList(current string) {
	s.mu.Lock()
	s.models, s.model = nil, current
	s.mu.Unlock()
}

// Catalog implements agent.Cataloger: the models pi listed.
func (s *session) Catalog() agent.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return agent.Catalog{Models: slices.Clone(s.models), Model: s.model}
}

// Configure implements agent.Configurer with pi's set_model; pi has no
// modes.
func (s *session) Configure(ctx context.Context, model, mode string) error {
	if mode != "" {
		return errors.New("pi has no modes")
	}
	if model == "" {
		return nil
	}
	if _, err := s.call(ctx, "set_model", func(id string) any {
		return setModelCommand{ID: id, Type: "set_model", Provider: DefaultProvider, ModelID: model}
	}); err != nil {
		return err
	}
	s.mu.Lock()
	s.model = model
	s.mu.Unlock()
	return nil
}

// Prompt implements agent.Session.
func (s *session) Prompt(ctx context.Context, in agent.Input) (agent.Result, error) {
	end, err := s.BeginTurn()
	if err != nil {
		return agent.Result{}, err
	}
	defer end()
	cmd, err := promptFor(in)
	if err != nil {
		return agent.Result{}, err
	}
	t := &turn{ctx: ctx, result: make(chan agent.Result, 1)}
	s.mu.Lock()
	s.turn = t
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.turn = nil
		s.mu.Unlock()
	}()

	// The prompt's response comes at once (pi accepted it); its events
	// follow, up to agent_end. abort's response comes after agent_end;
	// the turn ends at agent_end.
	abort := func(wctx context.Context) error {
		return s.WriteJSON(wctx, simpleCommand{ID: "agentbox-abort", Type: "abort"})
	}
	if _, err := s.call(ctx, "prompt", func(id string) any { cmd.ID = id; return cmd }); err != nil {
		if ctx.Err() != nil {
			return s.Interrupt(t.result, abort)
		}
		return agent.Result{}, err
	}
	return s.Await(ctx, t.result, abort)
}

// promptFor builds the prompt command of a turn's input.
func promptFor(in agent.Input) (promptCommand, error) {
	cmd := promptCommand{Type: "prompt"}
	var text []string
	for i, p := range in.Content {
		switch p.Type {
		case event.PartText:
			text = append(text, p.Text)
		case event.PartImage:
			if p.Data != "" {
				cmd.Images = append(cmd.Images, promptImage{Type: "image", Data: p.Data, MimeType: orDefault(p.MimeType, "image/png")})
			} else {
				// pi takes an image's bytes only: one by uri would reach
				// the model as a mention, not an image.
				return cmd, fmt.Errorf("pi: content[%d]: %w: pi takes images as data, not by uri", i, agent.ErrUnsupportedContent)
			}
		case event.PartFile:
			t, err := agent.FileText(p)
			if err != nil {
				return cmd, fmt.Errorf("pi: content[%d]: %w", i, err)
			}
			text = append(text, t)
		}
	}
	cmd.Message = strings.Join(text, "\n")
	if strings.TrimSpace(cmd.Message) == "" && len(cmd.Images) == 0 {
		return cmd, errors.New("pi: the message is empty")
	}
	return cmd, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

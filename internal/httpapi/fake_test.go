package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/store"
)

// fakeEngine is a small in-memory Engine that behaves like the real one as
// far as the API can tell: sessions, a gapless event log per session with
// catch-up-then-live subscriptions, turns, and permission/question requests.
type fakeEngine struct {
	mu       sync.Mutex
	agents   []agent.Info
	sessions map[string]*fakeSession
	order    []string // creation order
	wake     chan struct{}
	n        int
	now      time.Time

	// failWith, when set, is returned by every call that can fail.
	failWith error
	lastEnv  map[string]string // the env of the last Resume
}

type fakeSession struct {
	s      engine.Session
	events []event.Event // events[i].Seq == i+1
	reqs   []engine.Request
	// network is the sandbox's; nil runs "on the host".
	network *engine.Network
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		agents: []agent.Info{
			{Name: "mock", Title: "Mock agent", Available: true, Installed: true, Version: "1.0.0",
				Capabilities: agent.Capabilities{Text: true, Deltas: true, Permissions: true, Questions: true, Interrupt: true}},
			{Name: "broken", Title: "Not installed", Available: false, Reason: "not installed"},
		},
		sessions: map[string]*fakeSession{},
		wake:     make(chan struct{}),
		now:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func notFound(what, id string) error { return fmt.Errorf("%s %q: %w", what, id, engine.ErrNotFound) }

// appendLocked appends events to a session's log, assigning seq, and wakes
// subscribers.
func (f *fakeEngine) appendLocked(fs *fakeSession, evs ...event.Event) []event.Event {
	out := make([]event.Event, 0, len(evs))
	for _, e := range evs {
		e.Seq = int64(len(fs.events) + 1)
		e.ID = fmt.Sprintf("evt_%s_%d", fs.s.ID, e.Seq)
		e.SessionID = fs.s.ID
		e.Schema = event.SchemaVersion
		e.Time = f.now.Add(time.Duration(e.Seq) * time.Millisecond)
		fs.events = append(fs.events, e)
		out = append(out, e)
	}
	close(f.wake)
	f.wake = make(chan struct{})
	return out
}

// emit appends events to a session from outside (as an agent would).
func (f *fakeEngine) emit(id string, evs ...event.Event) []event.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appendLocked(f.sessions[id], evs...)
}

// emitN appends n native events.
func (f *fakeEngine) emitN(id string, n int) {
	for i := 0; i < n; i++ {
		f.emit(id, event.New(event.SourceAgent, &event.Native{NativeType: "tick"}))
	}
}

// ask adds a pending permission (kind "permission") or question request.
func (f *fakeEngine) ask(id string, kind engine.RequestKind, rid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	var ev event.Event
	if kind == engine.KindPermission {
		ev = event.New(event.SourceDaemon, &event.PermissionRequested{ID: rid, Title: "run ls"})
	} else {
		ev = event.New(event.SourceDaemon, &event.QuestionRequested{ID: rid, Prompt: "which?"})
	}
	stored := f.appendLocked(fs, ev)[0]
	fs.reqs = append(fs.reqs, engine.Request{ID: rid, Kind: kind, State: engine.StatePending,
		Payload: stored.Data, CreatedAt: stored.Time})
}

func (f *fakeEngine) get(id string) (*fakeSession, error) {
	if f.failWith != nil {
		return nil, f.failWith
	}
	fs, ok := f.sessions[id]
	if !ok {
		return nil, notFound("session", id)
	}
	return fs, nil
}

func (f *fakeEngine) Agents(context.Context) []agent.Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.agents)
}

func (f *fakeEngine) Create(_ context.Context, p engine.CreateParams) (engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return engine.Session{}, f.failWith
	}
	i := slices.IndexFunc(f.agents, func(a agent.Info) bool { return a.Name == p.Agent })
	if i < 0 {
		return engine.Session{}, fmt.Errorf("create: %w %q", agent.ErrUnknown, p.Agent)
	}
	if !f.agents[i].Available {
		return engine.Session{}, fmt.Errorf("create: %s: %w", p.Agent, engine.ErrUnavailable)
	}
	f.n++
	id := fmt.Sprintf("ses_%04d", f.n)
	t := f.now.Add(time.Duration(f.n) * time.Second)
	fs := &fakeSession{s: engine.Session{ID: id, Agent: p.Agent, Model: p.Model, Mode: p.Mode,
		PermissionMode: p.PermissionMode, Cwd: p.Cwd, Metadata: p.Metadata, Status: engine.StatusIdle,
		CreatedAt: t, UpdatedAt: t}}
	f.sessions[id] = fs
	f.order = append(f.order, id)
	f.appendLocked(fs, event.New(event.SourceDaemon, &event.SessionStarted{Agent: p.Agent}))
	return fs.s, nil
}

func (f *fakeEngine) Get(_ context.Context, id string) (engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return engine.Session{}, err
	}
	return fs.s, nil
}

func (f *fakeEngine) List(_ context.Context, o engine.ListOptions) ([]engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return nil, f.failWith
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	var out []engine.Session
	skipping := o.Before != ""
	for i := len(f.order) - 1; i >= 0; i-- {
		s := f.sessions[f.order[i]]
		if s == nil {
			continue
		}
		if skipping {
			skipping = s.s.ID != o.Before
			continue
		}
		if o.Status != "" && s.s.Status != o.Status {
			continue
		}
		if len(out) == o.Limit {
			break
		}
		out = append(out, s.s)
	}
	return out, nil
}

func (f *fakeEngine) Delete(_ context.Context, id string, purge bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return err
	}
	if fs.s.Status.Live() {
		fs.s.Status = engine.StatusEnded
		f.appendLocked(fs, event.New(event.SourceDaemon, &event.SessionEnded{Reason: event.EndTerminated}))
	}
	if purge {
		delete(f.sessions, id)
	}
	return nil
}

func (f *fakeEngine) Send(_ context.Context, id string, content []event.ContentPart) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return "", err
	}
	switch {
	case !fs.s.Status.Live():
		return "", fmt.Errorf("send: %w", engine.ErrNotLive)
	case fs.s.CurrentTurnID != "":
		return "", fmt.Errorf("send: %w", engine.ErrBusy)
	}
	f.n++
	turn := fmt.Sprintf("turn_%04d", f.n)
	fs.s.CurrentTurnID, fs.s.Status = turn, engine.StatusRunning
	start := event.New(event.SourceDaemon, &event.TurnStarted{TurnID: turn})
	start.TurnID = turn
	msg := event.New(event.SourceDaemon, &event.Native{NativeType: "user", Payload: mustJSON(content)})
	msg.TurnID = turn
	f.appendLocked(fs, start, msg)
	return turn, nil
}

func (f *fakeEngine) Resume(_ context.Context, id string, env map[string]string, _ ...agent.MCPServer) (engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return engine.Session{}, err
	}
	if fs.s.Status.Live() {
		return engine.Session{}, fmt.Errorf("resume: %w", engine.ErrLive)
	}
	fs.s.Status, fs.s.EndedAt = engine.StatusIdle, nil
	f.appendLocked(fs, event.New(event.SourceDaemon, &event.SessionStarted{Agent: fs.s.Agent, Resumed: true}))
	f.lastEnv = env
	return fs.s, nil
}

// Pause: the fake's sessions run on this host, so none can pause.
func (f *fakeEngine) Pause(_ context.Context, id string) (engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(id); err != nil {
		return engine.Session{}, err
	}
	return engine.Session{}, fmt.Errorf("%w: session %s runs on this host", engine.ErrNotPausable, id)
}

func (f *fakeEngine) Interrupt(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return "", err
	}
	turn := fs.s.CurrentTurnID
	if turn == "" {
		return "", fmt.Errorf("interrupt: %w", engine.ErrNoTurn)
	}
	fs.s.CurrentTurnID, fs.s.Status = "", engine.StatusIdle
	f.appendLocked(fs, event.New(event.SourceDaemon, &event.TurnCompleted{TurnID: turn, StopReason: event.StopInterrupted}))
	return turn, nil
}

func (f *fakeEngine) resolve(id, rid string, kind engine.RequestKind, payload event.Payload) (event.Event, error) {
	fs, err := f.get(id)
	if err != nil {
		return event.Event{}, err
	}
	i := slices.IndexFunc(fs.reqs, func(r engine.Request) bool { return r.ID == rid && r.Kind == kind })
	if i < 0 {
		return event.Event{}, fmt.Errorf("%s %q: %w", kind, rid, store.ErrNotFound)
	}
	if fs.reqs[i].State == engine.StateResolved {
		return event.Event{}, fmt.Errorf("%s %q: %w", kind, rid, store.ErrAlreadyResolved)
	}
	ev := f.appendLocked(fs, event.New(event.SourceDaemon, payload))[0]
	t := ev.Time
	fs.reqs[i].State, fs.reqs[i].Resolution, fs.reqs[i].ResolvedAt = engine.StateResolved, ev.Data, &t
	return ev, nil
}

func (f *fakeEngine) AnswerPermission(_ context.Context, id, pid string, a agent.PermissionAnswer) (event.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolve(id, pid, engine.KindPermission,
		&event.PermissionResolved{ID: pid, Decision: a.Decision, By: a.By, OptionID: a.OptionID, Message: a.Message})
}

func (f *fakeEngine) AnswerQuestion(_ context.Context, id, qid string, a agent.Answer) (event.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolve(id, qid, engine.KindQuestion,
		&event.QuestionResolved{ID: qid, Answer: a.Text, OptionID: a.OptionID, Cancelled: a.Cancelled, By: event.ByUser})
}

func (f *fakeEngine) Requests(_ context.Context, id string, state engine.RequestState) ([]engine.Request, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return nil, err
	}
	var out []engine.Request
	for _, r := range fs.reqs {
		if state == "" || r.State == state {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeEngine) Events(_ context.Context, id string, after int64, limit int) ([]event.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return nil, err
	}
	if after >= int64(len(fs.events)) {
		return nil, nil
	}
	rest := fs.events[after:]
	if len(rest) > limit {
		rest = rest[:limit]
	}
	return slices.Clone(rest), nil
}

func (f *fakeEngine) Subscribe(ctx context.Context, id string, after int64) (<-chan event.Event, error) {
	f.mu.Lock()
	_, err := f.get(id)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ch := make(chan event.Event)
	go func() {
		defer close(ch)
		last := after
		for {
			f.mu.Lock()
			var pending []event.Event
			if fs := f.sessions[id]; fs != nil && last < int64(len(fs.events)) {
				pending = slices.Clone(fs.events[last:])
			}
			wake := f.wake
			f.mu.Unlock()
			for _, e := range pending {
				select {
				case ch <- e:
					last = e.Seq
				case <-ctx.Done():
					return
				}
			}
			if len(pending) > 0 {
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (f *fakeEngine) Network(_ context.Context, id string) (engine.Network, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return engine.Network{}, f.failWith
	}
	fs, err := f.get(id)
	if err != nil {
		return engine.Network{}, err
	}
	if fs.network == nil {
		return engine.Network{}, fmt.Errorf("%w: session %s", engine.ErrNoSandbox, id)
	}
	return *fs.network, nil
}

func (f *fakeEngine) SetNetwork(ctx context.Context, id string, allow []string) (engine.Network, error) {
	n, err := f.Network(ctx, id)
	if err != nil {
		return n, err
	}
	for _, r := range allow {
		if strings.HasPrefix(r, "10.") {
			return n, fmt.Errorf("%w: network.allow: %q is not covered by the global policy", engine.ErrPolicy, r)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, _ := f.get(id)
	fs.network.Allow = slices.Clone(allow)
	return *fs.network, nil
}

// AgentCatalog answers the fake agents; "mock" offers two models.
func (f *fakeEngine) AgentCatalog(_ context.Context, name string) (agent.Info, *engine.Catalog, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.agents {
		if in.Name != name {
			continue
		}
		if !in.Available {
			return in, nil, nil
		}
		return in, &engine.Catalog{Models: []agent.Choice{{ID: "m1"}, {ID: "m2"}}, DefaultModel: "m1", SessionID: "ses_cat", At: f.now}, nil
	}
	return agent.Info{}, nil, notFound("agent", name)
}

// Configure follows the engine's rules: between turns only, and a model on
// the fake catalog.
func (f *fakeEngine) Configure(_ context.Context, id, model, mode string) (engine.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return engine.Session{}, err
	}
	if fs.s.CurrentTurnID != "" {
		return engine.Session{}, fmt.Errorf("configure: %w", engine.ErrBusy)
	}
	if model != "" && model != "m1" && model != "m2" {
		return engine.Session{}, &engine.ChoiceError{Field: "model", Value: model, Agent: fs.s.Agent, Offered: []string{"m1", "m2"}, From: "session ses_cat"}
	}
	if mode != "" {
		return engine.Session{}, &engine.ChoiceError{Field: "mode", Value: mode, Agent: fs.s.Agent, From: "session ses_cat"}
	}
	fs.s.Model = model
	f.appendLocked(fs, event.New(event.SourceDaemon, &event.SessionConfigured{Model: model}))
	return fs.s, nil
}

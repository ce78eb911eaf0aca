package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// configAgent is testAgent with a model list and a native switch: it
// records the model and mode each start was given and each switch.
type configAgent struct {
	testAgent
	open     bool // its list is open (agent.Catalog.OpenModels)
	mu2      sync.Mutex
	starts   []string // "model/mode" of each Start
	switches []string // "model/mode" of each Configure
}

var configModels = []agent.Choice{{ID: "m1", Name: "Model one"}, {ID: "m2"}}

func (a *configAgent) Info(ctx context.Context) agent.Info {
	in := a.testAgent.Info(ctx)
	in.Capabilities.ModelList, in.Capabilities.ModelSwitch, in.Capabilities.ModeSwitch = true, true, true
	return in
}

func (a *configAgent) Start(ctx context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	s, err := a.testAgent.Start(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	a.mu2.Lock()
	a.starts = append(a.starts, cfg.Model+"/"+cfg.Mode)
	a.mu2.Unlock()
	return &configSession{testSession: s.(*testSession), a: a, open: a.open, model: cmpOr(cfg.Model, "m1"), mode: cmpOr(cfg.Mode, "ask")}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type configSession struct {
	*testSession
	a           *configAgent
	open        bool
	mu          sync.Mutex
	model, mode string
}

func (s *configSession) Catalog() agent.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return agent.Catalog{Models: configModels, Model: s.model, Modes: []agent.Choice{{ID: "ask"}, {ID: "plan"}}, Mode: s.mode, OpenModels: s.open}
}

func (s *configSession) Configure(_ context.Context, model, mode string) error {
	s.a.mu2.Lock()
	s.a.switches = append(s.a.switches, model+"/"+mode)
	s.a.mu2.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.model, s.mode = cmpOr(model, s.model), cmpOr(mode, s.mode)
	return nil
}

func (a *configAgent) calls() (starts, switches []string) {
	a.mu2.Lock()
	defer a.mu2.Unlock()
	return slices.Clone(a.starts), slices.Clone(a.switches)
}

// TestConfigure: the catalog comes from the agent's own announcement; a
// create or switch naming a model or mode not on it fails before the agent
// hears of it; a switch during a turn is busy; between turns it reaches the
// agent, is recorded (session.configured) and stored, and a resume starts
// the agent with it. An agent without the capability refuses.
func TestConfigure(t *testing.T) {
	st := openStore(t, t.TempDir())
	ca := &configAgent{testAgent: testAgent{exit: make(chan struct{})}}
	reg := agent.NewRegistry()
	reg.Register("cfg", ca)
	reg.Register("plain", &testAgent{exit: make(chan struct{})})
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	ctx := t.Context()

	if _, err := m.Configure(ctx, "ses_nope", "m2", ""); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("configure of an unknown session: %v", err)
	}
	if _, _, err := m.AgentCatalog(ctx, "nope"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("catalog of an unknown agent: %v", err)
	}
	if _, c, err := m.AgentCatalog(ctx, "cfg"); err != nil || c != nil {
		t.Fatalf("catalog before any session: %+v %v, want none", c, err)
	}
	// Before the agent has said, a model goes to it as given.
	first, err := m.Create(ctx, engine.CreateParams{Agent: "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	evs := waitFor(t, m, first.ID, 0, event.TypeSessionStarted)
	p, _ := evs[len(evs)-1].Decode()
	if ss := p.(*event.SessionStarted); !slices.Equal(ss.Models, configModels) || ss.Model != "m1" || ss.Mode != "ask" || len(ss.Modes) != 2 {
		t.Fatalf("session.started %+v, want the agent's lists and choices", ss)
	}
	info, c, err := m.AgentCatalog(ctx, "cfg")
	if err != nil || c == nil || !slices.Equal(c.Models, configModels) || c.DefaultModel != "m1" || c.DefaultMode != "ask" || c.SessionID != first.ID || !info.Capabilities.ModelSwitch {
		t.Fatalf("catalog %+v %+v %v", info, c, err)
	}
	// Now the list is known: an unknown model or mode fails before any
	// process starts.
	for _, p := range []engine.CreateParams{{Agent: "cfg", Model: "gpt-nope"}, {Agent: "cfg", Mode: "yolo"}} {
		_, err := m.Create(ctx, p)
		var ce *engine.ChoiceError
		if !errors.As(err, &ce) || (p.Model != "" && ce.Field != "model") || (p.Mode != "" && ce.Field != "mode") {
			t.Fatalf("create %+v: %v, want a ChoiceError naming the field", p, err)
		}
	}
	if starts, _ := ca.calls(); len(starts) != 1 {
		t.Fatalf("the agent started %d times, want once (refused creates start nothing)", len(starts))
	}

	// During a turn: busy, and the agent hears nothing.
	if _, err := m.Send(ctx, first.ID, []event.ContentPart{event.TextPart("block")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Configure(ctx, first.ID, "m2", ""); !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("configure during a turn: %v, want ErrBusy", err)
	}
	if _, err := m.Interrupt(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	evs = waitFor(t, m, first.ID, 0, event.TypeTurnCompleted)
	if _, err := m.Configure(ctx, first.ID, "gpt-nope", ""); !errors.Is(err, engine.ErrUnknownChoice) {
		t.Fatalf("configure to an unknown model: %v", err)
	}
	if _, sw := ca.calls(); len(sw) != 0 {
		t.Fatalf("the agent was asked to switch %v before a valid change between turns", sw)
	}
	got, err := m.Configure(ctx, first.ID, "m2", "plan")
	if err != nil || got.Model != "m2" || got.Mode != "plan" {
		t.Fatalf("configure: %+v %v", got, err)
	}
	if _, sw := ca.calls(); !slices.Equal(sw, []string{"m2/plan"}) {
		t.Fatalf("the agent was asked to switch %v, want [m2/plan]", sw)
	}
	evs = waitFor(t, m, first.ID, evs[len(evs)-1].Seq, event.TypeSessionConfigured)
	p, _ = evs[len(evs)-1].Decode()
	if sc := p.(*event.SessionConfigured); *sc != (event.SessionConfigured{Model: "m2", Mode: "plan", PreviousMode: ""}) {
		t.Fatalf("session.configured %+v", sc)
	}
	if s, _ := m.Get(ctx, first.ID); s.Model != "m2" || s.Mode != "plan" {
		t.Fatalf("stored session %+v", s)
	}
	// The session takes turns after the switch.
	if _, err := m.Send(ctx, first.ID, []event.ContentPart{event.TextPart("hi")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, first.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)

	// An agent without the capability refuses, naming it.
	plain, err := m.Create(ctx, engine.CreateParams{Agent: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Configure(ctx, plain.ID, "m2", ""); !errors.Is(err, engine.ErrSwitchUnsupported) {
		t.Fatalf("configure of an agent without model_switch: %v", err)
	}

	// A resume starts the agent with the stored choice; a change made
	// while it is not live is stored for the resume too.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	m = engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Resume(ctx, first.ID, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, first.ID, false); err != nil {
		t.Fatal(err)
	}
	if s, _ := m.Get(ctx, first.ID); s.Status.Live() {
		t.Fatalf("deleted session is %s", s.Status)
	}
	if got, err := m.Configure(ctx, first.ID, "m1", ""); err != nil || got.Model != "m1" || got.Mode != "plan" {
		t.Fatalf("configure of a session that is not live: %+v %v", got, err)
	}
	if _, err := m.Resume(ctx, first.ID, nil); err != nil {
		t.Fatal(err)
	}
	starts, sw := ca.calls()
	if !slices.Equal(starts, []string{"/", "m2/plan", "m1/plan"}) || len(sw) != 1 {
		t.Fatalf("starts %v switches %v, want the resumes started with the stored choices", starts, sw)
	}
	if s, _ := m.Get(ctx, first.ID); s.Status != engine.StatusIdle {
		t.Fatalf("resumed session is %s", s.Status)
	}
}

// TestConfigureOpenModels: an agent whose list is open (it takes models it
// does not list, e.g. claude a full model name) gets any model at create and
// switch; its modes are still checked against its list.
func TestConfigureOpenModels(t *testing.T) {
	st := openStore(t, t.TempDir())
	ca := &configAgent{testAgent: testAgent{exit: make(chan struct{})}, open: true}
	reg := agent.NewRegistry()
	reg.Register("cfg", ca)
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ctx := t.Context()
	first, err := m.Create(ctx, engine.CreateParams{Agent: "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, first.ID, 0, event.TypeSessionStarted)
	if _, c, err := m.AgentCatalog(ctx, "cfg"); err != nil || c == nil || !c.OpenModels {
		t.Fatalf("catalog %+v %v, want an open list", c, err)
	}
	second, err := m.Create(ctx, engine.CreateParams{Agent: "cfg", Model: "m-unlisted-2026"})
	if err != nil {
		t.Fatalf("create with a model the open list does not name: %v", err)
	}
	waitFor(t, m, second.ID, 0, event.TypeSessionStarted)
	if got, err := m.Configure(ctx, second.ID, "another-unlisted", ""); err != nil || got.Model != "another-unlisted" {
		t.Fatalf("switch to a model the open list does not name: %+v %v", got, err)
	}
	if _, err := m.Create(ctx, engine.CreateParams{Agent: "cfg", Mode: "yolo"}); !errors.Is(err, engine.ErrUnknownChoice) {
		t.Fatalf("create with an unknown mode: %v, want ErrUnknownChoice", err)
	}
	if _, err := m.Configure(ctx, second.ID, "", "yolo"); !errors.Is(err, engine.ErrUnknownChoice) {
		t.Fatalf("switch to an unknown mode: %v, want ErrUnknownChoice", err)
	}
}

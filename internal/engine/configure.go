package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/store"
)

// Catalog is what an agent last said it offers (its model_list
// capability): the lists as a session of it announced them when it
// started or switched, and the defaults it chose for a session that asked
// for none. The daemon never makes one up: an agent no session has
// announced yet has none.
type Catalog struct {
	Models, Modes []agent.Choice
	// DefaultModel and DefaultMode are what the agent picked for a
	// session created without a model (mode); empty when no such session
	// has said.
	DefaultModel, DefaultMode string
	// OpenModels: the agent takes other models than those listed (see
	// agent.Catalog).
	OpenModels bool
	// SessionID is the session whose agent said it, At when.
	SessionID string
	At        time.Time
}

// AgentCatalog returns the agent's Info with the models and modes its
// sessions announced (nil when none has); an unknown agent is an error
// wrapping ErrNotFound (the agent is what the request names).
func (m *Manager) AgentCatalog(ctx context.Context, name string) (agent.Info, *Catalog, error) {
	a, err := m.cfg.Agents.Get(name)
	if err != nil {
		return agent.Info{}, nil, fmt.Errorf("agent %q: %w", name, ErrNotFound)
	}
	info := a.Info(ctx)
	info.Name = name
	if !info.Available {
		return info, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.catalogs[name]
	if !ok {
		return info, nil, nil
	}
	c.Models, c.Modes = slices.Clone(c.Models), slices.Clone(c.Modes)
	return info, &c, nil
}

// learnCatalog records what the agent of session s announced. explicitModel
// and explicitMode say whether the session asked for them, in which case
// the current ones are not the agent's defaults.
func (m *Manager) learnCatalog(name, sessionID string, c agent.Catalog, explicitModel, explicitMode bool) {
	if len(c.Models) == 0 && len(c.Modes) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.catalogs == nil {
		m.catalogs = map[string]Catalog{}
	}
	old := m.catalogs[name]
	nc := Catalog{Models: c.Models, Modes: c.Modes, OpenModels: c.OpenModels, DefaultModel: old.DefaultModel, DefaultMode: old.DefaultMode, SessionID: sessionID, At: time.Now().UTC()}
	if !explicitModel && c.Model != "" {
		nc.DefaultModel = c.Model
	}
	if !explicitMode && c.Mode != "" {
		nc.DefaultMode = c.Mode
	}
	m.catalogs[name] = nc
}

// checkChoice refuses a model or mode that the list the agent announced
// does not have. An empty value or an unknown list passes: the agent
// itself then says no.
func checkChoice(agentName, field, value string, offered []agent.Choice, from string) error {
	if value == "" || len(offered) == 0 {
		return nil
	}
	ids := make([]string, len(offered))
	for i, c := range offered {
		if c.ID == value {
			return nil
		}
		ids[i] = c.ID
	}
	return &ChoiceError{Field: field, Value: value, Agent: agentName, Offered: ids, From: from}
}

// checkCreateChoices refuses, before any process starts, a model or mode
// the agent's announced list does not have.
func (m *Manager) checkCreateChoices(name, model, mode string) error {
	m.mu.Lock()
	c, ok := m.catalogs[name]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	from := "session " + c.SessionID
	if err := checkChoice(name, "model", model, c.Models, from); err != nil && !c.OpenModels {
		return err
	}
	return checkChoice(name, "mode", mode, c.Modes, from)
}

// Configure changes a session's model and/or mode (an empty one stays as
// it is) between turns. A live session's agent takes the change natively
// (agent.Configurer) before it is recorded; a session that is not live
// records it and its resume starts with it. Either way the change is a
// session.configured event and is stored with the session. During a turn,
// or while the session starts, resumes or stops, it fails with ErrBusy.
func (m *Manager) Configure(ctx context.Context, id, model, mode string) (Session, error) {
	s, err := m.configure(ctx, id, model, mode)
	return viewSession(s), err
}

func (m *Manager) configure(ctx context.Context, id, model, mode string) (store.Session, error) {
	if model == "" && mode == "" {
		return store.Session{}, fmt.Errorf("%w: set model, mode or both", ErrInvalid)
	}
	s, err := m.get(ctx, id)
	if err != nil {
		return store.Session{}, err
	}
	a, err := m.cfg.Agents.Get(s.Agent)
	if err != nil {
		return store.Session{}, err
	}
	caps := a.Info(ctx).Capabilities
	if model != "" && model != s.Model && !caps.ModelSwitch {
		return store.Session{}, fmt.Errorf("%w: agent %s cannot switch its model (model_switch is false); create a new session with model %q", ErrSwitchUnsupported, s.Agent, model)
	}
	if mode != "" && mode != s.Mode && !caps.ModeSwitch {
		return store.Session{}, fmt.Errorf("%w: agent %s cannot switch its mode (mode_switch is false); create a new session with mode %q", ErrSwitchUnsupported, s.Agent, mode)
	}

	l := m.lookup(id)
	if l == nil || l.sess == nil {
		return m.configureParked(ctx, s, model, mode)
	}
	// Hold the session between turns: no turn starts and no idle stop
	// begins until the change is made and recorded.
	l.mu.Lock()
	switch {
	case l.stopping:
		l.mu.Unlock()
		return store.Session{}, fmt.Errorf("%w: session %s is being stopped; send the change again", ErrBusy, id)
	case l.turnCancel != nil:
		turn := l.turnID
		l.mu.Unlock()
		return store.Session{}, fmt.Errorf("%w in session %s (turn %s): change the model or mode after its turn.completed, or interrupt it first", ErrBusy, id, turn)
	case l.configuring:
		l.mu.Unlock()
		return store.Session{}, fmt.Errorf("%w: session %s is already changing its model or mode", ErrBusy, id)
	}
	l.configuring = true
	l.busyLocked()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.configuring = false
		l.idleLocked()
		l.mu.Unlock()
	}()

	cf, ok := l.sess.(agent.Configurer)
	if !ok {
		return store.Session{}, fmt.Errorf("%w: agent %s's session takes no model or mode change", ErrSwitchUnsupported, s.Agent)
	}
	if cat, ok := l.sess.(agent.Cataloger); ok {
		c := cat.Catalog()
		from := "session " + id
		if err := checkChoice(s.Agent, "model", model, c.Models, from); err != nil && !c.OpenModels {
			return store.Session{}, err
		}
		if err := checkChoice(s.Agent, "mode", mode, c.Modes, from); err != nil {
			return store.Session{}, err
		}
	}
	// The agent's answer is bounded by the session, not by the request:
	// a change half made when the client goes away is still recorded.
	cctx, cancel := context.WithTimeout(l.ctx, m.cfg.StartTimeout)
	err = cf.Configure(cctx, model, mode)
	cancel()
	if err != nil {
		return store.Session{}, fmt.Errorf("%w: agent %s refused the change: %w", ErrSwitchUnsupported, s.Agent, err)
	}
	ev, s, err := m.recordConfig(context.WithoutCancel(ctx), id, model, mode)
	if err != nil {
		return store.Session{}, err
	}
	if err := l.appendWait(ev); err != nil {
		return store.Session{}, fmt.Errorf("record the change: %w", err)
	}
	return s, nil
}

// configureParked records a change for a session without a live agent;
// its resume starts the agent with it.
func (m *Manager) configureParked(ctx context.Context, s store.Session, model, mode string) (store.Session, error) {
	// Holding the session as "resuming" keeps a resume from starting the
	// agent with the old choice while the new one is being stored.
	m.mu.Lock()
	if m.resuming[s.ID] || m.stopping[s.ID] != nil || m.live[s.ID] != nil || s.Status == store.StatusStarting {
		m.mu.Unlock()
		return store.Session{}, fmt.Errorf("%w: session %s is starting or stopping its agent; send the change again", ErrBusy, s.ID)
	}
	m.resuming[s.ID] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.resuming, s.ID)
		m.mu.Unlock()
	}()
	if err := m.checkCreateChoices(s.Agent, model, mode); err != nil {
		return store.Session{}, err
	}
	ev, s, err := m.recordConfig(ctx, s.ID, model, mode)
	if err != nil {
		return store.Session{}, err
	}
	if _, err := m.st.Append(ctx, s.ID, ev); err != nil {
		return store.Session{}, fmt.Errorf("record the change: %w", err)
	}
	return s, nil
}

// recordConfig stores the new model and mode and returns the event that
// says so.
func (m *Manager) recordConfig(ctx context.Context, id, model, mode string) (event.Event, store.Session, error) {
	var ch event.SessionConfigured
	s, err := m.st.UpdateSession(ctx, id, func(s *store.Session) error {
		ch.PreviousModel, ch.PreviousMode = s.Model, s.Mode
		if model != "" {
			s.Model = model
		}
		if mode != "" {
			s.Mode = mode
		}
		ch.Model, ch.Mode = s.Model, s.Mode
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return event.Event{}, store.Session{}, notFound(err, "session", id)
		}
		return event.Event{}, store.Session{}, err
	}
	return event.New(event.SourceDaemon, &ch), s, nil
}

package stacktest

import (
	"cmp"
	"context"
	"sync"

	"github.com/agentbox/agentbox/internal/agent"
)

// WithModels returns ad announcing models (agent.Cataloger, the first the
// default) and switching them between turns (agent.Configurer), as ACP
// agents do: for tests of the model endpoints with an agent that has no
// models of its own, such as the mock.
func WithModels(ad agent.Adapter, models []agent.Choice) agent.Adapter {
	return modelsAgent{Adapter: ad, models: models}
}

type modelsAgent struct {
	agent.Adapter
	models []agent.Choice
}

func (a modelsAgent) Info(ctx context.Context) agent.Info {
	in := a.Adapter.Info(ctx)
	in.Capabilities.ModelList, in.Capabilities.ModelSwitch = true, true
	return in
}

func (a modelsAgent) Start(ctx context.Context, cfg agent.Config, h agent.Host) (agent.Session, error) {
	s, err := a.Adapter.Start(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	return &modelsSession{Session: s, models: a.models, model: cmp.Or(cfg.Model, a.models[0].ID)}, nil
}

type modelsSession struct {
	agent.Session
	models []agent.Choice
	mu     sync.Mutex
	model  string
}

func (s *modelsSession) Catalog() agent.Catalog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return agent.Catalog{Models: s.models, Model: s.model}
}

func (s *modelsSession) Configure(_ context.Context, model, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if model != "" {
		s.model = model
	}
	return nil
}

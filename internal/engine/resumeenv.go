package engine

import (
	"maps"
	"slices"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/store"
)

// envNames are the names of a create request's env, as the session keeps
// them (store.Session.EnvNames): sorted, never with their values.
func envNames(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(env))
}

// missingEnv is the one check of the env a resume starts session s's agent
// with against the env its client gave at create: the names in
// s.EnvNames that env lacks and the daemon does not hold itself. The daemon
// holds a variable when, without the client's value, it has one anyway: a
// base URL or credential of the agent's model APIs that the daemon's own
// environment configures (agent.ProviderUser: the adapter's defaults), or
// a variable the session's policy declares as a daemon secret (its
// sandbox holds the secret's placeholder whatever env says). A non-empty
// result refuses the resume with an *EnvRequiredError: starting the agent
// without them would only fail its next turn ("Not logged in").
func (m *Manager) missingEnv(s store.Session, a agent.Adapter, env map[string]string) ([]string, error) {
	var missing []string
	for _, k := range s.EnvNames {
		if _, ok := env[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	held := map[string]bool{}
	if p, ok := a.(agent.ProviderUser); ok {
		cfg := agent.Config{SessionID: s.ID, Model: s.Model, Mode: s.Mode, PermissionMode: s.PermissionMode, Cwd: s.Cwd, Env: env}
		for _, pr := range p.Providers(cfg) {
			if pr.BaseURL != "" {
				held[pr.BaseURLEnv] = true
			}
			for _, c := range pr.Credentials {
				if c.Value != "" {
					held[c.Env] = true
				}
			}
		}
	}
	if len(s.Policy) > 0 {
		if d, ok := m.cfg.Sandboxes.(SecretDeclarer); ok {
			declared, err := d.DeclaredSecrets(s.Policy)
			if err != nil {
				return nil, err
			}
			for k, name := range declared {
				if name != "" {
					held[k] = true
				}
			}
		}
	}
	return slices.DeleteFunc(missing, func(k string) bool { return held[k] }), nil
}

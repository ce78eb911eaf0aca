package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/credential"
)

// ErrCredentialInEnv is returned (wrapped) when the env of a sandboxed
// session's create or resume request holds a credential that would reach
// the sandbox. It wraps ErrPolicy, so it is a 422 policy problem.
var ErrCredentialInEnv = fmt.Errorf("%w: a credential in env", ErrPolicy)

// SecretDeclarer is implemented by Sandboxes whose policies can declare
// environment variables as daemon secrets bound to a host (env.secrets).
// A declared variable holds the secret's placeholder inside the sandbox,
// whatever value a request's env gives it. Without it no variable counts
// as declared.
type SecretDeclarer interface {
	// DeclaredSecrets returns the variables policy (a session's stored
	// effective policy) declares, each with its secret's name.
	DeclaredSecrets(policy json.RawMessage) (map[string]string, error)
}

// checkEnv is the one check of a request's env before a session's agent
// starts in a sandbox (policy is not empty), on create and on resume: no
// credential may reach the sandbox. Variables that look like credentials
// (internal/credential) are refused, but for two kinds the sandbox never
// holds as given: the credential variables of the agent's model APIs,
// which the sandbox replaces with placeholders and the egress proxy's
// routes put back (agent.ProviderUser), and the variables the policy
// declares as secrets bound to a host (SecretDeclarer). The error names
// every refused variable and the rule it broke, never a value.
func (m *Manager) checkEnv(agentName string, a agent.Adapter, policy json.RawMessage, cfg agent.Config) error {
	if len(policy) == 0 || len(cfg.Env) == 0 {
		return nil
	}
	routed := map[string]bool{}
	if p, ok := a.(agent.ProviderUser); ok {
		for _, pr := range p.Providers(cfg) {
			for _, c := range pr.Credentials {
				routed[c.Env] = true
			}
		}
	}
	var declared map[string]string
	if d, ok := m.cfg.Sandboxes.(SecretDeclarer); ok {
		var err error
		if declared, err = d.DeclaredSecrets(policy); err != nil {
			return fmt.Errorf("%w: %w", ErrPolicy, err)
		}
	}
	var bad, names []string
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		if routed[k] || declared[k] != "" {
			continue
		}
		if why := credential.Check(k, cfg.Env[k]); why != "" {
			bad = append(bad, fmt.Sprintf("%s (%s)", k, why))
			names = append(names, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	msg := fmt.Sprintf("env %s: the session's agent runs in a sandbox, which no credential may enter. "+
		"Declare each as a secret bound to its host: store its value in the daemon "+
		"(PUT /v1/secrets/NAME with value, host and header, or serve --secrets-file), name it in the policy's env.secrets "+
		"(%s: NAME); the sandbox then holds a placeholder instead of any value env gives it, and the egress proxy "+
		"adds the secret's value to requests for that host only", strings.Join(bad, ", "), names[0])
	if len(routed) > 0 {
		msg += fmt.Sprintf(". The credentials %s takes for its model (%s) need no declaration: the proxy's routes add them",
			agentName, strings.Join(slices.Sorted(maps.Keys(routed)), ", "))
	}
	return fmt.Errorf("%w: %s", ErrCredentialInEnv, msg)
}

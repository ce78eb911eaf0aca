package daemon

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/credential"
	"github.com/agentbox/agentbox/internal/yamldoc"
)

// agentsFile is the file of --agents-file: agents added by configuration.
//
//	acp:
//	  - name: my-agent
//	    title: My agent
//	    command: /usr/local/bin/my-agent   # or a name looked up in PATH
//	    args: [--acp]
//	    env: {MY_AGENT_MODEL: fast}
type agentsFile struct {
	ACP []customACP `json:"acp"`
}

type customACP struct {
	Name    string            `json:"name"`
	Title   string            `json:"title"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	// FS lets the agent read and write files of the session's directory
	// through agentbox (ACP fs/*), for agents that need it.
	FS bool `json:"fs"`
}

// loadAgentsFile reads path and returns its ACP agents; "" means none.
func loadAgentsFile(path string) ([]acp.Custom, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agents file: %w", err)
	}
	var f agentsFile
	if err := yamldoc.Decode(b, &f, yamldoc.Default); err != nil {
		return nil, fmt.Errorf("agents file %s:%w", path, err)
	}
	out := make([]acp.Custom, 0, len(f.ACP))
	for i, a := range f.ACP {
		if a.Name == "" || a.Command == "" {
			return nil, fmt.Errorf("agents file %s: acp[%d]: name and command are required", path, i)
		}
		if err := checkAgentEnv(a.Env); err != nil {
			return nil, fmt.Errorf("agents file %s: acp[%d] (%s): %w", path, i, a.Name, err)
		}
		out = append(out, acp.Custom{Name: a.Name, Title: a.Title, Command: a.Command, Args: a.Args, Env: a.Env, FS: a.FS})
	}
	return out, nil
}

// checkAgentEnv refuses a credential in an agent's configured env, which
// would reach every sandbox the agent runs in: only the model credentials
// the proxy's routes take (placeholders inside, the value added outside)
// may be there. Other secrets belong in the secrets file, named by the
// sessions' policies (env.secrets).
func checkAgentEnv(env map[string]string) error {
	routed := map[string]bool{}
	for _, p := range agent.ProvidersIn(env) {
		for _, c := range p.Credentials {
			routed[c.Env] = true
		}
	}
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if why := credential.Check(k, env[k]); why != "" && !routed[k] {
			bad = append(bad, fmt.Sprintf("%s (%s)", k, why))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("env %s: a credential here would enter the agent's sandboxes; "+
			"put it in --secrets-file bound to its host and name it in the sessions' policy (env.secrets)", strings.Join(bad, ", "))
	}
	return nil
}

// registerCustom adds configured ACP agents to r, their homes under
// dataDir/agents/NAME; a name that is taken is an error, not a panic: it
// comes from the operator's file.
func registerCustom(r *agent.Registry, custom []acp.Custom, dataDir string) error {
	for _, c := range custom {
		if _, err := r.Get(c.Name); err == nil {
			return fmt.Errorf("agents file: agent %q is already defined (built in or twice in the file)", c.Name)
		}
		a, err := acp.FromConfig(c, dataDir, acp.Options{})
		if err != nil {
			return fmt.Errorf("agents file: %w", err)
		}
		r.Register(c.Name, a)
	}
	return nil
}

package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
)

// TestCheckMCPCredentials: a sandboxed session's MCP servers take no
// credential in env or headers (the agent in the sandbox holds their
// configuration); an unsandboxed one may.
func TestCheckMCPCredentials(t *testing.T) {
	const value = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
	sandboxed := json.RawMessage(`"agent-default"`)
	for _, c := range []struct {
		name   string
		policy json.RawMessage
		s      agent.MCPServer
		refuse string
	}{
		{"token env", sandboxed, agent.MCPServer{Name: "a", Env: map[string]string{"GITHUB_TOKEN": value}}, "env GITHUB_TOKEN"},
		{"token value", sandboxed, agent.MCPServer{Name: "a", Env: map[string]string{"X": value}}, "env X"},
		{"authorization", sandboxed, agent.MCPServer{Name: "a", Headers: map[string]string{"authorization": "Bearer x"}}, "header authorization"},
		{"cookie", sandboxed, agent.MCPServer{Name: "a", Headers: map[string]string{"Cookie": "s=1"}}, "header Cookie"},
		{"plain env", sandboxed, agent.MCPServer{Name: "a", Env: map[string]string{"LOG_LEVEL": "debug"}}, ""},
		{"plain header", sandboxed, agent.MCPServer{Name: "a", Headers: map[string]string{"Accept": "text/event-stream"}}, ""},
		{"unsandboxed", nil, agent.MCPServer{Name: "a", Env: map[string]string{"GITHUB_TOKEN": value}}, ""},
	} {
		err := checkMCPCredentials(c.policy, []agent.MCPServer{c.s})
		if c.refuse == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrCredentialInEnv) || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), c.refuse) || strings.Contains(err.Error(), value) {
			t.Errorf("%s: %v, want a refusal naming %q and no value", c.name, err, c.refuse)
		}
	}
}

package opencode

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/agentbox/agentbox/internal/agent"
)

// configContentEnv is the variable OpenCode reads an inline config from,
// merged over its config file.
const configContentEnv = "OPENCODE_CONFIG_CONTENT"

// mcpConfig is the session's MCP servers in OpenCode's own form, the "mcp"
// section of its config: a local server is its command line and
// environment, a remote one (OpenCode tries streamable HTTP, then SSE) its
// URL and headers. OpenCode offers their tools as NAME_TOOL.
func mcpConfig(servers []agent.MCPServer) map[string]any {
	out := map[string]any{}
	for _, s := range servers {
		switch s.Type {
		case agent.MCPStdio:
			t := map[string]any{"type": "local", "command": append([]string{s.Command}, s.Args...), "enabled": true}
			if len(s.Env) > 0 {
				t["environment"] = maps.Clone(s.Env)
			}
			out[s.Name] = t
		case agent.MCPHTTP, agent.MCPSSE:
			t := map[string]any{"type": "remote", "url": s.URL, "enabled": true}
			if len(s.Headers) > 0 {
				t["headers"] = maps.Clone(s.Headers)
			}
			out[s.Name] = t
		}
	}
	return out
}

// withMCP adds the session's MCP servers to the server key k: as the inline
// config of the server's environment (configContentEnv), so that their env
// and header values are never written into the server's home, and so that
// a shared server is shared only by sessions with the same servers.
func withMCP(k serverKey, servers []agent.MCPServer) (serverKey, error) {
	if len(servers) == 0 {
		return k, nil
	}
	env := map[string]string{}
	if k.env != "" {
		if err := json.Unmarshal([]byte(k.env), &env); err != nil {
			return k, fmt.Errorf("opencode: %w", err)
		}
	}
	if _, ok := env[configContentEnv]; ok {
		return k, fmt.Errorf("opencode: the session's env sets %s and the session has MCP servers: give them as mcp_servers only", configContentEnv)
	}
	b, err := json.Marshal(map[string]any{"mcp": mcpConfig(servers)})
	if err != nil {
		return k, fmt.Errorf("opencode: %w", err)
	}
	env[configContentEnv] = string(b)
	if b, err = json.Marshal(env); err != nil {
		return k, fmt.Errorf("opencode: %w", err)
	}
	k.env = string(b)
	return k, nil
}

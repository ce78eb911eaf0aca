package codex

import (
	"fmt"
	"maps"

	"github.com/agentbox/agentbox/internal/agent"
)

// mcpConfig is the session's MCP servers in Codex's own form: the
// [mcp_servers.NAME] tables of config.toml, given as the thread's config
// overrides (thread/start and thread/resume), so that they apply to this
// session's thread only (an unsandboxed app-server is shared) and no value
// is written into CODEX_HOME or onto a command line: they travel over the
// server's stdin. Codex takes stdio and streamable-http servers (CheckMCP
// refuses sse).
//
// Codex offers a server's tools to the model as the namespace
// "mcp__NAME" (or, for models with tool search, behind tool_search).
//
// With permission mode bypass the servers' tools run without asking
// (default_tools_approval_mode "approve"), as every other action does;
// otherwise Codex's own default applies.
func mcpConfig(servers []agent.MCPServer, permissionMode string) map[string]any {
	if len(servers) == 0 {
		return nil
	}
	out := map[string]any{}
	for _, s := range servers {
		var t map[string]any
		switch s.Type {
		case agent.MCPStdio:
			t = map[string]any{"command": s.Command, "args": nonNil(s.Args)}
			if len(s.Env) > 0 {
				t["env"] = maps.Clone(s.Env)
			}
		case agent.MCPHTTP:
			t = map[string]any{"url": s.URL}
			if len(s.Headers) > 0 {
				t["http_headers"] = maps.Clone(s.Headers)
			}
		default:
			continue // CheckMCP refused it at create
		}
		if permissionMode == "bypass" {
			t["default_tools_approval_mode"] = "approve"
		}
		out[s.Name] = t
	}
	return map[string]any{"mcp_servers": out}
}

// CheckMCP implements agent.MCPChecker: Codex has no sse transport.
func (a *adapter) CheckMCP(servers []agent.MCPServer) error {
	for _, s := range servers {
		if s.Type != agent.MCPStdio && s.Type != agent.MCPHTTP {
			return fmt.Errorf("MCP server %s: codex takes stdio and http (streamable HTTP) servers, not %s", s.Name, s.Type)
		}
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

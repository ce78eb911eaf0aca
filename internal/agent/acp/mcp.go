package acp

import (
	"fmt"
	"maps"
	"slices"

	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
)

// mcpServers is the session's MCP servers as the mcpServers parameter of
// session/new and session/load: the protocol's own field. Values go over
// the agent's stdin, never on a command line or disk.
func mcpServers(servers []agent.MCPServer) ([]wire.McpServer, error) {
	out := []wire.McpServer{}
	for _, s := range servers {
		switch s.Type {
		case agent.MCPStdio:
			env := []wire.EnvVariable{}
			for _, k := range slices.Sorted(maps.Keys(s.Env)) {
				env = append(env, wire.EnvVariable{Name: k, Value: s.Env[k]})
			}
			args := s.Args
			if args == nil {
				args = []string{}
			}
			out = append(out, wire.McpServer{Stdio: &wire.McpServerStdio{Name: s.Name, Command: s.Command, Args: args, Env: env}})
		case agent.MCPHTTP:
			out = append(out, wire.McpServer{Http: &wire.McpServerHttpInline{Type: "http", Name: s.Name, Url: s.URL, Headers: headers(s.Headers)}})
		case agent.MCPSSE:
			out = append(out, wire.McpServer{Sse: &wire.McpServerSseInline{Type: "sse", Name: s.Name, Url: s.URL, Headers: headers(s.Headers)}})
		default:
			return nil, fmt.Errorf("MCP server %s: unknown type %q", s.Name, s.Type)
		}
	}
	return out, nil
}

func headers(h map[string]string) []wire.HttpHeader {
	out := []wire.HttpHeader{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, wire.HttpHeader{Name: k, Value: h[k]})
	}
	return out
}

// checkMCPTransports refuses servers whose transport the agent does not
// declare in its initialize answer (stdio every agent must take).
func checkMCPTransports(servers []agent.MCPServer, caps wire.McpCapabilities) error {
	for _, s := range servers {
		if s.Type == agent.MCPHTTP && !caps.Http || s.Type == agent.MCPSSE && !caps.Sse {
			return fmt.Errorf("MCP server %s: the agent does not take %s MCP servers (its mcpCapabilities)", s.Name, s.Type)
		}
	}
	return nil
}

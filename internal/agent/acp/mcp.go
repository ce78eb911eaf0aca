package acp

import (
	"fmt"
	"maps"
	"slices"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/internal/agent"
)

// mcpServers is the session's MCP servers as the mcpServers parameter of
// session/new and session/load: the protocol's own field. Values go over
// the agent's stdin, never on a command line or disk.
func mcpServers(servers []agent.MCPServer) ([]sdk.McpServer, error) {
	out := []sdk.McpServer{}
	for _, s := range servers {
		switch s.Type {
		case agent.MCPStdio:
			env := []sdk.EnvVariable{}
			for _, k := range slices.Sorted(maps.Keys(s.Env)) {
				env = append(env, sdk.EnvVariable{Name: k, Value: s.Env[k]})
			}
			args := s.Args
			if args == nil {
				args = []string{}
			}
			out = append(out, sdk.McpServer{Stdio: &sdk.McpServerStdio{Name: s.Name, Command: s.Command, Args: args, Env: env}})
		case agent.MCPHTTP:
			out = append(out, sdk.McpServer{Http: &sdk.McpServerHttpInline{Type: "http", Name: s.Name, Url: s.URL, Headers: headers(s.Headers)}})
		case agent.MCPSSE:
			out = append(out, sdk.McpServer{Sse: &sdk.McpServerSseInline{Type: "sse", Name: s.Name, Url: s.URL, Headers: headers(s.Headers)}})
		default:
			return nil, fmt.Errorf("MCP server %s: unknown type %q", s.Name, s.Type)
		}
	}
	return out, nil
}

func headers(h map[string]string) []sdk.HttpHeader {
	out := []sdk.HttpHeader{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, sdk.HttpHeader{Name: k, Value: h[k]})
	}
	return out
}

// checkMCPTransports refuses servers whose transport the agent does not
// declare in its initialize answer (stdio every agent must take).
func checkMCPTransports(servers []agent.MCPServer, caps sdk.McpCapabilities) error {
	for _, s := range servers {
		if s.Type == agent.MCPHTTP && !caps.Http || s.Type == agent.MCPSSE && !caps.Sse {
			return fmt.Errorf("MCP server %s: the agent does not take %s MCP servers (its mcpCapabilities)", s.Name, s.Type)
		}
	}
	return nil
}

package acp

import (
	"encoding/json"
	"testing"

	wire "github.com/agentbox/agentbox/internal/acpwire"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/golden"
)

// TestMCPServersGolden: the mcpServers parameter of session/new for every
// transport, as the protocol defines it.
func TestMCPServersGolden(t *testing.T) {
	servers := []agent.MCPServer{
		{Name: "docs", Type: agent.MCPStdio, Command: "/usr/bin/docs-mcp", Args: []string{"--root", "/w"}, Env: map[string]string{"TOKEN": "t", "A": "b"}},
		{Name: "remote", Type: agent.MCPHTTP, URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer x"}},
		{Name: "events", Type: agent.MCPSSE, URL: "http://127.0.0.1:9/sse"},
	}
	got, err := mcpServers(servers)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(wire.NewSessionRequest{Cwd: "/w", McpServers: got}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/mcp-session-new.golden", append(b, '\n'))
	// An agent that does not declare http refuses an http server.
	if err := checkMCPTransports(servers, wire.McpCapabilities{}); err == nil {
		t.Error("an http MCP server was accepted by an agent without mcpCapabilities.http")
	}
	if err := checkMCPTransports(servers[:1], wire.McpCapabilities{}); err != nil {
		t.Errorf("stdio refused: %v", err)
	}
}

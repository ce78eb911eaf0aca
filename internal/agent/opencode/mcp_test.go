package opencode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// TestMCPConfigGolden: the session's MCP servers as the inline config
// (OPENCODE_CONFIG_CONTENT) of the server's environment, in the server key.
func TestMCPConfigGolden(t *testing.T) {
	servers := []agent.MCPServer{
		{Name: "docs", Type: agent.MCPStdio, Command: "/usr/bin/docs-mcp", Args: []string{"--root", "/w"}, Env: map[string]string{"TOKEN": "t"}},
		{Name: "remote", Type: agent.MCPHTTP, URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer x"}},
		{Name: "events", Type: agent.MCPSSE, URL: "http://127.0.0.1:9/sse"},
	}
	k, err := withMCP(serverKey{env: `{"FOO":"bar"}`}, servers)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(k.env), &env); err != nil {
		t.Fatal(err)
	}
	if env["FOO"] != "bar" {
		t.Errorf("the session's env was lost: %v", env)
	}
	var conf any
	if err := json.Unmarshal([]byte(env[configContentEnv]), &conf); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	agenttest.Golden(t, "testdata/mcp-config.golden", append(b, '\n'), *update)
	// Two sessions with other servers never share a server.
	k2, _ := withMCP(serverKey{env: `{"FOO":"bar"}`}, servers[:1])
	if k2 == k {
		t.Error("sessions with different MCP servers have one server key")
	}
	if _, err := withMCP(serverKey{env: `{"OPENCODE_CONFIG_CONTENT":"{}"}`}, servers); err == nil || !strings.Contains(err.Error(), configContentEnv) {
		t.Errorf("env with %s and MCP servers: %v", configContentEnv, err)
	}
}

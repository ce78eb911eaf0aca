package codex

import (
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// TestMCPThreadConfigGolden: the session's MCP servers as the thread's
// config overrides (config.toml's [mcp_servers.NAME] tables), for bypass
// (tools approved) and default (Codex asks).
func TestMCPThreadConfigGolden(t *testing.T) {
	servers := []agent.MCPServer{
		{Name: "docs", Type: agent.MCPStdio, Command: "/usr/bin/docs-mcp", Args: []string{"--root", "/w"}, Env: map[string]string{"TOKEN": "t"}},
		{Name: "remote", Type: agent.MCPHTTP, URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer x"}},
	}
	got := map[string]any{}
	for _, mode := range []string{"bypass", "default"} {
		got[mode] = threadParams(agent.Config{Cwd: "/w", PermissionMode: mode, MCPServers: servers}, policies[mode])
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	agenttest.Golden(t, "testdata/mcp-thread-config.golden", append(b, '\n'), *update)
	// Every thread leaves its workspace untrusted: no project config layer.
	conf, _ := threadParams(agent.Config{Cwd: "/w"}, policies[""])["config"].(map[string]any)
	if conf["projects"] == nil || len(conf) != 1 {
		t.Errorf("config overrides without MCP servers or base URL: %v", conf)
	}
}

func TestCheckMCPRefusesSSE(t *testing.T) {
	a := &adapter{}
	if err := a.CheckMCP([]agent.MCPServer{{Name: "e", Type: agent.MCPSSE, URL: "http://127.0.0.1:1/"}}); err == nil {
		t.Error("an sse server was accepted")
	}
	if err := a.CheckMCP([]agent.MCPServer{{Name: "h", Type: agent.MCPHTTP, URL: "http://127.0.0.1:1/"}}); err != nil {
		t.Errorf("http refused: %v", err)
	}
}

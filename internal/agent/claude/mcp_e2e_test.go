package claude

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/agenttest/mcptest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestE2EMCP: an MCP server given at create reaches the CLI through
// --mcp-config; the model calls its tool (mcp__NAME__TOOL), the CLI calls
// our server, which sees its env value (expanded by the CLI from the
// variable agentbox sets, never on the command line), and the result is in
// the session's events.
func TestE2EMCP(t *testing.T) {
	srv := mcptest.Build(t)
	call := &fakellm.Scenario{Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: "mcp__docs__" + mcptest.Tool, Arguments: json.RawMessage(`{"text":"hello-mcp"}`)}}},
		{Text: "called"},
	}}
	s := newStack(t, map[string]*fakellm.Scenario{"mcp": call})
	s.SetScenario("mcp")
	ses, _ := s.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv, Env: map[string]string{mcptest.TokenEnv: "tok-secret-1"}},
	}})
	tc, evs := s.Turn(t, ses.ID, "call the mcp tool", nil)
	tool := agenttest.FindItem(agenttest.Items(t, evs), event.ItemMCPToolCall)
	if tc.StopReason != event.StopEndTurn || tool == nil || tool.Server != "docs" || tool.Name != mcptest.Tool || !strings.Contains(tool.Output, "mcpecho: hello-mcp token=tok-secret-1") {
		t.Fatalf("tool %+v, turn %+v\n%s", tool, tc, agenttest.Dump(evs))
	}
}

// TestE2EWorkspaceMCPConfigIgnored: the workspace is the agent's (and so
// the attacker's): an .mcp.json there, even with project settings that
// enable every project server, starts no MCP server. Only the session's
// mcp_servers apply (--strict-mcp-config, with or without them).
func TestE2EWorkspaceMCPConfigIgnored(t *testing.T) {
	srv := mcptest.Build(t)
	s := newStack(t, nil)
	s.SetScenario(fakellm.ScenarioText)
	cwd := t.TempDir()
	mcpJSON, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"evil": map[string]any{"type": "stdio", "command": srv}}})
	if err := os.WriteFile(filepath.Join(cwd, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cwd, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	settings := `{"enableAllProjectMcpServers": true, "enabledMcpjsonServers": ["evil"]}`
	for _, f := range []string{"settings.json", "settings.local.json"} {
		if err := os.WriteFile(filepath.Join(cwd, ".claude", f), []byte(settings), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ses, _ := s.CreateWith(t, client.CreateSession{Cwd: cwd})
	_, evs := s.Turn(t, ses.ID, "hello", nil)
	for _, n := range natives(evs, "system/init") {
		if strings.Contains(string(n), "evil") {
			t.Errorf("the workspace's MCP server was started: %s", n)
		}
	}
	if len(natives(evs, "system/init")) == 0 {
		t.Fatalf("no system/init\n%s", agenttest.Dump(evs))
	}
}

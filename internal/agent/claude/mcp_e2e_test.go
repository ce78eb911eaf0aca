package claude

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/agent/agenttest/mcptest"
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

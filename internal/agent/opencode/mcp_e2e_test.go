package opencode

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

// TestE2EMCP: an MCP server given at create reaches `opencode serve` as
// the mcp section of its inline config; the model calls its tool
// (NAME_TOOL), OpenCode calls our server (which sees its env value), and
// the result is in the session's events.
func TestE2EMCP(t *testing.T) {
	srv := mcptest.Build(t)
	s := newStackWith(t, map[string]*fakellm.Scenario{"mcp": {Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: "docs_" + mcptest.Tool, Arguments: json.RawMessage(`{"text":"hello-opencode"}`)}}},
		{Text: "called"},
	}}})
	s.SetScenario("mcp")
	ses, _ := s.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv, Env: map[string]string{mcptest.TokenEnv: "tok-opencode-4"}},
	}})
	tc, evs := s.Turn(t, ses.ID, "call the mcp tool", nil)
	var out string
	for _, it := range agenttest.Items(t, evs) {
		if it.Kind == event.ItemToolCall || it.Kind == event.ItemMCPToolCall {
			out += it.Output
		}
	}
	if tc.StopReason != event.StopEndTurn || !strings.Contains(out, "mcpecho: hello-opencode token=tok-opencode-4") {
		for _, r := range s.LLM.Requests() {
			t.Logf("request %d: %s", r.Seq, r.Reply)
		}
		t.Fatalf("tool output %q, turn %+v\n%s", out, tc, agenttest.Dump(evs))
	}
}

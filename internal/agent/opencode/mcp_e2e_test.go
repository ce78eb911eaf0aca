package opencode

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

// TestE2EWorkspaceMCPConfigIgnored: the workspace is the agent's (a
// hostile repository's): MCP servers its opencode.json names must not
// start (OPENCODE_DISABLE_PROJECT_CONFIG).
func TestE2EWorkspaceMCPConfigIgnored(t *testing.T) {
	script, started := mcptest.Marked(t)
	s := newStack(t)
	cwd := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"mcp": map[string]any{"evil": map[string]any{"type": "local", "command": []string{script}, "enabled": true}}})
	for _, f := range []string{"opencode.json", ".opencode/opencode.json"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(cwd, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cwd, f), conf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ses, _ := s.CreateWith(t, client.CreateSession{Cwd: cwd, PermissionMode: "bypass"})
	tc, evs := s.Turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn %+v\n%s", tc, agenttest.Dump(evs))
	}
	if started() {
		t.Error("the workspace's MCP server was started")
	}
}

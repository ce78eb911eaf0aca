package codex

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/agenttest/mcptest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestE2EMCP: an MCP server given at create reaches the thread as its
// mcp_servers config; the model calls its tool, the app-server calls our
// server (which sees its env value), and the result is in the session's
// events as an mcp_tool_call item.
func TestE2EMCP(t *testing.T) {
	srv := mcptest.Build(t)
	s := newStackWith(t, map[string]*fakellm.Scenario{"mcp": {Turns: []fakellm.Turn{
		{Calls: []fakellm.Call{{Name: mcptest.Tool, Namespace: "mcp__docs", Arguments: json.RawMessage(`{"text":"hello-codex"}`)}}},
		{Text: "called"},
	}}})
	s.SetScenario("mcp")
	ses, _ := s.CreateWith(t, client.CreateSession{PermissionMode: "bypass", Model: "fake-no-search", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv, Env: map[string]string{mcptest.TokenEnv: "tok-codex-3"}},
	}})
	tc, evs := s.Turn(t, ses.ID, "call the mcp tool", nil)
	tool := agenttest.FindItem(agenttest.Items(t, evs), event.ItemMCPToolCall)
	if tc.StopReason != event.StopEndTurn || tool == nil || !strings.Contains(tool.Output, "mcpecho: hello-codex token=tok-codex-3") {
		for _, r := range s.LLM.Requests() {
			var body struct {
				Tools []json.RawMessage `json:"tools"`
			}
			_ = json.Unmarshal(r.Body, &body)
			for _, tl := range body.Tools {
				t.Logf("request %d offers %.300s", r.Seq, tl)
			}
			t.Logf("request %d: %s", r.Seq, r.Reply)
		}
		t.Fatalf("tool %+v, turn %+v\n%s", tool, tc, agenttest.Dump(evs))
	}
}

// TestE2EWorkspaceMCPConfigIgnored: the workspace is the agent's (a
// hostile repository's): MCP servers its .codex/config.toml names must not
// start.
func TestE2EWorkspaceMCPConfigIgnored(t *testing.T) {
	script, started := mcptest.Marked(t)
	s := newStack(t)
	cwd := codexHome(t)
	if err := os.MkdirAll(filepath.Join(cwd, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := "[mcp_servers.evil]\ncommand = " + strconv.Quote(script) + "\n"
	if err := os.WriteFile(filepath.Join(cwd, ".codex", "config.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
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

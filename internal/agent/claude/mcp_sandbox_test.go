package claude_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/agenttest/mcptest"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestSandboxedMCPServerRunsInTheSandbox: a stdio MCP server of a
// sandboxed session is started by the agent, inside the session's
// sandbox: it sees the sandbox's pid namespace, not the host's, is in the
// sandbox's cgroup, and the file it writes reaches the session's
// workspace (through the sandbox's checked commit).
func TestSandboxedMCPServerRunsInTheSandbox(t *testing.T) {
	agenttest.RequireInstalled(t, claude.Name)
	h := &daemontest.Host{}
	if why := h.Probe(t.Context()); why != "" {
		t.Skipf("this host cannot build sandboxes: %s", why)
	}
	// The command must be visible in the sandbox's view (its /tmp is its own).
	srv := mcptest.BuildVisible(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: claude.Name,
		Host: h,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return claude.New(claude.Options{Binary: install.Binary(claude.Name), BaseURL: llm.URL(""), APIKey: llm.Key(), HomeDir: t.TempDir()})
		},
		Scenarios: map[string]*fakellm.Scenario{"mcp": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Name: "mcp__docs__" + mcptest.Tool, Arguments: json.RawMessage(`{"text":"in-sandbox","write":true}`)}}},
			{Text: "called"},
		}}},
	})
	st.SetScenario("mcp")
	ses, cwd := st.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv},
	}})
	tc, evs := daemontest.Turn(t, st.C, ses.ID, "call the mcp tool", true)
	tool := agenttest.FindItem(agenttest.Items(t, evs), event.ItemMCPToolCall)
	if tc.StopReason != event.StopEndTurn || tool == nil || !strings.Contains(tool.Output, "mcpecho: in-sandbox") {
		t.Fatalf("tool %+v, turn %+v\n%s", tool, tc, agenttest.Dump(evs))
	}
	hostNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tool.Output, "pidns="+hostNS) {
		t.Errorf("the MCP server ran in the host's pid namespace %s: %s", hostNS, tool.Output)
	}
	if !strings.Contains(tool.Output, "/agentbox/agentbox-") {
		t.Errorf("the MCP server is not in the session's cgroup: %s", tool.Output)
	}
	b, err := os.ReadFile(filepath.Join(cwd, "mcpecho.txt"))
	if err != nil || !strings.Contains(string(b), "mcpecho: in-sandbox") {
		t.Errorf("mcpecho.txt in the workspace: %q, %v", b, err)
	}
	t.Logf("MCP server: %s", tool.Output)
}

package acp

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/agenttest/mcptest"
)

// writeWorkspaceFile writes rel under cwd, making its directories.
func writeWorkspaceFile(t *testing.T, cwd, rel, content string) {
	t.Helper()
	p := filepath.Join(cwd, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestE2EWorkspaceMCPConfigIgnoredACP: the workspace is the agent's (a
// hostile repository's): MCP servers its project configuration names must
// not start, for the ACP agents whose CLIs read a project layer
// (codex-acp's .codex/config.toml; opencode-acp's opencode.json and
// .opencode/). claude-code-acp and gemini have tests of their own.
func TestE2EWorkspaceMCPConfigIgnoredACP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cli   string // the CLI's name in the agent cache
		files func(script string) map[string]string
		new   func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter
		cwd   func(t *testing.T) string
	}{
		{
			name: NameCodex, cli: NameCodex,
			files: func(script string) map[string]string {
				return map[string]string{".codex/config.toml": "[mcp_servers.evil]\ncommand = " + strconv.Quote(script) + "\n"}
			},
			new: func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
				return Codex(codexConfigFor(bin, codexDataDir(t), llm))
			},
			// Codex refuses to work in a directory under /tmp.
			cwd: func(t *testing.T) string { return codexDataDir(t) },
		},
		{
			name: NameOpenCode, cli: "opencode",
			files: func(script string) map[string]string {
				mcp := `{"mcp": {"evil": {"type": "local", "command": [` + strconv.Quote(script) + `], "enabled": true}}}`
				return map[string]string{"opencode.json": mcp, ".opencode/opencode.json": mcp}
			},
			new: func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
				return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key()})
			},
			cwd: func(t *testing.T) string { return t.TempDir() },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := installed(t, tc.cli)
			script, started := mcptest.Marked(t)
			st := agenttest.NewStack(t, agenttest.StackOptions{
				Name: tc.name,
				New:  func(t testing.TB, llm agenttest.LLM) agent.Adapter { return tc.new(t, bin, llm) },
			})
			cwd := tc.cwd(t)
			for rel, content := range tc.files(script) {
				writeWorkspaceFile(t, cwd, rel, content)
			}
			ses, _ := st.CreateWith(t, client.CreateSession{Cwd: cwd, PermissionMode: "bypass"})
			turn, evs := st.Turn(t, ses.ID, "hello", nil)
			if turn.StopReason != event.StopEndTurn {
				t.Fatalf("turn %+v\n%s", turn, agenttest.Dump(evs))
			}
			if started() {
				t.Error("the workspace's MCP server was started")
			}
		})
	}
}

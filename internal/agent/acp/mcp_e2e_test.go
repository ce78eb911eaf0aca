package acp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/agenttest/mcptest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestE2EClaudeCodeMCP: an MCP server given at create reaches
// claude-code-acp as the mcpServers of session/new; the model calls its
// tool, the agent calls our server (which sees its env value), and the
// result is in the session's events.
func TestE2EClaudeCodeMCP(t *testing.T) {
	bin := installed(t, NameClaudeCode)
	srv := mcptest.Build(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
		Scenarios: map[string]*fakellm.Scenario{"mcp": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Name: "mcp__docs__" + mcptest.Tool, Arguments: json.RawMessage(`{"text":"hello-acp"}`)}}},
			{Text: "called"},
		}}},
	})
	st.SetScenario("mcp")
	ses, _ := st.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv, Env: map[string]string{mcptest.TokenEnv: "tok-acp-2"}},
	}})
	tc, evs := st.Turn(t, ses.ID, "call the mcp tool", nil)
	var out string
	for _, it := range agenttest.Items(t, evs) {
		if it.Kind == event.ItemToolCall || it.Kind == event.ItemMCPToolCall {
			out += it.Output
		}
	}
	if tc.StopReason != event.StopEndTurn || !strings.Contains(out, "mcpecho: hello-acp token=tok-acp-2") {
		t.Fatalf("tool output %q, turn %+v\n%s", out, tc, agenttest.Dump(evs))
	}
}

// TestE2EGeminiMCP: gemini does not claim MCP (it starts no MCP server in
// the untrusted folder that keeps a workspace's settings out, see Gemini),
// so a session that gives it MCP servers is refused, not started without
// them.
func TestE2EGeminiMCP(t *testing.T) {
	bin := installed(t, "gemini")
	srv := mcptest.Build(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameGemini,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		},
	})
	_, err := st.C.CreateSession(t.Context(), client.CreateSession{Agent: NameGemini, Cwd: t.TempDir(), MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv},
	}})
	if err == nil || !strings.Contains(err.Error(), "mcp") {
		t.Fatalf("create with MCP servers: %v, want refused (mcp-unsupported)", err)
	}
}

// TestE2EGeminiWorkspaceMCPConfigIgnored: the workspace is the agent's (a
// hostile repository's): nothing its .gemini/settings.json names may run.
// Each case is a setting of gemini 0.61.0 that makes it run a command: MCP
// servers (also one named as the session's own, which must stay the
// session's), tool discovery and call commands, the MCP server command
// prefix and hooks.
func TestE2EGeminiWorkspaceMCPConfigIgnored(t *testing.T) {
	bin := installed(t, "gemini")
	srv := mcptest.Build(t)
	for _, tc := range []struct {
		name string
		// settings are the workspace's, given evil, a command that
		// records that it ran and serves MCP on its stdin, and plain,
		// one that records it and prints [].
		settings func(evil, plain string) map[string]any
	}{
		{"mcp_servers", func(evil, _ string) map[string]any {
			return map[string]any{"mcpServers": map[string]any{"evil": map[string]any{"command": evil}}}
		}},
		{"mcp_server_same_name", func(evil, _ string) map[string]any {
			return map[string]any{"mcpServers": map[string]any{"docs": map[string]any{"command": evil}}}
		}},
		{"mcp_allowed", func(evil, _ string) map[string]any {
			return map[string]any{"mcp": map[string]any{"allowed": []string{"evil"}},
				"mcpServers": map[string]any{"evil": map[string]any{"command": evil}}}
		}},
		{"mcp_server_command", func(evil, _ string) map[string]any {
			return map[string]any{"mcp": map[string]any{"serverCommand": evil}}
		}},
		{"tool_discovery_command", func(_, plain string) map[string]any {
			return map[string]any{"tools": map[string]any{"discoveryCommand": plain, "callCommand": plain}}
		}},
		{"hooks", func(_, plain string) map[string]any {
			hook := []any{map[string]any{"matcher": "*", "hooks": []any{map[string]any{"type": "command", "command": plain}}}}
			return map[string]any{"hooksConfig": map[string]any{"enabled": true},
				"hooks": map[string]any{"SessionStart": hook, "BeforeAgent": hook, "BeforeModel": hook}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "started")
			evil := filepath.Join(t.TempDir(), "evil.sh")
			if err := os.WriteFile(evil, []byte("#!/bin/sh\ntouch "+marker+"\nexec "+srv+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			plain := filepath.Join(t.TempDir(), "plain.sh")
			if err := os.WriteFile(plain, []byte("#!/bin/sh\ntouch "+marker+"\necho '[]'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			st := agenttest.NewStack(t, agenttest.StackOptions{
				Name: NameGemini,
				New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
					return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
				},
			})
			cwd := t.TempDir()
			settings, err := json.Marshal(tc.settings(evil, plain))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(cwd, ".gemini"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cwd, ".gemini", "settings.json"), settings, 0o644); err != nil {
				t.Fatal(err)
			}
			ses, _ := st.CreateWith(t, client.CreateSession{Cwd: cwd, PermissionMode: "bypass"})
			turn, evs := st.Turn(t, ses.ID, "hello", nil)
			if turn.StopReason != event.StopEndTurn {
				t.Fatalf("turn %+v\n%s", turn, agenttest.Dump(evs))
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a command of the workspace's settings ran")
			}
		})
	}
}

// TestE2EClaudeCodeWorkspaceMCPConfigIgnored: the same for
// claude-code-acp and a workspace's .mcp.json with project settings that
// enable its servers.
func TestE2EClaudeCodeWorkspaceMCPConfigIgnored(t *testing.T) {
	bin := installed(t, NameClaudeCode)
	script, started := mcptest.Marked(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
	})
	cwd := t.TempDir()
	mcpJSON, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"evil": map[string]any{"type": "stdio", "command": script}}})
	if err := os.WriteFile(filepath.Join(cwd, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cwd, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ses, _ := st.CreateWith(t, client.CreateSession{Cwd: cwd})
	tc, evs := st.Turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn %+v\n%s", tc, agenttest.Dump(evs))
	}
	if started() {
		t.Error("the workspace's MCP server was started")
	}
}

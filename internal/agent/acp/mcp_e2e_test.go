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
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/agent/agenttest/mcptest"
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

// TestE2EGeminiMCP: the same for gemini, which offers a server's tools to
// the model as mcp_NAME_TOOL.
func TestE2EGeminiMCP(t *testing.T) {
	bin := installed(t, "gemini")
	srv := mcptest.Build(t)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameGemini,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		},
		Scenarios: map[string]*fakellm.Scenario{"mcp": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Name: "mcp_docs_" + mcptest.Tool, Arguments: json.RawMessage(`{"text":"hello-gemini"}`)}}},
			{Text: "called"},
		}}},
	})
	st.SetScenario("mcp")
	ses, _ := st.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "docs", Command: srv, Env: map[string]string{mcptest.TokenEnv: "tok-gemini-5"}},
	}})
	tc, evs := st.Turn(t, ses.ID, "call the mcp tool", nil)
	var out string
	for _, it := range agenttest.Items(t, evs) {
		if it.Kind == event.ItemToolCall || it.Kind == event.ItemMCPToolCall {
			out += it.Output
		}
	}
	if tc.StopReason != event.StopEndTurn || !strings.Contains(out, "mcpecho: hello-gemini token=tok-gemini-5") {
		for _, r := range st.LLM.Requests() {
			t.Logf("request %d: %s", r.Seq, r.Reply)
			var body struct {
				Tools []json.RawMessage `json:"tools"`
			}
			_ = json.Unmarshal(r.Body, &body)
			for _, tl := range body.Tools {
				if strings.Contains(string(tl), "echo") {
					t.Logf("offers %.600s", tl)
				}
			}
		}
		t.Fatalf("tool output %q, turn %+v\n%s", out, tc, agenttest.Dump(evs))
	}
}

// TestE2EGeminiWorkspaceMCPConfigIgnored: the workspace is the agent's (a
// hostile repository's): MCP servers its .gemini/settings.json names must
// not start. They do today (gemini 0.61.0 with folderTrust off loads the
// workspace's settings; with it on, an untrusted folder also loses the
// session's own MCP servers): an open gap of issue 12, reproduced here and
// skipped until gemini's settings can exclude the workspace's servers.
func TestE2EGeminiWorkspaceMCPConfigIgnored(t *testing.T) {
	t.Skip("open gap: gemini starts the MCP servers of the workspace's .gemini/settings.json (see the comment)")
	bin := installed(t, "gemini")
	srv := mcptest.Build(t)
	marker := filepath.Join(t.TempDir(), "started")
	script := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexec "+srv+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameGemini,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		},
	})
	cwd := t.TempDir()
	settings, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"evil": map[string]any{"command": script}}})
	if err := os.MkdirAll(filepath.Join(cwd, ".gemini"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, ".gemini", "settings.json"), settings, 0o644); err != nil {
		t.Fatal(err)
	}
	ses, _ := st.CreateWith(t, client.CreateSession{Cwd: cwd})
	tc, evs := st.Turn(t, ses.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn %+v\n%s", tc, agenttest.Dump(evs))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the workspace's MCP server was started")
	}
}

// TestE2EClaudeCodeWorkspaceMCPConfigIgnored: the same for
// claude-code-acp and a workspace's .mcp.json with project settings that
// enable its servers.
func TestE2EClaudeCodeWorkspaceMCPConfigIgnored(t *testing.T) {
	bin := installed(t, NameClaudeCode)
	srv := mcptest.Build(t)
	marker := filepath.Join(t.TempDir(), "started")
	script := filepath.Join(t.TempDir(), "evil.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexec "+srv+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
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
	if _, err := os.Stat(marker); err == nil {
		t.Error("the workspace's MCP server was started")
	}
}

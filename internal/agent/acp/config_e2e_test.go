package acp

import (
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// TestE2ECodexSwitch: codex-acp lists Codex's models in session/new (as
// its config option of category model; it offers no modes) and switches
// the model with session/set_config_option between turns.
func TestE2ECodexSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameCodex)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameCodex,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Codex(codexConfigFor(bin, codexDataDir(t), llm))
		},
		URLSuffix: "/v1",
	})
	agenttest.Switch(t, st, NameCodex, agenttest.SwitchCase{Model: "gpt-5.4", Wire: "gpt-5.4"})
}

// TestE2EOpenCodeSwitch: opencode-acp lists the models its opencode.json
// declares and its agents (build, plan) as modes in session/new, and
// switches both between turns.
func TestE2EOpenCodeSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, "opencode")
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameOpenCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key(), OpenCodeModels: []string{"gpt-5"}})
		},
		URLSuffix: "/v1",
	})
	agenttest.Switch(t, st, NameOpenCode, agenttest.SwitchCase{Model: "agentbox/gpt-5", Wire: "gpt-5", Mode: "plan", ModeMark: "Plan mode ACTIVE"})
}

// TestE2EClaudeCodeSwitch: claude-code-acp lists Claude's models and its
// permission modes in session/new and switches both between turns.
func TestE2EClaudeCodeSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameClaudeCode)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
	})
	agenttest.Switch(t, st, NameClaudeCode, agenttest.SwitchCase{Model: "opus", Wire: "opus", Mode: "plan", ModeMark: "Plan mode is active"})
}

// TestE2EGeminiSwitch: Gemini CLI lists its models and approval modes in
// session/new and switches both between turns.
func TestE2EGeminiSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, "gemini")
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameGemini,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		},
	})
	agenttest.Switch(t, st, NameGemini, agenttest.SwitchCase{Model: "gemini-2.5-pro", Wire: "gemini-2.5-pro", Mode: "plan", ModeMark: "operating in **Plan Mode**"})
}

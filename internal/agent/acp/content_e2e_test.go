package acp

import (
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// TestE2EContent proves each ACP agent's Images and Files flags with the
// real CLI (agenttest.Stack.CheckContent): all four declare image and
// embeddedContext in their promptCapabilities at initialize, so an image
// part goes as an ACP image block and a file part as an embedded resource,
// and the fake model must receive the image's bytes and the file's text.
func TestE2EContent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		suffix string
		new    func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter
	}{
		{NameClaudeCode, "", func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		}},
		{NameCodex, "/v1", func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
			return Codex(codexConfigFor(bin, codexDataDir(t), llm))
		}},
		{NameOpenCode, "/v1", func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
			return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key()})
		}},
		{NameGemini, "", func(t testing.TB, bin func(string) func() (string, string, error), llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkg := tc.name
			if tc.name == NameOpenCode {
				pkg = "opencode"
			}
			bin := installed(t, pkg)
			st := agenttest.NewStack(t, agenttest.StackOptions{
				Name:      tc.name,
				New:       func(t testing.TB, llm agenttest.LLM) agent.Adapter { return tc.new(t, bin, llm) },
				URLSuffix: tc.suffix,
			})
			st.CheckContent(t)
		})
	}
}

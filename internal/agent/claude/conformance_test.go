package claude

import (
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestConformance runs the adapter conformance suite against the real CLI.
func TestConformance(t *testing.T) {
	agenttest.RequireInstalled(t, Name)
	agenttest.Run(t, agenttest.Target{
		Name: Name,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return New(Options{
				Binary:  installedBinary,
				BaseURL: llm.URL(""),
				APIKey:  llm.Key(),
				HomeDir: t.TempDir(),
			})
		},
		Caps:     capabilities,
		Protocol: fakellm.APIAnthropic,
	})
}

package pi

import (
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/install"
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
				Binary:  install.Binary(Name),
				BaseURL: llm.URL(""),
				APIKey:  llm.Key(),
				Home:    t.TempDir(),
			})
		},
		Caps:      capabilities,
		Protocol:  fakellm.APIChat,
		URLSuffix: "/v1",
	})
}

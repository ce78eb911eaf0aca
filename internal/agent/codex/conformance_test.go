package codex

import (
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestConformance runs the shared adapter suite against the real CLI.
func TestConformance(t *testing.T) {
	bin := codexBinary(t)
	var a *adapter
	noRetries, oneRetry := 0, 1
	agenttest.Run(t, agenttest.Target{
		Name: Name,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			a = New(Options{Binary: bin, Home: codexHome(t), Model: testModel,
				BaseURL: llm.URL(""), APIKey: llm.Key(), Retries: &noRetries,
				// A loopback stream that breaks off is tried again, as Codex does
				// by default; an upstream error fails at once.
				StreamRetries: &oneRetry}).(*adapter)
			return a
		},
		Caps:      capabilities,
		Protocol:  fakellm.APIResponses,
		URLSuffix: "/v1",
		// The sessions share one app-server: a crash is its death.
		KillAgent: func(t *testing.T, _ string) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, ref := range a.servers {
				if err := syscall.Kill(ref.srv.tree.Pid(), syscall.SIGKILL); err != nil {
					t.Errorf("kill: %v", err)
				}
			}
		},
	})
}

package codex

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestConformance runs the shared adapter suite against the real CLI.
func TestConformance(t *testing.T) {
	bin := codexBinary(t)
	var a *adapter
	noRetries, oneRetry := 0, 1
	opts := func(home string, llm agenttest.LLM) Options {
		return Options{Binary: bin, Home: home, Model: testModel,
			BaseURL: llm.URL(""), APIKey: llm.Key(), Retries: &noRetries,
			// A loopback stream that breaks off is tried again, as Codex does
			// by default; an upstream error fails at once.
			StreamRetries: &oneRetry}
	}
	agenttest.Run(t, agenttest.Target{
		Name: Name,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			a = New(opts(codexHome(t), llm)).(*adapter)
			return a
		},
		Sandboxed: agenttest.Sandboxed{
			// A sandboxed session's app-server gets a CODEX_HOME of its own
			// below Home, mounted into its sandbox: Home must lie in the
			// daemon's data directory (as daemon.Agents puts it), which the
			// sandbox's root leaves room for, not in a read-only host path.
			New: func(_ *testing.T, llm agenttest.LLM, stateDir string) agent.Adapter {
				return New(opts(filepath.Join(stateDir, "agents", Name, "home"), llm))
			},
		},
		Caps:      capabilities,
		Protocol:  fakellm.APIResponses,
		URLSuffix: "/v1",
		// Unsandboxed, the sessions share one app-server: a crash is its
		// death. (Sandboxed, each session has its own.)
		KillAgent: func(t *testing.T, _ string) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, ref := range a.servers {
				if err := syscall.Kill(ref.srv.pid(), syscall.SIGKILL); err != nil {
					t.Errorf("kill: %v", err)
				}
			}
		},
	})
}

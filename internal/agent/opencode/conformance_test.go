package opencode

import (
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

func TestConformance(t *testing.T) {
	opencodeBinary(t)
	var mu sync.Mutex
	var ad *adapter
	agenttest.Run(t, agenttest.Target{
		Name: Name,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			a := New(Options{
				Binary:  installedBinary,
				BaseURL: llm.URL(""), APIKey: llm.Key(),
				Home: filepath.Join(t.TempDir(), "opencode-home"), MaxRetries: -1,
			}).(*adapter)
			t.Cleanup(func() { _ = a.Close() })
			mu.Lock()
			ad = a
			mu.Unlock()
			return a
		},
		Caps:      capabilities,
		Protocol:  fakellm.APIChat,
		URLSuffix: "/v1",
		Sandboxed: agenttest.Sandboxed{
			Runtimes: []string{"gvisor"},
			// A sandboxed session's server gets a home of its own below
			// Home, mounted into its sandbox: Home lies in the daemon's
			// data directory (as daemon.Agents puts it), not in a
			// read-only host path.
			New: func(t *testing.T, llm agenttest.LLM, stateDir string) agent.Adapter {
				a := New(Options{
					Binary:  installedBinary,
					BaseURL: llm.URL(""), APIKey: llm.Key(),
					Home: filepath.Join(stateDir, "agents", Name, "home"), MaxRetries: -1,
				}).(*adapter)
				t.Cleanup(func() { _ = a.Close() })
				return a
			},
		},
		// The agent process is the shared server: kill it.
		KillAgent: func(t *testing.T, _ string) {
			mu.Lock()
			a := ad
			mu.Unlock()
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, s := range a.servers {
				_ = syscall.Kill(s.tree.Pid(), syscall.SIGKILL)
			}
		},
	})
}

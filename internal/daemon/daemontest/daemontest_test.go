package daemontest

import (
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// TestSandboxedAgentPIDsOwnSessionOnly runs two daemons in this process,
// as the conformance suite does for agents tested in parallel, each with a
// sandboxed session whose mock agent runs a command: SandboxedAgentPIDs of
// either session's directory must find that session's processes and none
// of the other's, although each daemon's sandboxes see the other's
// workspaces (a daemon hides only its own data directory).
func TestSandboxedAgentPIDsOwnSessionOnly(t *testing.T) {
	h := &Host{}
	if reason := h.Probe(t.Context()); reason != "" {
		t.Skipf("this host cannot build sandboxes: %s", reason)
	}
	var cwds [2]string
	for i := range cwds {
		h := &Host{}
		reg := agent.NewRegistry()
		reg.Register("mock", mock.New())
		c := h.Serve(t, reg)
		cwds[i] = h.Workspace(t)
		s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwds[i], Policy: h.Policy()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Send(t.Context(), s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "sleep 60"})); err != nil {
			t.Fatal(err)
		}
	}
	var pids [2][]int
	for deadline := time.Now().Add(time.Minute); ; {
		pids[0], pids[1] = SandboxedAgentPIDs(cwds[0]), SandboxedAgentPIDs(cwds[1])
		if len(pids[0]) > 0 && len(pids[1]) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range pids {
		if len(pids[i]) == 0 {
			t.Fatalf("no process found in the sandbox of session %d (%s)", i, cwds[i])
		}
	}
	for _, p := range pids[0] {
		if slices.Contains(pids[1], p) {
			t.Errorf("process %d found in both sessions' sandboxes: %v and %v", p, pids[0], pids[1])
		}
	}
}

//go:build !linux

package agenttest

import "testing"

// AgentPIDs needs /proc; elsewhere it finds nothing.
func AgentPIDs(string) []int { return nil }

// ParentPID needs /proc; elsewhere it finds none.
func ParentPID(int) int { return 0 }

// KillAgentByCwd needs /proc: elsewhere a Target must set KillAgent.
func KillAgentByCwd(t *testing.T, cwd string) {
	t.Helper()
	t.Fatalf("KillAgentByCwd needs /proc (Linux); set Target.KillAgent to kill the agent in %s", cwd)
}

package session_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/session"
	"github.com/agentbox/agentbox/internal/store"
)

// TestCreateRefusesMCPForAgentWithout: MCP servers for an agent without
// the mcp capability are refused, never dropped; the session is not made.
func TestCreateRefusesMCPForAgentWithout(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	_, err := m.Create(t.Context(), session.CreateParams{Agent: "test", MCPServers: []agent.MCPServer{{Name: "docs", Command: "/bin/sh"}}})
	if !errors.Is(err, session.ErrMCPUnsupported) {
		t.Fatalf("err %v, want ErrMCPUnsupported", err)
	}
	if list, _ := m.List(t.Context(), store.ListOptions{}); len(list) != 0 {
		t.Errorf("%d sessions made", len(list))
	}
}

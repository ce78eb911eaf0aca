package engine

import "github.com/agentbox/agentbox/internal/sandbox"

// SessionSandbox returns the sandbox of a live sandboxed session, for the
// work the daemon does in it on a client's behalf (the files API's
// changes, which must reach the workspace the way the agent's do); ok is
// false when the session is not live or runs on the host. The sandbox may
// close at any time: its calls then fail with sandbox.ErrClosed.
func (m *Manager) SessionSandbox(id string) (sb sandbox.Sandbox, ok bool) {
	l := m.lookup(id)
	if l == nil || l.sb == nil || l.sbInfo == nil {
		return nil, false
	}
	return l.sb, true
}

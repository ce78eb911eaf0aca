package engine

import "github.com/agentbox/agentbox/internal/sandbox"

// SandboxClosing returns a channel closed as soon as the teardown of sb,
// the sandbox of session id (as Exec lends it), begins: before the
// sandbox is closed, so that what runs in it on a client's behalf (a
// process started through Exec) can say why it ended. When sb is not that
// session's live sandbox any more, the channel is closed already.
func (m *Manager) SandboxClosing(id string, sb sandbox.Sandbox) <-chan struct{} {
	l := m.lookup(id)
	if l == nil || l.sb == nil || l.sb != sb {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.closing.Done()
}

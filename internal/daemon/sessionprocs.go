package daemon

import (
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ httpapi.SandboxLender = (*lateEngine)(nil)

// SandboxClosing is the engine's optional ability (httpapi.SandboxLender),
// which embedding alone would hide. Without it (never with the daemon's
// engine) nil: a lent sandbox's processes then end with the sandbox,
// without knowing why.
func (e *lateEngine) SandboxClosing(id string, sb sandbox.Sandbox) <-chan struct{} {
	if l, ok := e.Engine.(httpapi.SandboxLender); ok {
		return l.SandboxClosing(id, sb)
	}
	return nil
}

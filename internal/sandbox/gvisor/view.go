package gvisor

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.WorkspaceViewer = (*box)(nil)

// ViewWorkspace implements sandbox.WorkspaceViewer: the overlay's merged
// directory on the host, which the container's gofer serves as its
// workspace (its mounts share file access with the host, so what the
// sandbox writes is there).
func (b *box) ViewWorkspace() (*os.Root, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.ws == nil || b.dead.Load() {
		return nil, fmt.Errorf("gvisor sandbox %s: %w", b.id, sandbox.ErrClosed)
	}
	r, err := os.OpenRoot(b.ws.merged)
	if err != nil {
		return nil, fmt.Errorf("gvisor sandbox %s: open its workspace: %w", b.id, err)
	}
	return r, nil
}

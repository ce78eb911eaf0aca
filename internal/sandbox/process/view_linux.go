package process

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.WorkspaceViewer = (*box)(nil)

// ViewWorkspace implements sandbox.WorkspaceViewer: the workspace as the
// init's mount namespace shows it (the overlay), reached through
// /proc/<init>/root. The path inside is resolved with that root as the
// root (RESOLVE_IN_ROOT), so a symlink the sandbox planted on the way
// never leads into the host's tree; the init's pidfd then proves that the
// pid still was the init when its root was opened (a pid is not reused
// before its process is reaped, and the daemon reaps the init).
func (b *box) ViewWorkspace() (*os.Root, error) {
	b.mu.Lock()
	closed, configured := b.closed, b.dispatching
	b.mu.Unlock()
	if closed || !configured {
		return nil, fmt.Errorf("process sandbox %s: %w", b.id, sandbox.ErrClosed)
	}
	b.fdMu.Lock()
	defer b.fdMu.Unlock()
	if b.initFD < 0 || b.initReaped() {
		return nil, fmt.Errorf("process sandbox %s: %w (its init has exited)", b.id, sandbox.ErrClosed)
	}
	pid := hostPid(b.initFD)
	if pid <= 0 {
		return nil, fmt.Errorf("process sandbox %s: %w (its init has exited)", b.id, sandbox.ErrClosed)
	}
	rootFD, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("process sandbox %s: open its root: %w", b.id, err)
	}
	defer func() { _ = unix.Close(rootFD) }()
	if err := unix.PidfdSendSignal(b.initFD, 0, nil, 0); err != nil {
		return nil, fmt.Errorf("process sandbox %s: %w (its init has exited)", b.id, sandbox.ErrClosed)
	}
	wsFD, err := unix.Openat2(rootFD, strings.TrimPrefix(b.spec.WorkspaceDir, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("process sandbox %s: open its workspace: %w", b.id, err)
	}
	defer func() { _ = unix.Close(wsFD) }()
	r, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(wsFD))
	if err != nil {
		return nil, fmt.Errorf("process sandbox %s: open its workspace: %w", b.id, err)
	}
	return r, nil
}

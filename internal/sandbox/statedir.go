package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Within reports whether p is dir or below it; both are clean absolute
// paths. Every directory is within "/".
func Within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// CheckStateDirs checks and cleans spec.StateDirs, as every runtime needs
// them: absolute, not "/", an existing directory, neither inside nor
// around the workspace (Workspace or WorkspaceDir), whose overlay and
// commit they would otherwise share.
func CheckStateDirs(spec *Spec) error {
	ws, wsDir := filepath.Clean(spec.Workspace), filepath.Clean(spec.WorkspaceDir)
	for i, p := range spec.StateDirs {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("state directory %q must be absolute", p)
		}
		p = filepath.Clean(p)
		spec.StateDirs[i] = p
		if p == "/" || Within(p, ws) || Within(ws, p) || spec.WorkspaceDir != "" && (Within(p, wsDir) || Within(wsDir, p)) {
			return fmt.Errorf("state directory %q overlaps the workspace", p)
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return fmt.Errorf("state directory %q is not a directory", p)
		}
	}
	return nil
}

// StateRoom is what the writable layer of state directory dir may hold:
// l's disk and file limits less what dir holds already (at least a page
// and one entry, so that a bound is never "none"), its other limits as
// they are. Runtimes size the layer by it, so that dir, which a commit
// writes back to, stays within l however often it is used.
func StateRoom(dir string, l Limits) (Limits, error) {
	u, err := UsageOf(dir, l.DiskBytes, l.Files)
	if err != nil {
		return Limits{}, err
	}
	room := l
	if l.DiskBytes > 0 {
		room.DiskBytes = max(l.DiskBytes-u.Bytes, int64(os.Getpagesize()))
	}
	if l.Files > 0 {
		room.Files = max(l.Files-u.Files, 1)
	}
	return room, nil
}

// Inodes a sandbox's tmpfs holds besides the workload's entries: its
// root, and in an overlay's upper layer also the upper and work
// directories and the work directory overlayfs makes inside the latter.
const (
	InodesTmpfs = 1
	InodesUpper = 4
)

// TmpfsInodes is the nr_inodes of a tmpfs that may hold files entries of
// the workload besides extra of its own; files <= 0 (no limit) is 0, the
// kernel's default.
func TmpfsInodes(files, extra int64) int64 {
	if files <= 0 {
		return 0
	}
	return files + extra
}

package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
)

// The probes that need code inside the new namespaces re-execute the
// running binary with this argv[0]; reexec.Init (first in main) runs the
// helper and exits.
const helperArg0 = "agentbox-probe-helper"

const (
	helperExit    = "exit"
	helperOverlay = "overlay"
	helperSeccomp = "seccomp"
)

func init() { reexec.Register(helperArg0, helperMain) }

// helperMain runs the helper argv[1] names.
func helperMain() int {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "probe helper: want one argument")
		return 2
	}
	var err error
	switch os.Args[1] {
	case helperExit:
	case helperOverlay:
		err = overlayHelper()
	case helperSeccomp:
		err = seccompHelper()
	default:
		err = fmt.Errorf("unknown probe helper %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// overlayHelper mounts an overlay the way the process runtime does (in a
// user namespace, with userxattr) and checks a write lands in upper.
func overlayHelper() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	dir := "/tmp"
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("tmpfs in user namespace: %w", err)
	}
	var paths []string
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", paths[0], paths[1], paths[2])
	if err := unix.Mount("overlay", paths[3], "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay (userxattr): %w", err)
	}
	if err := os.WriteFile(filepath.Join(paths[3], "f"), []byte("x"), 0o644); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(paths[1], "f")); err != nil {
		return fmt.Errorf("write did not reach the upper layer: %w", err)
	}
	return nil
}

// seccompHelper installs the default deny filter and checks that a denied
// call now fails with EPERM.
func seccompHelper() error {
	if err := seccomp.Install(seccomp.ProfileDefault, nil); err != nil {
		return err
	}
	if err := unix.Unshare(unix.CLONE_NEWUTS); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("unshare under the filter: %w, want EPERM", err)
	}
	return nil
}

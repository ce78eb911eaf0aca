package docker

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs with opts on dir (a policy's bounded sandbox
// directory; the host daemon is root).
func mountTmpfs(dir, opts string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("docker provider: sandbox dir: mounting its tmpfs (%s): %w", opts, err)
	}
	return nil
}

// removeHostDir removes a sandbox's host directory, unmounting its tmpfs
// first when it has one (only a root host daemon mounts one).
func removeHostDir(dir string) error {
	if os.Geteuid() == 0 {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("docker provider: unmounting %s: %w", dir, err)
		}
	}
	return os.RemoveAll(dir)
}

package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// removeRunscGroups removes the group called name under cgroup.Parent from
// every cgroup hierarchy mounted: runsc creates it in the v1 hierarchies
// the cgroup package does not manage (blkio, cpuset, devices, name=systemd
// on a host like ours) and, as nothing calls `runsc delete`, never removes
// it there. Call it once the group is empty (after Kill); a hierarchy
// without it is skipped.
func removeRunscGroups(name string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var errs []error
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup" && fields[sep+1] != "cgroup2" {
			continue
		}
		mp := fields[4]
		if seen[mp] || strings.Contains(mp, "\\") {
			continue
		}
		seen[mp] = true
		if err := unix.Rmdir(filepath.Join(mp, cgroup.Parent, name)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("gvisor: remove runsc's cgroup %s in %s: %w", name, mp, err))
		}
	}
	return errors.Join(errs...)
}

// KindSandbox is the kind of a gVisor sandbox's owner record (package
// owner): Name is its cgroup's name, Path its state directory. Reap is its
// reaper.
const KindSandbox = "gvisor"

// Reap removes what a sandbox of a process that died left on the host: the
// container (every process in its cgroup: the Sentry, the gofer and their
// children, which runsc run --detach made outlive the process), its cgroups
// in every hierarchy, the mounts under its state directory and the
// directory itself. It is idempotent.
func Reap(r owner.Record) error {
	if r.Kind != KindSandbox || !strings.HasPrefix(r.Name, "gvisor-") || !filepath.IsAbs(r.Path) || !strings.HasPrefix(filepath.Base(r.Path), "agentbox-") {
		return fmt.Errorf("gvisor: not a sandbox record: %s", r)
	}
	if err := cgroup.Remove(r.Name); err != nil {
		return err
	}
	return owner.RemoveTree(r.Path)
}

package gvisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
)

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := fields[4]
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// RemoveStale removes what a crashed daemon left in the state directory:
// sandbox directories (their mounts detached first). Their cgroups are
// removed by cgroup.RemoveStale. Call it at daemon start, before creating
// any sandbox.
func (r *Runtime) RemoveStale() error {
	entries, err := os.ReadDir(r.opts.StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "agentbox-") {
			continue
		}
		dir := filepath.Join(r.opts.StateDir, e.Name())
		if err := unmountUnder(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

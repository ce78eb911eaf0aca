package gvisor

import (
	"fmt"
	"path/filepath"
	"strings"

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

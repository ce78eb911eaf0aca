package process

import (
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
)

// The runtime reaches the kernel-mechanism packages through these
// variables, so a test can take one away and check that the runtime then
// fails closed instead of silently running without it.

// cgroupGroup is the part of *cgroup.Group the runtime uses.
type cgroupGroup interface {
	Add(pid int) error
	SetLimits(l cgroup.Limits) error
	Kill() error
	Pids() ([]int, error)
	Stats() (cgroup.Stats, error)
	Delete() error
}

// newCgroup creates the sandbox's cgroup; nil means no cgroup support.
var newCgroup = func(name string, l sandbox.Limits) (cgroupGroup, error) {
	g, err := cgroup.New(name, cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// installSeccomp installs the deny filter on every thread of the init.
var installSeccomp = seccomp.Install

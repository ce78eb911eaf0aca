package cgroup

import (
	"fmt"
	"os"
	"slices"

	cgroups "github.com/containerd/cgroups/v3"
)

// Info is what the host offers, for the host probe and `agentbox doctor`.
type Info struct {
	// Version is "v1" or "v2": the hierarchy sandboxes use ("" if none).
	Version string `json:"version"`
	// Mode is the host's layout: legacy, hybrid, unified or unavailable.
	Mode string `json:"mode"`
	// Controllers are the usable controllers among the ones this package
	// uses; Missing are the others.
	Controllers []string `json:"controllers"`
	Missing     []string `json:"missing,omitempty"`
	// Usable reports that a group could really be created and deleted
	// (it needs root or a delegated subtree); Err says why not.
	Usable bool   `json:"usable"`
	Err    string `json:"error,omitempty"`
}

// Probe inspects the cgroup setup and tries to create and delete a group.
func Probe() Info {
	var info Info
	h, err := hierarchies()
	info.Mode = modeName(h.mode)
	if err != nil {
		info.Err = err.Error()
		return info
	}
	info.Version = h.version()
	want := v1Controllers
	if h.v2 {
		want = v2Controllers
	}
	for _, c := range want {
		if h.roots[c] != "" {
			info.Controllers = append(info.Controllers, c)
		} else {
			info.Missing = append(info.Missing, c)
		}
	}
	slices.Sort(info.Controllers)
	g, err := New(fmt.Sprintf("probe-%d", os.Getpid()), Limits{})
	if err != nil {
		info.Err = err.Error()
		return info
	}
	if err := g.Delete(); err != nil {
		info.Err = err.Error()
		return info
	}
	info.Usable = true
	return info
}

func modeName(m cgroups.CGMode) string {
	switch m {
	case cgroups.Legacy:
		return "legacy"
	case cgroups.Hybrid:
		return "hybrid"
	case cgroups.Unified:
		return "unified"
	}
	return "unavailable"
}

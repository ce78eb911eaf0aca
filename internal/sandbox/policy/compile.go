package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// BaseEnv is the environment every sandbox starts from, before env.pass
// and env.set: enough for shells and language runtimes to work, and
// nothing taken from the host. HOME and TMPDIR are the sandbox's own
// /tmp, which is private and size-limited.
var BaseEnv = map[string]string{
	"PATH":   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME":   "/tmp",
	"TMPDIR": "/tmp",
	"LANG":   "C.UTF-8",
}

// ErrNeedsEgressProxy is returned (wrapped) by Compile for network rules
// only the egress proxy can enforce.
var ErrNeedsEgressProxy = errors.New("needs the egress proxy, which this build does not have yet")

// Compile resolves the policy (with defaults; pass it through Effective
// first to apply a global policy) into the Spec a runtime enforces, for
// the host directory workspace. hostEnv looks up the host's environment
// for env.pass names (nil passes nothing); the Spec's Env is BaseEnv, then
// the passed names that exist, then env.set — and nothing else.
//
// A "ro" workspace compiles to the protected pattern "**": the sandbox may
// write in its overlay, but no change is ever applied to the host.
func (p *Policy) Compile(workspace string, hostEnv func(string) (string, bool)) (sandbox.Spec, error) {
	if err := p.Validate(); err != nil {
		return sandbox.Spec{}, fmt.Errorf("policy: %w", err)
	}
	e := p.withDefaults()
	if workspace == "" {
		return sandbox.Spec{}, errors.New("policy: compile: no workspace directory")
	}
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("policy: compile: workspace %q: %w", workspace, err)
	}
	if len(e.Network.Allow) > 0 {
		return sandbox.Spec{}, fmt.Errorf("policy: network.allow: %w", ErrNeedsEgressProxy)
	}
	if len(e.Network.Deny) > 0 && e.Network.Mode == sandbox.NetworkHost {
		// With no network namespace nothing can be denied.
		return sandbox.Spec{}, fmt.Errorf("policy: network.deny with network.mode host: %w", ErrNeedsEgressProxy)
	}

	env := make(map[string]string, len(BaseEnv)+len(e.Env.Pass)+len(e.Env.Set))
	for k, v := range BaseEnv {
		env[k] = v
	}
	if hostEnv != nil {
		for _, name := range e.Env.Pass {
			if v, ok := hostEnv(name); ok {
				env[name] = v
			}
		}
	}
	for k, v := range e.Env.Set {
		env[k] = v
	}

	protected := e.Filesystem.Protected
	if e.Filesystem.Workspace == WorkspaceRO {
		protected = append(protected, "**")
	}
	return sandbox.Spec{
		Workspace:            filepath.Clean(ws),
		WorkspaceDir:         filepath.Clean(ws),
		ReadPaths:            cleanPaths(e.Filesystem.Read),
		WritePaths:           cleanPaths(e.Filesystem.Write),
		ReadOutsideWorkspace: e.Filesystem.ReadOutsideWorkspace,
		Protected:            protected,
		Env:                  env,
		Limits: sandbox.Limits{
			MemoryBytes: int64(e.Resources.Memory),
			CPUs:        e.Resources.CPUs,
			Pids:        e.Resources.Pids,
			Timeout:     time.Duration(e.Resources.Timeout),
			DiskBytes:   int64(e.Resources.Disk),
			OutputBytes: int64(e.Resources.Output),
		},
		Syscalls:      sandbox.Syscalls{Profile: e.Syscalls.Profile, Deny: slices.Clone(e.Syscalls.Deny)},
		Network:       sandbox.Network{Mode: e.Network.Mode},
		Hostname:      "sandbox",
		AllowDegraded: e.AllowDegraded,
	}, nil
}

func cleanPaths(ps []string) []string {
	var out []string
	for _, p := range ps {
		c := filepath.Clean(p)
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Hash identifies what the policy means, for keying warm sandboxes: two
// policies that differ only in map order, list order, duplicates or
// spelled-out defaults hash the same. It is hex SHA-256.
func (p *Policy) Hash() string {
	c := p.withDefaults()
	for _, s := range []*[]string{
		&c.Filesystem.Read, &c.Filesystem.Write, &c.Filesystem.Protected,
		&c.Network.Allow, &c.Network.Deny, &c.Env.Pass, &c.Syscalls.Deny,
	} {
		*s = slices.Compact(slices.Sorted(slices.Values(*s)))
	}
	c.Filesystem.Read, c.Filesystem.Write = cleanSorted(c.Filesystem.Read), cleanSorted(c.Filesystem.Write)
	if len(c.Env.Set) == 0 {
		c.Env.Set = nil
	}
	// encoding/json writes map keys sorted, so the bytes are canonical.
	b, err := json.Marshal(c)
	if err != nil {
		panic("policy: Hash: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func cleanSorted(ps []string) []string {
	out := cleanPaths(ps)
	slices.Sort(out)
	return out
}

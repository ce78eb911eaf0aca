// Package policy is the sandbox policy language: the Policy type (YAML or
// JSON, checked against the embedded JSON Schema policy.v1.json with errors
// that name file, line, column and field), the named presets, the
// intersection of an operator's global policy with a request's (Effective),
// and the compilation of a policy into the sandbox.Spec runtimes enforce.
package policy

import (
	"maps"
	"slices"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Version is the only policy version this package reads.
const Version = 1

// Isolation levels, weakest first.
const (
	IsolationProcess = "process"
	IsolationGVisor  = "gvisor"
	IsolationMicroVM = "microvm"
)

// modeRank orders network modes, closest first; an empty mode is the
// default, proxy.
func modeRank(s string) int {
	switch s {
	case sandbox.NetworkNone:
		return 0
	case sandbox.NetworkHost:
		return 2
	}
	return 1
}

// isolationRank orders isolation levels; an empty level is the default,
// process.
func isolationRank(s string) int {
	switch s {
	case IsolationGVisor:
		return 1
	case IsolationMicroVM:
		return 2
	}
	return 0
}

// Workspace modes and syscall profiles.
const (
	WorkspaceRW = "rw"
	WorkspaceRO = "ro"

	ProfileDefault = "default"
	ProfileStrict  = "strict"

	NetworkDeny = "deny"
	NetworkAsk  = "ask"
)

// Policy is what a sandboxed agent session or code execution may do. The
// zero value of every field means "not said": Effective and Compile fill in
// the safe defaults. Parse produces it; build one in code only for tests
// and presets, and call Validate on it.
type Policy struct {
	Version        int        `yaml:"version" json:"version"`
	IsolationLevel string     `yaml:"isolation,omitempty" json:"isolation,omitempty"`
	AllowDegraded  bool       `yaml:"allow_degraded,omitempty" json:"allow_degraded,omitempty"`
	Resources      Resources  `yaml:"resources,omitempty" json:"resources,omitzero"`
	Filesystem     Filesystem `yaml:"filesystem,omitempty" json:"filesystem,omitzero"`
	Network        Network    `yaml:"network,omitempty" json:"network,omitzero"`
	Env            Env        `yaml:"env,omitempty" json:"env,omitzero"`
	Syscalls       Syscalls   `yaml:"syscalls,omitempty" json:"syscalls,omitzero"`
}

// Resources are limits; zero means no limit of that kind.
type Resources struct {
	Memory  ByteSize `yaml:"memory,omitempty" json:"memory,omitempty"`
	CPUs    float64  `yaml:"cpus,omitempty" json:"cpus,omitempty"`
	Pids    int64    `yaml:"pids,omitempty" json:"pids,omitempty"`
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	Disk    ByteSize `yaml:"disk,omitempty" json:"disk,omitempty"`
	Output  ByteSize `yaml:"output,omitempty" json:"output,omitempty"`
	// Files bounds the entries (files, directories, links) of each
	// writable layer; unlike the other limits it is never unlimited:
	// zero means DefaultFiles.
	Files int64 `yaml:"files,omitempty" json:"files,omitempty"`
}

// DefaultFiles is resources.files when neither the policy nor the global
// policy sets it: the entries of each writable layer of a sandbox (the
// workspace's changes, /tmp, an agent's home) and of what one commit
// writes to the host. Without a bound, empty files cost no disk quota but
// one host inode each.
const DefaultFiles = 100_000

// MaxFiles is the largest resources.files a policy may set.
const MaxFiles = 100_000_000

// Filesystem is the file view of a sandbox.
type Filesystem struct {
	// Workspace is "rw" (the default) or "ro".
	Workspace string   `yaml:"workspace,omitempty" json:"workspace,omitempty"`
	Read      []string `yaml:"read,omitempty" json:"read,omitempty"`
	Write     []string `yaml:"write,omitempty" json:"write,omitempty"`
	// ReadOutsideWorkspace shows the host root read-only.
	ReadOutsideWorkspace bool `yaml:"read_outside_workspace,omitempty" json:"read_outside_workspace,omitempty"`
	// Protected adds patterns to BuiltinProtected.
	Protected []string `yaml:"protected,omitempty" json:"protected,omitempty"`
	// WorkspaceRoots, in the operator's global policy only, are the host
	// directories inside which a session's working directory must lie
	// (the daemon's DATA_DIR/workspaces when the global policy names
	// none). A request's policy may not set it.
	WorkspaceRoots []string `yaml:"workspace_roots,omitempty" json:"workspace_roots,omitempty"`
	// ReviewExempt lists patterns of hidden paths the commit applies
	// without review. Unset (nil) means DefaultReviewExempt; an empty
	// list means none (so it is kept in JSON, where "[]" and absent
	// differ).
	ReviewExempt []string `yaml:"review_exempt,omitempty" json:"review_exempt,omitzero"`
}

// Network is the network view of a sandbox: its mode, and the egress
// proxy's rules (see package egress for how they are enforced).
type Network struct {
	// Default is "deny" or "ask" for destinations no rule settles.
	Default string `yaml:"default,omitempty" json:"default,omitempty"`
	// Mode is "proxy" (the default), "none" or "host".
	Mode  string   `yaml:"mode,omitempty" json:"mode,omitempty"`
	Allow []string `yaml:"allow,omitempty" json:"allow,omitempty"`
	Deny  []string `yaml:"deny,omitempty" json:"deny,omitempty"`
	// MaxConnections bounds the connections open at once to the egress
	// proxy, MaxConnectionRate the new ones per second; 0 means the
	// default (sandbox.DefaultMaxConnections, DefaultMaxConnectionRate).
	MaxConnections    int `yaml:"max_connections,omitempty" json:"max_connections,omitempty"`
	MaxConnectionRate int `yaml:"max_connection_rate,omitempty" json:"max_connection_rate,omitempty"`
}

// Env is the environment inside: nothing from the host unless named.
type Env struct {
	Pass []string          `yaml:"pass,omitempty" json:"pass,omitempty"`
	Set  map[string]string `yaml:"set,omitempty" json:"set,omitempty"`
	// Secrets maps variable names to daemon secret names: the variable
	// holds the secret's placeholder, the proxy adds the value.
	Secrets map[string]string `yaml:"secrets,omitempty" json:"secrets,omitempty"`
}

// Syscalls selects the seccomp profile and extra denials.
type Syscalls struct {
	Profile string   `yaml:"profile,omitempty" json:"profile,omitempty"`
	Deny    []string `yaml:"deny,omitempty" json:"deny,omitempty"`
}

// Isolation returns the runtime name the policy asks for: process, gvisor
// or microvm.
func (p *Policy) Isolation() string {
	if p == nil || p.IsolationLevel == "" {
		return IsolationProcess
	}
	return p.IsolationLevel
}

// Clone returns a deep copy.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	c := *p
	c.Filesystem.Read = slices.Clone(p.Filesystem.Read)
	c.Filesystem.Write = slices.Clone(p.Filesystem.Write)
	c.Filesystem.Protected = slices.Clone(p.Filesystem.Protected)
	c.Filesystem.WorkspaceRoots = slices.Clone(p.Filesystem.WorkspaceRoots)
	c.Filesystem.ReviewExempt = slices.Clone(p.Filesystem.ReviewExempt)
	c.Network.Allow = slices.Clone(p.Network.Allow)
	c.Network.Deny = slices.Clone(p.Network.Deny)
	c.Env.Pass = slices.Clone(p.Env.Pass)
	c.Env.Set = maps.Clone(p.Env.Set)
	c.Env.Secrets = maps.Clone(p.Env.Secrets)
	c.Syscalls.Deny = slices.Clone(p.Syscalls.Deny)
	return &c
}

// withDefaults returns a copy with every "not said" field set to its safe
// default and the built-in protected patterns first in the list.
func (p *Policy) withDefaults() *Policy {
	c := p.Clone()
	c.Version = Version
	if c.IsolationLevel == "" {
		c.IsolationLevel = IsolationProcess
	}
	if c.Filesystem.Workspace == "" {
		c.Filesystem.Workspace = WorkspaceRW
	}
	c.Filesystem.Protected = union(BuiltinProtected(), c.Filesystem.Protected)
	if c.Network.Default == "" {
		c.Network.Default = NetworkDeny
	}
	if c.Network.Mode == "" {
		c.Network.Mode = sandbox.NetworkProxy
	}
	if c.Network.MaxConnections == 0 {
		c.Network.MaxConnections = sandbox.DefaultMaxConnections
	}
	if c.Network.MaxConnectionRate == 0 {
		c.Network.MaxConnectionRate = sandbox.DefaultMaxConnectionRate
	}
	if c.Syscalls.Profile == "" {
		c.Syscalls.Profile = ProfileDefault
	}
	if c.Resources.Files == 0 {
		c.Resources.Files = DefaultFiles
	}
	return c
}

// union returns a followed by the elements of b not in a, without
// duplicates, keeping order.
func union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a)+len(b))
	for _, s := range slices.Concat(a, b) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

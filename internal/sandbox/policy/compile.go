package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
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

// ErrNeedsEgressProxy is returned (wrapped) by Compile for network rules,
// asks and secrets in a policy whose network mode has no egress proxy.
var ErrNeedsEgressProxy = errors.New("needs network.mode proxy (the egress proxy)")

// ProxyEnv is what a sandbox with the egress proxy at 127.0.0.1:port
// finds in its environment: both spellings of the proxy variables that
// curl, Python, Node's and Go's HTTP clients, git and npm read, and
// NO_PROXY for the sandbox's own loopback (which is private to it, and
// where the proxy's routes are).
func ProxyEnv(port int) map[string]string {
	u := egress.ProxyURL(port)
	socks := "socks5h://127.0.0.1:" + strconv.Itoa(port)
	noProxy := "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": u, "http_proxy": u, "HTTPS_PROXY": u, "https_proxy": u,
		"ALL_PROXY": socks, "all_proxy": socks, "NO_PROXY": noProxy, "no_proxy": noProxy,
	}
}

// Compile resolves the policy (with defaults; pass it through Effective
// first to apply a global policy) into the Spec a runtime enforces, for
// the host directory workspace. hostEnv looks up the host's environment
// for env.pass names (nil passes nothing); the Spec's Env is BaseEnv, then
// the passed names that exist, then (network.mode proxy) ProxyEnv, then
// env.set, then env.secrets' placeholders — and nothing else.
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
	proxy := e.Network.Mode == sandbox.NetworkProxy
	if !proxy {
		// Without the proxy nothing enforces rules: refuse them rather
		// than ignore them. (With mode none nothing gets out anyway, so
		// deny rules are moot there, but with host they would be a lie.)
		switch {
		case len(e.Network.Allow) > 0:
			return sandbox.Spec{}, fmt.Errorf("policy: network.allow with network.mode %s: %w", e.Network.Mode, ErrNeedsEgressProxy)
		case len(e.Network.Deny) > 0 && e.Network.Mode == sandbox.NetworkHost:
			return sandbox.Spec{}, fmt.Errorf("policy: network.deny with network.mode host: %w", ErrNeedsEgressProxy)
		case e.Network.Default == NetworkAsk:
			return sandbox.Spec{}, fmt.Errorf("policy: network.default ask with network.mode %s: %w", e.Network.Mode, ErrNeedsEgressProxy)
		case len(e.Env.Secrets) > 0:
			return sandbox.Spec{}, fmt.Errorf("policy: env.secrets with network.mode %s: %w", e.Network.Mode, ErrNeedsEgressProxy)
		}
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
	if proxy {
		maps.Copy(env, ProxyEnv(sandbox.DefaultProxyPort))
	}
	for k, v := range e.Env.Set {
		env[k] = v
	}
	for k, name := range e.Env.Secrets {
		env[k] = egress.Placeholder(name)
	}
	network := sandbox.Network{Mode: e.Network.Mode}
	if proxy {
		network = sandbox.Network{
			Mode: e.Network.Mode, ProxyPort: sandbox.DefaultProxyPort, Default: e.Network.Default,
			Allow: slices.Clone(e.Network.Allow), Deny: slices.Clone(e.Network.Deny), Secrets: maps.Clone(e.Env.Secrets),
			MaxConnections: e.Network.MaxConnections, MaxConnectionRate: e.Network.MaxConnectionRate,
		}
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
		ReviewExempt:         e.reviewExempt(),
		Env:                  env,
		Limits: sandbox.Limits{
			MemoryBytes: int64(e.Resources.Memory),
			CPUs:        e.Resources.CPUs,
			Pids:        e.Resources.Pids,
			Timeout:     time.Duration(e.Resources.Timeout),
			DiskBytes:   int64(e.Resources.Disk),
			OutputBytes: int64(e.Resources.Output),
			Files:       e.Resources.Files,
		},
		Syscalls:      sandbox.Syscalls{Profile: e.Syscalls.Profile, Deny: slices.Clone(e.Syscalls.Deny)},
		Network:       network,
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
		&c.Filesystem.Read, &c.Filesystem.Write, &c.Filesystem.Protected, &c.Filesystem.WorkspaceRoots,
		&c.Network.Allow, &c.Network.Deny, &c.Env.Pass, &c.Syscalls.Deny,
	} {
		*s = slices.Compact(slices.Sorted(slices.Values(*s)))
	}
	// Unset means the defaults, [] means none: hash what is meant.
	c.Filesystem.ReviewExempt = append([]string{}, slices.Compact(slices.Sorted(slices.Values(c.reviewExempt())))...)
	c.Filesystem.Read, c.Filesystem.Write = cleanSorted(c.Filesystem.Read), cleanSorted(c.Filesystem.Write)
	c.Filesystem.WorkspaceRoots = cleanSorted(c.Filesystem.WorkspaceRoots)
	if len(c.Env.Set) == 0 {
		c.Env.Set = nil
	}
	if len(c.Env.Secrets) == 0 {
		c.Env.Secrets = nil
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

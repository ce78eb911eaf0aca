package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// problem is one semantic error, by field path.
type problem struct {
	path []string
	msg  string
	key  bool // about the mapping key at path, not its value
}

// Validate checks what Parse checks beyond the JSON Schema, and the enum
// values the schema checks, for policies built in code. Its error lists
// every problem as "field.path: message".
func (p *Policy) Validate() error {
	prs := p.problems()
	if len(prs) == 0 {
		return nil
	}
	errs := make(Errors, len(prs))
	for i, pr := range prs {
		errs[i] = &FieldError{File: "policy", Field: fieldPath(pr.path), Message: pr.msg}
	}
	return errs
}

// The largest network.max_connections and max_connection_rate a policy
// may ask for (the schema's maximum): the daemon-wide ceiling of the
// egress proxy applies below them anyway.
const (
	MaxConnectionsLimit    = 65536
	MaxConnectionRateLimit = 100000
)

var (
	envNameRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	syscallRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_]{1,64}$`) })
	secretNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })
)

func (p *Policy) problems() []problem {
	var out []problem
	add := func(msg string, path ...string) { out = append(out, problem{path: path, msg: msg}) }
	oneOf := func(v string, allowed []string, path ...string) {
		if v == "" {
			return
		}
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		add(fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")), path...)
	}

	if p.Version != Version {
		add(fmt.Sprintf("version must be %d", Version), "version")
	}
	oneOf(p.IsolationLevel, []string{IsolationProcess, IsolationGVisor, IsolationMicroVM}, "isolation")

	r := p.Resources
	for _, l := range []struct {
		name string
		v    int64
	}{{"memory", int64(r.Memory)}, {"pids", r.Pids}, {"timeout", int64(r.Timeout)}, {"disk", int64(r.Disk)}, {"output", int64(r.Output)}, {"files", r.Files}} {
		if l.v < 0 {
			add("must not be negative", "resources", l.name)
		}
	}
	if checkFinite(r.CPUs) != nil || r.CPUs < 0 || r.CPUs > 1024 {
		add("must be a number of cores between 0 and 1024", "resources", "cpus")
	} else if r.CPUs > 0 && r.CPUs < 0.01 {
		add("must be at least 0.01 cores (or 0 for no limit)", "resources", "cpus")
	}
	if r.Files > MaxFiles {
		add(fmt.Sprintf("must be at most %d", MaxFiles), "resources", "files")
	}
	if r.Memory > 0 && r.Memory < 4<<20 {
		add("is below 4Mi, too little to start a process (0 means no limit)", "resources", "memory")
	}

	fs := p.Filesystem
	oneOf(fs.Workspace, []string{WorkspaceRW, WorkspaceRO}, "filesystem", "workspace")
	for i, pth := range fs.Read {
		if err := checkHostPath(pth, false); err != nil {
			add(err.Error(), "filesystem", "read", strconv.Itoa(i))
		}
	}
	for i, pth := range fs.Write {
		if err := checkHostPath(pth, true); err != nil {
			add(err.Error(), "filesystem", "write", strconv.Itoa(i))
		}
	}
	for i, pth := range fs.WorkspaceRoots {
		if err := checkHostPath(pth, true); err != nil {
			add(err.Error(), "filesystem", "workspace_roots", strconv.Itoa(i))
		}
	}
	for i, pat := range fs.Protected {
		if err := workspace.ValidatePattern(pat); err != nil {
			add(err.Error(), "filesystem", "protected", strconv.Itoa(i))
		}
	}
	for i, pat := range fs.ReviewExempt {
		if err := workspace.ValidatePattern(pat); err != nil {
			add(err.Error(), "filesystem", "review_exempt", strconv.Itoa(i))
		}
	}

	n := p.Network
	oneOf(n.Default, []string{NetworkDeny, NetworkAsk}, "network", "default")
	oneOf(n.Mode, []string{sandbox.NetworkNone, sandbox.NetworkProxy, sandbox.NetworkHost}, "network", "mode")
	for i, s := range n.Allow {
		if _, err := ParseRule(s); err != nil {
			add(err.Error(), "network", "allow", strconv.Itoa(i))
		}
	}
	for i, s := range n.Deny {
		if _, err := ParseRule(s); err != nil {
			add(err.Error(), "network", "deny", strconv.Itoa(i))
		}
	}
	if n.MaxConnections < 0 || n.MaxConnections > MaxConnectionsLimit {
		add(fmt.Sprintf("must be between 1 and %d (0 or absent: the default, %d)", MaxConnectionsLimit, sandbox.DefaultMaxConnections), "network", "max_connections")
	}
	if n.MaxConnectionRate < 0 || n.MaxConnectionRate > MaxConnectionRateLimit {
		add(fmt.Sprintf("must be between 1 and %d (0 or absent: the default, %d)", MaxConnectionRateLimit, sandbox.DefaultMaxConnectionRate), "network", "max_connection_rate")
	}

	for i, name := range p.Env.Pass {
		if !envNameRE().MatchString(name) {
			add(fmt.Sprintf("%q is not an environment variable name", name), "env", "pass", strconv.Itoa(i))
		}
	}
	for k, v := range p.Env.Set {
		if !envNameRE().MatchString(k) {
			out = append(out, problem{[]string{"env", "set", k}, fmt.Sprintf("%q is not an environment variable name", k), true})
		}
		if strings.ContainsRune(v, 0) {
			add("value contains a NUL byte", "env", "set", k)
		}
	}

	for k, v := range p.Env.Secrets {
		if !envNameRE().MatchString(k) {
			out = append(out, problem{[]string{"env", "secrets", k}, fmt.Sprintf("%q is not an environment variable name", k), true})
		}
		if !secretNameRE().MatchString(v) {
			add(fmt.Sprintf("%q is not a secret name", v), "env", "secrets", k)
		}
		if _, dup := p.Env.Set[k]; dup {
			add("is also in env.set; a variable holds a value or a secret's placeholder, not both", "env", "secrets", k)
		}
	}

	oneOf(p.Syscalls.Profile, []string{ProfileDefault, ProfileStrict}, "syscalls", "profile")
	for i, name := range p.Syscalls.Deny {
		if !syscallRE().MatchString(name) {
			add(fmt.Sprintf("%q is not a syscall name", name), "syscalls", "deny", strconv.Itoa(i))
		}
	}
	return out
}

// checkHostPath accepts an absolute path without "." or ".." segments.
// Write paths may not be the root or a kernel interface.
func checkHostPath(p string, write bool) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	if strings.ContainsRune(p, 0) {
		return errors.New("path contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%q: . and .. are not allowed in paths", p)
		}
	}
	c := path.Clean(p)
	// The host's /proc and /sys show other processes' environments and
	// kernel knobs; a sandbox gets its own /proc instead.
	kernel := []string{"/proc", "/sys"}
	if write {
		if c == "/" {
			return errors.New("the host root cannot be writable")
		}
		kernel = append(kernel, "/dev", "/boot")
	}
	for _, k := range kernel {
		if c == k || strings.HasPrefix(c, k+"/") {
			return fmt.Errorf("%q: host %s cannot be mounted into a sandbox", p, k)
		}
	}
	return nil
}

// Rule is one parsed network rule; see egress.Rule.
type Rule = egress.Rule

// ParseRule parses a network rule; see egress.ParseRule.
func ParseRule(s string) (Rule, error) { return egress.ParseRule(s) }

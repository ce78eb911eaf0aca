package procrt

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
)

// OrDefault sets *v to def when it is not positive: an option left unset.
func OrDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// LookPath is an adapter's default Binary: name in PATH, version unknown.
func LookPath(name string) func() (path, version string, err error) {
	return func() (string, string, error) {
		p, err := exec.LookPath(name)
		return p, "", err
	}
}

// Locate checks a session's working directory (absolute, a directory) and
// finds the agent's executable; errors start with name, and missing says
// what is not installed ("the CLI is not installed (run …)").
func Locate(name, cwd string, binary func() (string, string, error), missing string) (string, error) {
	if !filepath.IsAbs(cwd) {
		return "", fmt.Errorf("%s: the working directory %q is not an absolute path", name, cwd)
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s: the working directory %q is not a directory", name, cwd)
	}
	bin, _, err := binary()
	if err != nil || bin == "" {
		if err == nil {
			err = errors.New("no path")
		}
		return "", fmt.Errorf("%s: %s: %w", name, missing, err)
	}
	return bin, nil
}

// EnvList is env as a sorted "K=V" list: the complete environment of a
// process.
func EnvList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// BasePath is the PATH of agent processes: the agent's own directory
// first (npm's .bin holds node scripts), then the system's.
func BasePath(bin string) string {
	return filepath.Dir(bin) + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin"
}

// Homes are an adapter's home directories, below Dir: Shared (relative,
// "" for Dir itself) for its sessions on the host, and Sessions/ID for
// each sandboxed session (keyed by the agentbox session id, so a resumed
// session gets its own back, and a sandboxed agent sees no other
// session's files).
type Homes struct {
	Dir              *agent.Dir
	Shared, Sessions string
	// Setup, when set, writes the agent's config files into a home each
	// time a session starts in it.
	Setup func(home string) error
}

// For makes (and sets up) the home of a session.
func (h *Homes) For(sessionID string, sandboxed bool) (string, error) {
	dir, err := h.Dir.Make()
	if err != nil {
		return "", err
	}
	home := filepath.Join(dir, h.Shared)
	if sandboxed {
		if !agent.PlainName(sessionID) {
			return "", fmt.Errorf("%q is not a session id", sessionID)
		}
		home = filepath.Join(dir, h.Sessions, sessionID)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", err
	}
	if h.Setup != nil {
		if err := h.Setup(home); err != nil {
			return "", err
		}
	}
	return home, nil
}

// RemoveState removes the home of a sandboxed session (agent.SandboxNeeder),
// making and writing nothing.
func (h *Homes) RemoveState(sessionID string) error {
	dir := h.Dir.Made()
	if dir != "" {
		dir = filepath.Join(dir, h.Sessions)
	}
	return agent.RemoveSessionDir(dir, sessionID)
}

// SandboxPaths are what a sandboxed session needs (agent.SandboxNeeder):
// the installed agent (read) and the session's home (write).
func (h *Homes) SandboxPaths(sessionID string, binary func() (string, string, error)) (read, write []string) {
	if home, err := h.For(sessionID, true); err == nil {
		write = append(write, home)
	}
	if bin, _, err := binary(); err == nil && bin != "" {
		read = append(read, agent.InstallRoot(bin))
	}
	return read, write
}

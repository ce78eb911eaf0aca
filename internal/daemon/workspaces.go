package daemon

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// A session's working directory becomes the sandbox's writable workspace,
// whose changes reach the host: it is where the operator's global policy
// says workspaces may be (filesystem.workspace_roots, by default the data
// dir's workspaces), and never a place host programs run files from.
//
// systemDirs are never a workspace nor inside one; /var is one except for
// the daemon's own data dir. Top-level directories named lib* are too.
var systemDirs = []string{"/etc", "/usr", "/bin", "/sbin", "/boot", "/dev", "/proc", "/sys", "/run", "/var", "/root", "/opt", "/snap", "/lost+found"}

// sharedDirs are never a workspace themselves (what is below them may be).
var sharedDirs = []string{"/", "/tmp", "/home"}

// workspaceRules checks session working directories against the global
// policy's workspace roots.
type workspaceRules struct {
	// dataDir is the daemon's data dir and own its workspaces dir (the
	// default root), both with symlinks resolved.
	dataDir, own string
	// passwd is read for the users' home directories.
	passwd string
	// home is the daemon's own $HOME ("" when unknown).
	home string
}

func newWorkspaceRules(dataDir string) (*workspaceRules, error) {
	own := filepath.Join(dataDir, "workspaces")
	if err := os.MkdirAll(own, 0o700); err != nil {
		return nil, fmt.Errorf("workspaces dir: %w", err)
	}
	w := &workspaceRules{dataDir: resolve(dataDir), own: resolve(own), passwd: "/etc/passwd"}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		w.home = h
	}
	return w, nil
}

// roots returns the global policy's workspace roots, or the default.
func (w *workspaceRules) roots(global *policy.Policy) []string {
	if global != nil && len(global.Filesystem.WorkspaceRoots) > 0 {
		return global.Filesystem.WorkspaceRoots
	}
	return []string{w.own}
}

// checkRoots refuses roots that are, or hold, what is never a workspace.
func (w *workspaceRules) checkRoots(roots []string) error {
	homes := w.homes()
	for i, r := range roots {
		if why := w.never(resolve(r), homes); why != "" {
			return fmt.Errorf("global policy: filesystem.workspace_roots[%d]: %s %s, which can never hold workspaces", i, r, why)
		}
	}
	return nil
}

// check returns cwd with symlinks resolved when it may be a session's
// working directory under global; errors wrap engine.ErrPolicy.
func (w *workspaceRules) check(global *policy.Policy, cwd string) (string, error) {
	p, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", fmt.Errorf("%w: cwd %s: %w", engine.ErrPolicy, cwd, err)
	}
	homes := w.homes() // read once per check
	if why := w.never(p, homes); why != "" {
		return "", fmt.Errorf("%w: cwd %s: %s, which is never a workspace", engine.ErrPolicy, shown(cwd, p), why)
	}
	if p == w.own {
		return "", fmt.Errorf("%w: cwd %s holds every session's workspace", engine.ErrPolicy, shown(cwd, p))
	}
	roots := w.roots(global)
	for _, r := range roots {
		r = resolve(r)
		if w.never(r, homes) != "" || !sandbox.Within(p, r) {
			continue // a root that now resolves somewhere forbidden holds nothing
		}
		rel, _ := filepath.Rel(r, p)
		if slices.ContainsFunc(strings.Split(rel, string(filepath.Separator)), func(s string) bool { return s != "." && strings.HasPrefix(s, ".") }) {
			return "", fmt.Errorf("%w: cwd %s lies in a hidden directory (such as .git) of workspace root %s, where host tools keep what they run", engine.ErrPolicy, shown(cwd, p), r)
		}
		return p, nil
	}
	return "", fmt.Errorf("%w: cwd %s is not inside a workspace root of the operator's global policy (filesystem.workspace_roots: [%s])", engine.ErrPolicy, shown(cwd, p), strings.Join(roots, ", "))
}

// never says why p (absolute, resolved) can never be a workspace or hold
// one, or "" when it can; homes is w.homes().
func (w *workspaceRules) never(p string, homes []string) string {
	if sandbox.Within(p, w.own) {
		return "" // the daemon's own workspaces
	}
	switch {
	case sandbox.Within(p, w.dataDir):
		return "is inside agentbox's data directory"
	case sandbox.Within(w.dataDir, p):
		return "holds agentbox's data directory"
	case slices.Contains(sharedDirs, p):
		return "is a directory shared by the whole host"
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if strings.HasPrefix(top, "lib") {
		return "is a system path (/" + top + ")"
	}
	for _, d := range systemDirs {
		if sandbox.Within(p, d) {
			return "is a system path (" + d + ")"
		}
	}
	for _, h := range homes {
		switch {
		case p == h:
			return "is a home directory"
		case sandbox.Within(h, p):
			return "holds the home directory " + h
		}
	}
	return ""
}

// homes lists the host's home directories: the users' of /etc/passwd,
// /root and the daemon's $HOME, each as written and resolved.
func (w *workspaceRules) homes() []string {
	hs := []string{"/root"}
	if w.home != "" {
		hs = append(hs, w.home)
	}
	if f, err := os.Open(w.passwd); err == nil {
		sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 7 && filepath.IsAbs(fields[5]) {
				hs = append(hs, fields[5])
			}
		}
		_ = f.Close() // read-only
	}
	out := make([]string, 0, 2*len(hs))
	for _, h := range hs {
		out = append(out, filepath.Clean(h), resolve(h))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// resolve returns p clean with symlinks resolved, as far as it exists.
func resolve(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	// Resolve the longest existing prefix, so a symlinked parent of a
	// path not made yet is still seen through.
	dir, base := filepath.Split(p)
	if dir == "" || dir == p || base == "" {
		return p
	}
	return filepath.Join(resolve(filepath.Clean(dir)), base)
}

// shown names a path as given, and where it leads when that differs.
func shown(given, resolved string) string {
	if filepath.Clean(given) == resolved {
		return resolved
	}
	return given + " (" + resolved + ")"
}

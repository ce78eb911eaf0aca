//go:build unix

package workspace

import (
	"context"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Gate judges changes made to a workspace from outside its sandbox (the
// files API) by the commit's own rules: the same decide, with the same
// protected patterns, host git configuration rules and .git rules a commit
// with these Options applies. A change the commit would drop is refused.
// Hidden paths are not held: the caller of the API is the reviewer the
// commit would ask.
type Gate struct {
	c *commit
}

// NewGate reads the host's git configuration of the workspace (as a commit
// does, before anything is applied) and compiles opts' patterns.
func NewGate(ctx context.Context, workspace string, opts Options) (*Gate, error) {
	root, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: resolve %s: %w", workspace, err)
	}
	hostFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace: open %s: %w", root, err)
	}
	defer closeFd(hostFd)
	var rootSt unix.Stat_t
	if err := unix.Fstat(hostFd, &rootSt); err != nil {
		return nil, fmt.Errorf("workspace: stat %s: %w", root, err)
	}
	rules := compileRules(opts)
	c := &commit{
		ctx: ctx, opts: opts,
		protected: rules.protected, exempt: rules.exempt,
		gitRules: NewMatcher(nil),
		host:     &dirCache{root: hostFd},
	}
	defer c.host.close()
	c.rootScope = rootScope(root)
	if !opts.Private {
		repos, err := findRepos(c.host)
		if err != nil {
			return nil, fmt.Errorf("workspace: %s: %w", root, err)
		}
		env := defaultGitEnv()
		if opts.gitEnv != nil {
			env = *opts.gitEnv
		}
		alias, _ := filepath.Abs(workspace)
		grs, err := hostGitRules(root, alias, repos, int(rootSt.Uid), env)
		if err != nil {
			return nil, fmt.Errorf("workspace: %s: %w", root, err)
		}
		for _, r := range grs {
			c.gitRules.Add(r.pattern, r.rule)
		}
	}
	c.host = nil // closed above; Check reads nothing of the host
	return &Gate{c: c}, nil
}

// Check returns the rule a commit would drop a change at rel
// (slash-separated, relative to the workspace) by, judging each component
// from the root as the commit's walk does; ok is true when it would apply
// it. isDir says whether rel itself is a directory. Inside a git directory
// only the git allowlist's entries pass, and nothing named .git outside
// one.
func (g *Gate) Check(rel string, isDir bool) (rule string, ok bool) {
	segs := foldPath(rel)
	sc := g.c.rootScope
	sc.reviewed = true
	for i := range segs {
		dec := g.c.decide(sc, segs[:i+1], isDir || i < len(segs)-1)
		switch dec.kind {
		case decProtected, decDotGit, decGit:
			return dec.rule, false
		}
		sc = dec.sc
	}
	return "", true
}

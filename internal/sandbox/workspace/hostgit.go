package workspace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The host's git configuration names files that git runs or loads: the
// hooks directory (core.hooksPath), included config files (include.path,
// includeIf.*.path) and the commands of command-valued keys
// (core.fsmonitor, filters, aliases...). When one of them lies inside the
// workspace, a sandbox that writes it makes the host's next git command
// run its code, although no name in it looks special. So before applying
// anything, the commit reads the host's git configuration, on the host
// side only (never a file from the upper layer), and protects every such
// path that falls in the workspace.
//
// The configuration read is that of every repository git could use from
// the workspace: the repository at the workspace root, every repository
// enclosing it (git walks up to find one), the repositories whose .git the
// host has at directories the upper layer touches, and the daemon user's
// global and system files. .git files ("gitdir: ...") and commondir are
// resolved on the host. includeIf conditions are not evaluated: every
// included file counts.

// gitRule is one protected pattern derived from the host's git config.
type gitRule struct{ pattern, rule string }

// gitEnv is where the daemon user's global config lives; tests replace it.
type gitEnv struct {
	home                   string
	xdgConfigHome          string
	globalFile, systemFile string // GIT_CONFIG_GLOBAL / GIT_CONFIG_SYSTEM
	noSystem               bool
}

func defaultGitEnv() gitEnv {
	home, _ := os.UserHomeDir()
	return gitEnv{
		home:          home,
		xdgConfigHome: os.Getenv("XDG_CONFIG_HOME"),
		globalFile:    os.Getenv("GIT_CONFIG_GLOBAL"),
		systemFile:    os.Getenv("GIT_CONFIG_SYSTEM"),
		noSystem:      os.Getenv("GIT_CONFIG_NOSYSTEM") != "",
	}
}

// gitHooks are the hook names git runs (githooks(5), git 2.39), for a
// hooks directory that is a whole worktree: then only these names in it
// are protected, not the whole tree.
var gitHooks = []string{
	"applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
	"prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
	"pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
	"reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
	"fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
	"post-index-change",
}

// hostGitRules returns the patterns protecting the workspace paths the
// host's git configuration runs or loads. root is the workspace (symlinks
// resolved), alias its path as given; repoDirs are workspace-relative
// directories where the host has a .git.
func hostGitRules(root, alias string, repoDirs []string, env gitEnv) []gitRule {
	g := &gitScan{root: root, alias: alias, env: env, seen: map[string]bool{}, worktrees: map[string]bool{}}
	// Worktrees first, so a hooks directory that is a worktree is known.
	var repos []string
	for dir := root; ; dir = filepath.Dir(dir) {
		repos = append(repos, dir)
		if dir == "/" || dir == "." {
			break
		}
	}
	for _, rel := range repoDirs {
		repos = append(repos, filepath.Join(root, filepath.FromSlash(rel)))
	}
	for _, w := range repos {
		g.worktrees[w] = true
	}
	if !env.noSystem {
		sys := env.systemFile
		if sys == "" {
			sys = "/etc/gitconfig"
		}
		g.file(sys, "", 0)
	}
	if env.globalFile != "" {
		g.file(env.globalFile, "", 0)
	} else {
		xdg := env.xdgConfigHome
		if xdg == "" && env.home != "" {
			xdg = filepath.Join(env.home, ".config")
		}
		if xdg != "" {
			g.file(filepath.Join(xdg, "git", "config"), "", 0)
		}
		if env.home != "" {
			g.file(filepath.Join(env.home, ".gitconfig"), "", 0)
		}
	}
	for _, w := range repos {
		g.repo(w)
	}
	return g.rules
}

type gitScan struct {
	root, alias string
	env         gitEnv
	seen        map[string]bool // config files read (by path and worktree)
	files       int
	worktrees   map[string]bool
	rules       []gitRule
}

// repo reads the configuration of the repository whose worktree (or bare
// git directory) is w, if there is one.
func (g *gitScan) repo(w string) {
	gitdir := ""
	dotgit := filepath.Join(w, ".git")
	if fi, err := os.Stat(dotgit); err == nil {
		switch {
		case fi.IsDir():
			gitdir = dotgit
		case fi.Mode().IsRegular():
			b, err := readBounded(dotgit, 4096)
			if err != nil {
				return
			}
			line, _, _ := strings.Cut(string(b), "\n")
			t, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir:")
			if !ok {
				return
			}
			t = strings.TrimSpace(t)
			if !filepath.IsAbs(t) {
				t = filepath.Join(w, t)
			}
			gitdir = t
		}
	} else if bareShaped(w) {
		gitdir = w
	}
	if gitdir == "" {
		return
	}
	common := gitdir
	if b, err := readBounded(filepath.Join(gitdir, "commondir"), 4096); err == nil {
		c := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		if c != "" {
			if !filepath.IsAbs(c) {
				c = filepath.Join(gitdir, c)
			}
			common = c
		}
	}
	g.file(filepath.Join(common, "config"), w, 0)
	g.file(filepath.Join(gitdir, "config.worktree"), w, 0)
}

func bareShaped(dir string) bool {
	return gitShape(func(name string) bool {
		real := map[string]string{"head": "HEAD", "objects": "objects", "refs": "refs", "commondir": "commondir"}[name]
		_, err := os.Lstat(filepath.Join(dir, real))
		return err == nil
	})
}

// file reads one config file. worktree is the repository's worktree
// relative paths in it are resolved against ("" for the global and system
// files: their relative paths apply in every repository).
func (g *gitScan) file(name, worktree string, depth int) {
	key := worktree + "\x00" + name
	if depth > maxIncludeDepth || g.seen[key] || g.files >= maxConfigFiles {
		return
	}
	g.seen[key] = true
	g.files++
	data, err := readBounded(name, maxConfigBytes)
	if err != nil {
		return
	}
	entries, _ := parseGitConfig(data) // git stops at an error; so do we
	for _, e := range entries {
		if e.NoValue || e.Value == "" {
			continue
		}
		switch {
		case e.Key == "include.path" || (strings.HasPrefix(e.Key, "includeif.") && strings.HasSuffix(e.Key, ".path")):
			p, ok := g.expand(e.Value)
			if !ok {
				continue
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(name), p)
			}
			g.protect(p, "", "git-config:"+e.Key, false)
			g.file(p, worktree, depth+1)
		case e.Key == "core.hookspath":
			p, ok := g.expand(e.Value)
			if !ok {
				continue
			}
			g.protect(p, worktree, "git-config:"+e.Key, true)
		case commandKey(e.Key, e.Value):
			for _, tok := range commandPaths(e.Value) {
				if p, ok := g.expand(tok); ok {
					g.protect(p, worktree, "git-config:"+e.Key, false)
				}
			}
		}
	}
}

// expand does git's pathname expansion of ~ and ~user; %(prefix)/ paths
// (relative to git's install prefix) are outside any workspace.
func (g *gitScan) expand(p string) (string, bool) {
	if strings.HasPrefix(p, "%(prefix)/") {
		return "", false
	}
	if !strings.HasPrefix(p, "~") {
		return p, true
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	home := g.env.home
	if name != "" {
		u, err := user.Lookup(name)
		if err != nil {
			return "", false
		}
		home = u.HomeDir
	}
	if home == "" {
		return "", false
	}
	return filepath.Join(home, rest), true
}

// protect adds a rule for the host path p if it lies in the workspace. A
// relative p is resolved against worktree, or, from a global or system
// file, protected at every depth of the workspace (it applies in every
// repository, including ones created later). hooks marks a hooks
// directory: one that is a whole worktree (or the workspace) protects only
// the hook names in it.
func (g *gitScan) protect(p, worktree, rule string, hooks bool) {
	if !filepath.IsAbs(p) {
		if worktree == "" {
			rel := path.Clean(filepath.ToSlash(p))
			switch {
			case rel == "." && hooks:
				for _, h := range gitHooks {
					g.add("**/"+h, rule)
				}
			case rel == "." || rel == ".." || strings.HasPrefix(rel, "../"):
				// Above a worktree: outside the workspace, or the
				// workspace root's hook names, which "." covers.
			default:
				g.add("**/"+relPattern(rel)+"/**", rule)
			}
			return
		}
		p = filepath.Join(worktree, p)
	}
	p = filepath.Clean(p)
	for _, cand := range []string{p, resolveExisting(p)} {
		for _, base := range []string{g.root, g.alias} {
			if base == "" {
				continue
			}
			rel, ok := within(base, cand)
			if !ok {
				continue
			}
			whole := rel == "" || g.worktrees[filepath.Join(g.root, filepath.FromSlash(rel))]
			prefix := ""
			if rel != "" {
				prefix = relPattern(rel) + "/"
			}
			switch {
			case hooks && whole:
				for _, h := range gitHooks {
					g.add(prefix+h, rule)
				}
			case rel != "":
				g.add(prefix+"**", rule)
			}
			// A file or command that is the workspace directory itself
			// cannot be read or run: nothing to protect.
		}
	}
}

func (g *gitScan) add(pattern, rule string) {
	for _, r := range g.rules {
		if r.pattern == pattern {
			return
		}
	}
	g.rules = append(g.rules, gitRule{pattern: pattern, rule: rule})
}

// within returns p relative to base ("" for base itself) if p is base or
// below it.
func within(base, p string) (string, bool) {
	base = filepath.Clean(base)
	if p == base {
		return "", true
	}
	prefix := base + "/"
	if base == "/" {
		prefix = "/"
	}
	if rest, ok := strings.CutPrefix(p, prefix); ok {
		return filepath.ToSlash(rest), true
	}
	return "", false
}

// resolveExisting resolves the symlinks of the longest existing prefix of
// p and appends the rest.
func resolveExisting(p string) string {
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == "/" || dir == "." {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// relPattern turns a clean relative path into a pattern matching exactly
// it: wildcards escaped, and trailing dots and spaces dropped (names are
// compared folded, without them; a segment of only dots matches any).
func relPattern(rel string) string {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		t := strings.TrimRight(s, ". ")
		if t == "" {
			segs[i] = "*"
			continue
		}
		var b strings.Builder
		for _, r := range t {
			if strings.ContainsRune(`*?[]\`, r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		segs[i] = b.String()
	}
	return strings.Join(segs, "/")
}

// commandKeys are the config keys whose values git runs as commands
// (git-config(1), 2.39); "*" is one subsection. alias.* counts only for
// "!" aliases.
var commandKeys = []string{
	"core.fsmonitor", "core.sshcommand", "core.editor", "core.pager", "core.askpass", "core.gitproxy",
	"sequence.editor", "diff.external", "diff.*.command", "diff.*.textconv", "difftool.*.cmd", "difftool.*.path",
	"mergetool.*.cmd", "mergetool.*.path", "merge.*.driver", "filter.*.clean", "filter.*.smudge", "filter.*.process",
	"credential.helper", "credential.*.helper", "gpg.program", "gpg.*.program", "gpg.ssh.defaultkeycommand",
	"pager.*", "interactive.difffilter", "uploadpack.packobjectshook", "remote.*.uploadpack", "remote.*.receivepack",
	"man.*.cmd", "man.*.path", "browser.*.cmd", "browser.*.path", "web.browser", "sendemail.smtpserver",
	"sendemail.*.smtpserver", "alias.*",
}

func commandKey(key, value string) bool {
	for _, k := range commandKeys {
		if ok, _ := path.Match(strings.ReplaceAll(k, ".", "/"), strings.ReplaceAll(key, ".", "/")); ok {
			if k == "alias.*" {
				return strings.HasPrefix(strings.TrimSpace(value), "!")
			}
			return true
		}
	}
	// A subsection may hold dots ("diff.my.tool.command"): match the
	// section and the name only.
	sec, rest, _ := strings.Cut(key, ".")
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return false
	}
	name := rest[i+1:]
	for _, k := range commandKeys {
		ks, kr, _ := strings.Cut(k, ".")
		if ks == sec && strings.HasPrefix(kr, "*.") && kr[2:] == name {
			return true
		}
	}
	return false
}

// commandPaths returns the words of a shell command that name paths (hold
// a slash or start with ~): git runs a command without a slash from PATH,
// one with a slash from where it runs.
func commandPaths(cmd string) []string {
	var out []string
	words := strings.FieldsFunc(cmd, func(r rune) bool {
		return strings.ContainsRune(" \t\n;|&()<>`$\"'!=", r)
	})
	for _, w := range words {
		if strings.Contains(w, "/") || strings.HasPrefix(w, "~") {
			out = append(out, w)
		}
	}
	return out
}

// readBounded reads at most limit bytes of a regular file; a longer file
// or anything else is an error. It never blocks on a fifo or a device
// (opened non-blocking, checked before reading).
func readBounded(name string, limit int64) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(f, limit+1)); err != nil {
		return nil, err
	}
	if int64(b.Len()) > limit {
		return nil, errConfigTooBig
	}
	return b.Bytes(), nil
}

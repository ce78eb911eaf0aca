//go:build unix

package workspace

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The host's git configuration names files that git runs or loads: the
// hooks directory (core.hooksPath), the template directory new
// repositories copy their hooks from (init.templateDir), included config
// files (include.path, includeIf.*.path) and the commands of
// command-valued keys (core.fsmonitor, filters, aliases...). When one of
// them lies inside the workspace, a sandbox that writes it makes the
// host's next git command run its code, although no name in it looks
// special. So before applying anything, the commit reads the host's git
// configuration, on the host side only (never a file from the upper
// layer), and protects every such path that falls in the workspace.
//
// The configuration read is that of every repository git could use in the
// workspace, touched by the sandbox's changes or not: the repository at
// the workspace root, every repository enclosing it (git walks up to find
// one), and every repository the host has anywhere in the workspace (a
// .git directory or file, or a bare repository's layout), found by reading
// the whole host workspace (findRepos; past maxHostDirs directories the
// commit fails closed); and the global and system files of the daemon's
// user and of the user who owns the workspace (whose git runs there).
// .git files ("gitdir: ...") and commondir are resolved on the host.
// includeIf conditions are not evaluated: every included file counts.
//
// A command value is split into words, and every word but an option
// ("-x") is protected as a path, relative to the worktree git runs it in
// (the top of the repository; for a global or system file, every
// repository's, and every directory when the workspace is in none): "sh
// build-helper.sh" protects build-helper.sh. Protecting a word that names
// no file ("log", "sh") is the safe mistake.

// maxHostDirs bounds the host directories one commit reads to find the
// workspace's repositories. A workspace with more fails every commit: a
// repository the commit did not see could run what it applies. (A
// variable for the tests.)
var maxHostDirs = 1 << 18

// gitRule is one protected pattern derived from the host's git config.
type gitRule struct{ pattern, rule string }

// gitEnv is where the daemon user's global config lives; tests replace it.
type gitEnv struct {
	home                   string
	xdgConfigHome          string
	globalFile, systemFile string // GIT_CONFIG_GLOBAL / GIT_CONFIG_SYSTEM
	noSystem               bool
	// passwd is the user database the workspace owner's home is read
	// from ("" is /etc/passwd).
	passwd string
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

// findRepos lists the workspace-relative directories where the host has a
// repository: an entry named .git (a git directory, a "gitdir:" file or a
// symlink), or the layout of a git directory (a bare repository). It reads
// every directory of the host workspace through host, never following a
// symlink and never into a .git, and fails past maxHostDirs directories or
// DefaultMaxDepth levels.
func findRepos(host *dirCache) ([]string, error) {
	type frame struct {
		rel     string
		depth   int
		listed  bool
		subdirs []string
		i       int
	}
	var repos []string
	dirs := 0
	buf := make([]byte, 64<<10)
	// list reads one directory: whether it is a repository, and its
	// subdirectories.
	list := func(rel string) (subdirs []string, err error) {
		fd, err := host.open(rel)
		if err != nil {
			if rel != "" && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)) {
				return nil, nil // gone, or replaced since it was listed
			}
			return nil, fmt.Errorf("read host dir %s: %w", rel, err)
		}
		repo, head := false, false
		err = readDirents(fd, buf, func(name []byte, typ uint8) {
			switch {
			case foldIs(name, gitDotGit):
				repo = true
				return
			case foldIs(name, "head"):
				head = true
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					typ = unix.DT_DIR
				}
			}
			if typ == unix.DT_DIR {
				subdirs = append(subdirs, string(name))
			}
		})
		if err != nil {
			return nil, fmt.Errorf("read host dir %s: %w", rel, err)
		}
		if repo || (head && bareShapedFd(fd)) {
			repos = append(repos, rel)
		}
		return subdirs, nil
	}
	stack := []*frame{{}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if !f.listed {
			if dirs++; dirs > maxHostDirs {
				return nil, fmt.Errorf("the host workspace has more than %d directories: its git repositories cannot all be found", maxHostDirs)
			}
			subdirs, err := list(f.rel)
			if err != nil {
				return nil, err
			}
			f.subdirs, f.listed = subdirs, true
		}
		if f.i >= len(f.subdirs) {
			stack = stack[:len(stack)-1]
			continue
		}
		name := f.subdirs[f.i]
		f.i++
		if f.depth+1 > DefaultMaxDepth {
			return nil, fmt.Errorf("the host workspace is deeper than %d levels: its git repositories cannot all be found", DefaultMaxDepth)
		}
		stack = append(stack, &frame{rel: join(f.rel, name), depth: f.depth + 1})
	}
	return repos, nil
}

// foldIs reports whether the name folds to target (folded), without
// allocating for an ASCII name.
func foldIs(name []byte, target string) bool {
	if ascii(string(name)) {
		return strings.EqualFold(trimTrailing(string(name)), target)
	}
	return Fold(string(name)) == target
}

// hostGitRules returns the patterns protecting the workspace paths the
// host's git configuration runs or loads. root is the workspace (symlinks
// resolved), alias its path as given; repos are the workspace-relative
// directories where the host has a repository (findRepos); owner is the
// uid owning the workspace. It fails when the configuration cannot be read
// whole (more than maxConfigFiles files, a file over maxConfigBytes or
// maxConfigEntries).
func hostGitRules(root, alias string, repos []string, owner int, env gitEnv) ([]gitRule, error) {
	g := &gitScan{root: root, alias: alias, env: env, seen: map[string]bool{}, worktrees: map[string]bool{}}
	// Worktrees first, so a hooks directory that is a worktree is known,
	// and so are the places git runs a global command from.
	var dirs []string
	for dir := root; ; dir = filepath.Dir(dir) {
		dirs = append(dirs, dir)
		if dir == "/" || dir == "." {
			break
		}
	}
	for _, rel := range repos {
		dirs = append(dirs, filepath.Join(root, filepath.FromSlash(rel)))
	}
	type repo struct{ worktree, gitdir, common string }
	var found []repo
	for _, w := range dirs {
		g.worktrees[w] = true
		if gitdir, common, ok := gitDirOf(w); ok && !slices.Contains(g.tops, w) {
			found = append(found, repo{w, gitdir, common})
			g.tops = append(g.tops, w)
			if _, ok := within(w, root); ok {
				g.inRepo = true
			}
		}
	}
	daemonHome := env.home
	ownerHome := homeOf(owner, env.passwd)
	homes := []string{daemonHome}
	if ownerHome != "" && ownerHome != daemonHome {
		homes = append(homes, ownerHome)
	}
	if !env.noSystem {
		sys := env.systemFile
		if sys == "" {
			sys = "/etc/gitconfig"
		}
		g.file(sys, "", homes, 0)
	}
	if env.globalFile != "" {
		g.file(env.globalFile, "", []string{daemonHome}, 0)
	} else {
		g.globalFiles(daemonHome, env.xdgConfigHome)
	}
	if len(homes) > 1 {
		// The owner's own git reads its files (its XDG_CONFIG_HOME
		// unknown: the default).
		g.globalFiles(ownerHome, "")
	}
	for _, r := range found {
		g.file(filepath.Join(r.common, "config"), r.worktree, homes, 0)
		g.file(filepath.Join(r.gitdir, "config.worktree"), r.worktree, homes, 0)
	}
	return g.rules, g.err
}

// globalFiles reads the global files of the user whose home is home.
func (g *gitScan) globalFiles(home, xdg string) {
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		g.file(filepath.Join(xdg, "git", "config"), "", []string{home}, 0)
	}
	if home != "" {
		g.file(filepath.Join(home, ".gitconfig"), "", []string{home}, 0)
	}
}

// homeOf returns the home directory of uid from the user database at
// passwd ("" is /etc/passwd), or "".
func homeOf(uid int, passwd string) string {
	if passwd == "" {
		passwd = "/etc/passwd"
	}
	b, _, err := readFile(unix.AT_FDCWD, passwd, 4<<20, true)
	if err != nil {
		return ""
	}
	want := strconv.Itoa(uid)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 6 && f[2] == want && filepath.IsAbs(f[5]) {
			return filepath.Clean(f[5])
		}
	}
	return ""
}

type gitScan struct {
	root, alias string
	env         gitEnv
	seen        map[string]bool // config files read (by path and worktree)
	files       int
	worktrees   map[string]bool
	// tops are the worktrees (or bare git directories) of the
	// repositories found; inRepo: the workspace lies in one of them.
	tops   []string
	inRepo bool
	rules  []gitRule
	// err: a configuration that could not be read whole.
	err error
}

// gitDirOf returns the git directory and common directory of the
// repository whose worktree (or bare git directory) is w, if there is
// one.
func gitDirOf(w string) (gitdir, common string, ok bool) {
	dotgit := filepath.Join(w, ".git")
	if fi, err := os.Stat(dotgit); err == nil {
		switch {
		case fi.IsDir():
			gitdir = dotgit
		case fi.Mode().IsRegular():
			b, _, err := readFile(unix.AT_FDCWD, dotgit, 4096, true)
			if err != nil {
				return "", "", false
			}
			line, _, _ := strings.Cut(string(b), "\n")
			t, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir:")
			if !ok {
				return "", "", false
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
		return "", "", false
	}
	common = gitdir
	if b, _, err := readFile(unix.AT_FDCWD, filepath.Join(gitdir, "commondir"), 4096, true); err == nil {
		c := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		if c != "" {
			if !filepath.IsAbs(c) {
				c = filepath.Join(gitdir, c)
			}
			common = c
		}
	}
	return gitdir, common, true
}

// What a protected path is to git.
const (
	pathFile  = iota // a file git loads or runs: itself and anything below
	pathHooks        // a hooks directory: a worktree's top protects its hook names only
	pathDir          // a directory git copies from (templates): all of it
)

// file reads one config file. worktree is the repository's worktree
// relative paths in it are resolved against ("" for the global and system
// files: their relative paths apply in every repository); homes are the
// homes "~" may stand for.
func (g *gitScan) file(name, worktree string, homes []string, depth int) {
	key := worktree + "\x00" + name
	if depth > maxIncludeDepth || g.seen[key] || g.err != nil {
		// Past git's own include depth, git stops with an error: it
		// runs nothing.
		return
	}
	g.seen[key] = true
	data, _, err := readFile(unix.AT_FDCWD, name, maxConfigBytes, true)
	if errors.Is(err, errTooLarge) {
		g.err = fmt.Errorf("git config %s: larger than %d bytes: what it runs cannot be known", name, maxConfigBytes)
		return
	}
	if err != nil {
		return // absent, or nothing git reads either
	}
	if g.files++; g.files > maxConfigFiles {
		g.err = fmt.Errorf("more than %d git config files in and around the workspace: what they run cannot be known", maxConfigFiles)
		return
	}
	entries, err := parseGitConfig(data) // git stops at a syntax error; so do we
	if errors.Is(err, errConfigTooManyEnt) {
		g.err = fmt.Errorf("git config %s: %w: what it runs cannot be known", name, err)
		return
	}
	for _, e := range entries {
		if e.NoValue || e.Value == "" {
			continue
		}
		rule := "git-config:" + e.Key
		switch {
		case e.Key == "include.path" || (strings.HasPrefix(e.Key, "includeif.") && strings.HasSuffix(e.Key, ".path")):
			for _, p := range g.expand(e.Value, homes) {
				if !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(name), p)
				}
				g.protect(p, "", rule, pathFile)
				g.file(p, worktree, homes, depth+1)
			}
		case e.Key == "core.hookspath":
			for _, p := range g.expand(e.Value, homes) {
				g.protect(p, worktree, rule, pathHooks)
			}
		case e.Key == "init.templatedir":
			for _, p := range g.expand(e.Value, homes) {
				g.protect(p, worktree, rule, pathDir)
			}
		default:
			cmd, ok := commandOf(e.Key, e.Value)
			if !ok {
				continue
			}
			for _, w := range commandWords(cmd) {
				for _, p := range g.expand(w, homes) {
					g.protectWord(p, worktree, rule)
				}
			}
		}
	}
}

// expand does git's pathname expansion of ~ and ~user (with each of
// homes for ~); %(prefix)/ paths (relative to git's install prefix) are
// outside any workspace.
func (g *gitScan) expand(p string, homes []string) []string {
	if strings.HasPrefix(p, "%(prefix)/") {
		return nil
	}
	if !strings.HasPrefix(p, "~") {
		return []string{p}
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	if name != "" {
		u, err := user.Lookup(name)
		if err != nil {
			return nil
		}
		homes = []string{u.HomeDir}
	}
	var out []string
	for _, h := range homes {
		if h != "" {
			out = append(out, filepath.Join(h, rest))
		}
	}
	return out
}

// protectWord protects a word of a command: relative to worktree, or, from
// a global or system file, relative to every repository's top, and at
// every depth when it holds a slash (as before: "./x" run from anywhere)
// or when the workspace lies in no repository (git then runs an alias
// wherever it is called).
func (g *gitScan) protectWord(p, worktree, rule string) {
	if filepath.IsAbs(p) || worktree != "" {
		g.protect(p, worktree, rule, pathFile)
		return
	}
	for _, top := range g.tops {
		g.protect(filepath.Join(top, p), "", rule, pathFile)
	}
	if strings.Contains(p, "/") || !g.inRepo {
		g.protect(p, "", rule, pathFile)
	}
}

// protect adds a rule for the host path p if it lies in the workspace. A
// relative p is resolved against worktree, or, from a global or system
// file, protected at every depth of the workspace (it applies in every
// repository, including ones created later). A hooks directory that is a
// whole worktree (or the workspace) protects only the hook names in it.
func (g *gitScan) protect(p, worktree, rule string, kind int) {
	if !filepath.IsAbs(p) {
		if worktree == "" {
			rel := path.Clean(filepath.ToSlash(p))
			switch {
			case rel == "." && kind == pathHooks:
				for _, h := range gitHooks {
					g.add("**/"+h, rule)
				}
			case rel == "." && kind == pathDir:
				g.add("**", rule)
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
			case kind == pathHooks && whole:
				for _, h := range gitHooks {
					g.add(prefix+h, rule)
				}
			case rel != "":
				g.add(prefix+"**", rule)
			case kind == pathDir:
				// Templates copied from the whole workspace.
				g.add("**", rule)
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
// (git-config(1), git-interpret-trailers(1), git-archive(1),
// git-send-email(1); git 2.39); "*" is a subsection (which may hold dots).
var commandKeys = []string{
	"core.fsmonitor", "core.sshcommand", "core.editor", "core.pager", "core.askpass", "core.gitproxy",
	"core.alternaterefscommand", "sequence.editor", "diff.external", "diff.*.command", "diff.*.textconv",
	"difftool.*.cmd", "difftool.*.path", "mergetool.*.cmd", "mergetool.*.path", "merge.*.driver",
	"filter.*.clean", "filter.*.smudge", "filter.*.process", "credential.helper", "credential.*.helper",
	"gpg.program", "gpg.*.program", "gpg.ssh.defaultkeycommand", "pager.*", "interactive.difffilter",
	"uploadpack.packobjectshook", "remote.*.uploadpack", "remote.*.receivepack", "man.*.cmd", "man.*.path",
	"browser.*.cmd", "browser.*.path", "web.browser", "instaweb.httpd", "imap.tunnel", "guitool.*.cmd",
	"trailer.*.command", "trailer.*.cmd", "tar.*.command",
	"sendemail.smtpserver", "sendemail.*.smtpserver", "sendemail.sendmailcmd", "sendemail.*.sendmailcmd",
	"sendemail.tocmd", "sendemail.*.tocmd", "sendemail.cccmd", "sendemail.*.cccmd",
	"sendemail.headercmd", "sendemail.*.headercmd",
}

// prefixedCommandKeys are the keys whose values are commands only with a
// prefix (not part of the command): "!" aliases and submodule update
// commands, "ext::" URLs (run when protocol.ext.allow lets them).
var prefixedCommandKeys = map[string]string{
	"alias.*": "!", "submodule.*.update": "!",
	"remote.*.url": "ext::", "remote.*.pushurl": "ext::", "submodule.*.url": "ext::",
}

// matchKey reports whether a config key (section and name lower case)
// matches a pattern of commandKeys.
func matchKey(pattern, key string) bool {
	parts := strings.Split(pattern, ".")
	switch {
	case len(parts) == 2 && parts[1] == "*":
		return strings.HasPrefix(key, parts[0]+".")
	case len(parts) == 3 && parts[1] == "*":
		return len(key) >= len(parts[0])+len(parts[2])+2 &&
			strings.HasPrefix(key, parts[0]+".") && strings.HasSuffix(key, "."+parts[2])
	}
	return key == pattern
}

// commandOf returns the command a config entry's value is, if git runs
// it. A credential helper that is neither absolute nor a "!" command is
// a git command ("git credential-<name>"): only its arguments count.
func commandOf(key, value string) (string, bool) {
	v := strings.TrimSpace(value)
	for k, prefix := range prefixedCommandKeys {
		if matchKey(k, key) {
			cmd, ok := strings.CutPrefix(v, prefix)
			return cmd, ok
		}
	}
	for _, k := range commandKeys {
		if !matchKey(k, key) {
			continue
		}
		if k == "credential.helper" || k == "credential.*.helper" {
			if cmd, ok := strings.CutPrefix(v, "!"); ok {
				return cmd, true
			}
			if !filepath.IsAbs(v) {
				_, args, _ := strings.Cut(v, " ")
				return args, true
			}
		}
		return v, true
	}
	return "", false
}

// commandKey reports whether git runs the value of key.
func commandKey(key, value string) bool {
	_, ok := commandOf(key, value)
	return ok
}

// commandWords returns the words of a shell command that may name files:
// every word but options ("-x"), split at blanks, quotes and shell
// operators; a quoted string is one word too ("my tool.sh").
func commandWords(cmd string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(w string) {
		if w == "" || strings.HasPrefix(w, "-") || seen[w] {
			return
		}
		seen[w] = true
		out = append(out, w)
	}
	for _, w := range strings.FieldsFunc(cmd, func(r rune) bool {
		return strings.ContainsRune(" \t\n;|&()<>`$\"'!={}\\", r)
	}) {
		add(w)
	}
	for _, q := range []byte{'"', '\''} {
		parts := strings.Split(cmd, string(q))
		for i := 1; i < len(parts)-1; i += 2 {
			if w := strings.TrimSpace(parts[i]); !strings.ContainsAny(w, ";|&()<>`$\n") {
				add(w)
			}
		}
	}
	return out
}

package workspace

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// gitFixture is a host layout of repositories around and in a workspace,
// with configuration that points into it.
type gitFixture struct {
	parent, ws, home string
	env              gitEnv
}

func newGitFixture(t *testing.T) *gitFixture {
	t.Helper()
	base := t.TempDir()
	f := &gitFixture{parent: filepath.Join(base, "parent"), home: filepath.Join(base, "home")}
	f.ws = filepath.Join(f.parent, "ws")
	f.env = gitEnv{home: f.home, noSystem: true}
	for _, d := range []string{f.ws, f.home} {
		must(t, os.MkdirAll(d, 0o755))
	}
	// The daemon user's global config: a relative hooks directory (every
	// repository's), an include, and an absolute command path.
	write(t, f.home, ".gitconfig", "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ~/extra.inc\n", 0o644)
	write(t, f.home, "extra.inc", "[core]\n\tfsmonitor = "+f.ws+"/tools/fsmon.sh\n", 0o644)
	// A repository enclosing the workspace, whose hooks live in it.
	mustGit(t, f.parent, "init", "-q")
	mustGit(t, f.parent, "config", "core.hooksPath", "ws/parenthooks")
	// The workspace's own repository.
	mustGit(t, f.ws, "init", "-q")
	mustGit(t, f.ws, "config", "core.hooksPath", "tools/hooks")
	mustGit(t, f.ws, "config", "include.path", "../shared.inc")
	mustGit(t, f.ws, "config", "includeIf.gitdir:/nowhere/.path", "inc/if.inc")
	mustGit(t, f.ws, "config", "alias.x", "!sh ./scripts/alias.sh")
	mustGit(t, f.ws, "config", "alias.y", "log --oneline ./not/a/command")
	write(t, f.ws, "shared.inc", "[filter \"x\"]\n\tclean = ./scripts/clean.sh %f\n", 0o644)
	// A nested repository, found only when the upper layer touches it,
	// whose hooks directory is the whole of its worktree.
	must(t, os.MkdirAll(filepath.Join(f.ws, "lib"), 0o755))
	mustGit(t, filepath.Join(f.ws, "lib"), "init", "-q")
	mustGit(t, filepath.Join(f.ws, "lib"), "config", "core.hooksPath", ".")
	// A linked worktree's .git file and commondir are followed.
	must(t, os.MkdirAll(filepath.Join(f.ws, "wt"), 0o755))
	gd := filepath.Join(f.ws, ".git", "worktrees", "wt")
	must(t, os.MkdirAll(gd, 0o755))
	write(t, f.ws, "wt/.git", "gitdir: "+gd+"\n", 0o644)
	write(t, gd, "commondir", "../..\n", 0o644)
	write(t, gd, "config.worktree", "[core]\n\tsshCommand = "+f.ws+"/wt/ssh-wrapper -v\n", 0o644)
	return f
}

func TestHostGitRules(t *testing.T) {
	f := newGitFixture(t)
	root, err := filepath.EvalSymlinks(f.ws)
	must(t, err)
	rules := hostGitRules(root, f.ws, []string{"lib", "wt"}, f.env)
	got := map[string]string{}
	for _, r := range rules {
		got[r.pattern] = r.rule
	}
	want := map[string]string{
		"**/.githooks/**":     "git-config:core.hookspath",
		"tools/fsmon.sh/**":   "git-config:core.fsmonitor",
		"parenthooks/**":      "git-config:core.hookspath",
		"tools/hooks/**":      "git-config:core.hookspath",
		"shared.inc/**":       "git-config:include.path",
		".git/inc/if.inc/**":  "git-config:includeif.gitdir:/nowhere/.path",
		"scripts/alias.sh/**": "git-config:alias.x",
		"scripts/clean.sh/**": "git-config:filter.x.clean",
		"wt/ssh-wrapper/**":   "git-config:core.sshcommand",
		// The linked worktree shares the repository's config; its
		// relative paths are relative to its own worktree.
		"wt/tools/hooks/**":      "git-config:core.hookspath",
		"wt/scripts/alias.sh/**": "git-config:alias.x",
		"wt/scripts/clean.sh/**": "git-config:filter.x.clean",
	}
	for _, h := range gitHooks {
		want["lib/"+h] = "git-config:core.hookspath"
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

func TestCommitHostGitConfig(t *testing.T) {
	f := newGitFixture(t)
	upper, m := overlay(t, f.ws)
	for _, p := range []string{
		"tools/hooks/pre-commit", "sub/.githooks/pre-commit", "parenthooks/post-checkout", "shared.inc",
		"tools/fsmon.sh", "scripts/clean.sh", "scripts/alias.sh", "lib/pre-commit", "wt/ssh-wrapper", "TOOLS/HOOKS/pre-push",
	} {
		write(t, m, p, "#!/bin/sh\ntouch /tmp/pwned\n", 0o755)
	}
	write(t, m, "lib/src.txt", "ok\n", 0o644)
	write(t, m, "tools/build.sh", "ok\n", 0o755)
	opts := testOptions(nil)
	opts.gitEnv = &f.env
	vs, err := Commit(t.Context(), upper, f.ws, opts)
	must(t, err)
	var dropped []string
	for _, v := range vs {
		if !strings.HasPrefix(v.Rule, "git-config:") {
			t.Errorf("unexpected violation %+v", v)
		}
		dropped = append(dropped, v.Target)
	}
	slices.Sort(dropped)
	want := []string{
		"TOOLS/HOOKS/pre-push", "lib/pre-commit", "parenthooks/post-checkout", "scripts/alias.sh", "scripts/clean.sh",
		"shared.inc", "sub/.githooks/pre-commit", "tools/fsmon.sh", "tools/hooks/pre-commit", "wt/ssh-wrapper",
	}
	if diff := cmp.Diff(want, dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	for _, p := range []string{"lib/src.txt", "tools/build.sh"} {
		if _, err := os.Stat(filepath.Join(f.ws, p)); err != nil {
			t.Errorf("%s was not applied: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.ws, "shared.inc")); !strings.Contains(string(b), "clean.sh") {
		t.Errorf("the host's included config changed: %q", b)
	}
}

func TestCommandKey(t *testing.T) {
	for key, want := range map[string]bool{
		"core.fsmonitor": true, "filter.lfs.clean": true, "filter.a.b.process": true, "diff.x.textconv": true,
		"credential.https://example.com.helper": true, "core.bare": false, "user.name": false,
		"remote.origin.url": false, "remote.origin.uploadpack": true, "pager.log": true,
	} {
		if got := commandKey(key, "x"); got != want {
			t.Errorf("commandKey(%q) = %v, want %v", key, got, want)
		}
	}
	if commandKey("alias.st", "status") || !commandKey("alias.x", "!sh x") {
		t.Error("alias.* counts only for ! aliases")
	}
	if got := commandPaths(`sh -c "./a.sh; ~/b" | tools/c --flag=d/e`); !slices.Equal(got, []string{"./a.sh", "~/b", "tools/c", "d/e"}) {
		t.Errorf("commandPaths = %q", got)
	}
}

func TestRelPattern(t *testing.T) {
	for rel, want := range map[string]string{
		"a/b": "a/b", "a[1]/*x": `a\[1\]/\*x`, "hooks.": "hooks", "a/...": "a/*",
	} {
		if got := relPattern(rel); got != want {
			t.Errorf("relPattern(%q) = %q, want %q", rel, got, want)
		}
		if err := ValidatePattern(relPattern(rel)); err != nil {
			t.Errorf("relPattern(%q) is not a valid pattern: %v", rel, err)
		}
	}
	if _, ok := Match([]string{relPattern("a[1]/*x") + "/**"}, "a[1]/*x/y"); !ok {
		t.Error("an escaped pattern does not match its own path")
	}
}

func TestReadBoundedNeverBlocks(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	must(t, unix.Mkfifo(fifo, 0o644))
	if _, err := readBounded(fifo, 1024); err == nil {
		t.Fatal("a fifo was read as a config file")
	}
	big := filepath.Join(t.TempDir(), "big")
	must(t, os.WriteFile(big, make([]byte, 2048), 0o644))
	if _, err := readBounded(big, 1024); err == nil {
		t.Fatal("a file over the limit was read")
	}
}

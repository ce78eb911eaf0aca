package workspace

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	f.env = gitEnv{home: f.home, noSystem: true, passwd: os.DevNull}
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
	mustGit(t, f.ws, "config", "init.templateDir", "tools/templates")
	write(t, f.ws, "shared.inc", "[filter \"x\"]\n\tclean = ./scripts/clean.sh %f\n", 0o644)
	// A nested repository whose hooks directory is the whole of its
	// worktree.
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
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	dc := &dirCache{root: fd}
	defer dc.close()
	repos, err := findRepos(dc)
	must(t, err)
	slices.Sort(repos)
	if want := []string{"", "lib", "wt"}; !slices.Equal(repos, want) {
		t.Errorf("findRepos = %q, want %q", repos, want)
	}
	rules, err := hostGitRules(root, f.ws, repos, 0, f.env)
	must(t, err)
	got := map[string]string{}
	for _, r := range rules {
		got[r.pattern] = r.rule
	}
	want := map[string]string{
		"**/.githooks/**":     "git-config:core.hookspath",
		"tools/fsmon.sh/**":   "git-config:core.fsmonitor",
		"parenthooks/**":      "git-config:core.hookspath",
		"tools/hooks/**":      "git-config:core.hookspath",
		"tools/templates/**":  "git-config:init.templatedir",
		"shared.inc/**":       "git-config:include.path",
		".git/inc/if.inc/**":  "git-config:includeif.gitdir:/nowhere/.path",
		"scripts/alias.sh/**": "git-config:alias.x",
		"sh/**":               "git-config:alias.x",
		"scripts/clean.sh/**": "git-config:filter.x.clean",
		"%f/**":               "git-config:filter.x.clean",
		"wt/ssh-wrapper/**":   "git-config:core.sshcommand",
		// The linked worktree shares the repository's config; its
		// relative paths are relative to its own worktree.
		"wt/tools/hooks/**":      "git-config:core.hookspath",
		"wt/tools/templates/**":  "git-config:init.templatedir",
		"wt/scripts/alias.sh/**": "git-config:alias.x",
		"wt/sh/**":               "git-config:alias.x",
		"wt/scripts/clean.sh/**": "git-config:filter.x.clean",
		"wt/%f/**":               "git-config:filter.x.clean",
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
	if got := commandWords(`sh -c "./a.sh; ~/b" | tools/c --flag=d/e 'my tool.sh'`); !slices.Equal(got, []string{"sh", "./a.sh", "~/b", "tools/c", "d/e", "my", "tool.sh", "my tool.sh"}) {
		t.Errorf("commandWords = %q", got)
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

func TestReadFileNeverBlocks(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	must(t, unix.Mkfifo(fifo, 0o644))
	if _, _, err := readFile(unix.AT_FDCWD, fifo, 1024, true); err == nil {
		t.Fatal("a fifo was read as a config file")
	}
	big := filepath.Join(t.TempDir(), "big")
	must(t, os.WriteFile(big, make([]byte, 2048), 0o644))
	if _, _, err := readFile(unix.AT_FDCWD, big, 1024, true); err == nil {
		t.Fatal("a file over the limit was read")
	}
}

// TestCommitHostGitEveryRepository plants, through the upper layer, the
// files the host's git configuration would run, where that
// configuration is in a repository the sandbox's changes never touch
// (a nested worktree, a bare repository), names a command by a word
// without a slash, or is the global file of the user who owns the
// workspace (not the daemon's). Then it runs the host's real git where
// each would run, as those users would.
func TestCommitHostGitEveryRepository(t *testing.T) {
	base := t.TempDir()
	ws, ownerHome := filepath.Join(base, "ws"), filepath.Join(base, "owner")
	must(t, os.MkdirAll(ws, 0o755))
	must(t, os.MkdirAll(ownerHome, 0o755))
	marker := filepath.Join(base, "ran")
	git := func(dir string, args ...string) (string, error) {
		return hostGit(t, dir, append([]string{"-c", "safe.directory=*"}, args...)...)
	}
	mustG := func(dir string, args ...string) {
		t.Helper()
		if out, err := git(dir, args...); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	write(t, ws, "README", "host\n", 0o644)
	mustG(ws, "init", "-q", "-b", "main")
	mustG(ws, "config", "alias.b", "!sh build-helper.sh")
	mustG(ws, "add", "-A")
	mustG(ws, "commit", "-q", "-m", "host")
	// A nested repository the sandbox does not touch, whose hooks live
	// beside it.
	lib := filepath.Join(ws, "lib")
	write(t, lib, "a.txt", "a\n", 0o644)
	mustG(lib, "init", "-q", "-b", "main")
	mustG(lib, "config", "core.hooksPath", "../tools/hooks")
	mustG(lib, "add", "-A")
	mustG(lib, "commit", "-q", "--no-verify", "-m", "lib")
	// A bare repository inside the workspace, pushed to from lib.
	bare := filepath.Join(ws, "vendor", "mirror.git")
	must(t, os.MkdirAll(bare, 0o755))
	mustG(bare, "init", "-q", "--bare")
	mustG(bare, "config", "core.hooksPath", "../../tools/barehooks")
	// The workspace's owner (not the daemon's user) has an alias of its own.
	must(t, os.Chown(ws, 4242, 4242))
	passwd := filepath.Join(base, "passwd")
	write(t, base, "passwd", "root:x:0:0:root:/root:/bin/sh\ndev:x:4242:4242::"+ownerHome+":/bin/sh\n", 0o644)
	write(t, ownerHome, ".gitconfig", "[alias]\n\to = !sh owner-helper.sh\n", 0o644)

	upper, m := overlay(t, ws)
	evil := "#!/bin/sh\ntouch " + marker + "\n"
	planted := []string{"tools/hooks/pre-commit", "tools/barehooks/pre-receive", "build-helper.sh", "owner-helper.sh"}
	for _, p := range planted {
		write(t, m, p, evil, 0o755)
	}
	write(t, m, "tools/build.sh", "ok\n", 0o755)
	opts := testOptions(nil)
	opts.gitEnv = &gitEnv{home: filepath.Join(base, "daemon"), noSystem: true, passwd: passwd}
	vs, err := Commit(t.Context(), upper, ws, opts)
	must(t, err)
	dropped := map[string]string{}
	for _, v := range vs {
		dropped[v.Target] = v.Rule
	}
	for _, p := range planted {
		if !strings.HasPrefix(dropped[p], "git-config:") {
			t.Errorf("%s: not dropped by a git-config rule (violations %+v)", p, vs)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "tools/build.sh")); err != nil {
		t.Errorf("tools/build.sh, which nothing runs, was not applied: %v", err)
	}

	// The host's git, where each planted file would run.
	asOwner := hostGitHome(t, ownerHome)
	for _, run := range []struct {
		what string
		run  func() (string, error)
	}{
		{"git commit in lib", func() (string, error) { return git(lib, "commit", "-q", "--allow-empty", "-m", "after the session") }},
		{"git push into vendor/mirror.git", func() (string, error) { return git(lib, "push", "-q", bare, "main") }},
		{"git b", func() (string, error) { return git(ws, "b") }},
		{"git o as the owner", func() (string, error) { return asOwner(ws, "-c", "safe.directory=*", "o") }},
	} {
		out, _ := run.run()
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s ran a file the sandbox wrote\n%s", run.what, out)
			must(t, os.Remove(marker))
		}
	}
}

// hostGitHome returns a runner of the host's git with HOME set to home.
func hostGitHome(t *testing.T, home string) func(dir string, args ...string) (string, error) {
	return func(dir string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// TestCommandKeysOfGit239 lists keys whose values git 2.39 runs (from
// git-config(1), git-interpret-trailers(1), git-archive(1) and
// git-send-email(1)) that are easy to miss.
func TestCommandKeysOfGit239(t *testing.T) {
	for key, value := range map[string]string{
		"trailer.sign.command": "x", "trailer.sign.cmd": "x", "core.alternaterefscommand": "x",
		"submodule.lib.update": "!x", "sendemail.tocmd": "x", "sendemail.cccmd": "x", "sendemail.headercmd": "x",
		"sendemail.work.tocmd": "x", "sendemail.sendmailcmd": "x", "guitool.build.cmd": "x", "tar.tgz.command": "x",
		"imap.tunnel": "x", "instaweb.httpd": "x", "remote.origin.url": "ext::x", "submodule.lib.url": "ext::x",
	} {
		if !commandKey(key, value) {
			t.Errorf("commandKey(%q, %q) = false; git runs it", key, value)
		}
	}
	for key, value := range map[string]string{"submodule.lib.update": "rebase", "remote.origin.url": "https://x/y"} {
		if commandKey(key, value) {
			t.Errorf("commandKey(%q, %q) = true; git runs nothing of it", key, value)
		}
	}
}

// TestCommitFailsClosedOnUnknowableGitConfig: where the commit cannot
// read every repository's configuration whole, it applies nothing.
func TestCommitFailsClosedOnUnknowableGitConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, ws string)
		want  string
	}{
		{"too many directories", func(t *testing.T, ws string) {
			old := maxHostDirs
			maxHostDirs = 50
			t.Cleanup(func() { maxHostDirs = old })
			for i := range 60 {
				must(t, os.MkdirAll(filepath.Join(ws, "d", fmt.Sprint(i)), 0o755))
			}
		}, "more than 50 directories"},
		{"a config file too large", func(t *testing.T, ws string) {
			mustGit(t, ws, "init", "-q")
			mustGit(t, ws, "config", "include.path", "../big.inc")
			write(t, ws, "big.inc", "#"+strings.Repeat("x", maxConfigBytes)+"\n", 0o644)
		}, "larger than"},
		{"too many config files", func(t *testing.T, ws string) {
			mustGit(t, ws, "init", "-q")
			var inc strings.Builder
			for i := range maxConfigFiles + 1 {
				write(t, ws, fmt.Sprintf("inc/%d", i), "", 0o644)
				fmt.Fprintf(&inc, "[include]\n\tpath = ../inc/%d\n", i)
			}
			f, err := os.OpenFile(filepath.Join(ws, ".git/config"), os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteString(inc.String())
			must(t, err)
			must(t, f.Close())
		}, "more than 4096 git config files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			tc.setup(t, ws)
			upper, m := overlay(t, ws)
			write(t, m, "new.txt", "x\n", 0o644)
			_, err := Commit(t.Context(), upper, ws, testOptions(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Commit: %v, want an error saying %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
				t.Error("a commit that failed closed applied a file")
			}
		})
	}
}

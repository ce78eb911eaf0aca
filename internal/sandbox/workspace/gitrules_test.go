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
)

func TestGitAllowlist(t *testing.T) {
	files := map[string]bool{
		"HEAD": true, "ORIG_HEAD": true, "FETCH_HEAD": true, "MERGE_HEAD": true, "CHERRY_PICK_HEAD": true,
		"REVERT_HEAD": true, "REBASE_HEAD": true, "BISECT_HEAD": true, "AUTO_MERGE": true,
		"COMMIT_EDITMSG": true, "MERGE_MSG": true, "MERGE_MODE": true, "SQUASH_MSG": true, "TAG_EDITMSG": true,
		"index": true, "packed-refs": true, "shallow": true, "sharedindex.0123abcd": true,
		"objects/ab/cdef0123": true, "objects/pack/pack-1.pack": true, "objects/pack/pack-1.idx": true,
		"objects/info/packs": true, "objects/info/commit-graph": true, "info/refs": true,
		"refs/heads/main": true, "refs/tags/v1": true, "refs/stash": true, "logs/HEAD": true, "logs/refs/heads/x": true,
		"modules/lib/HEAD": true, "modules/lib/objects/ab/cd": true, "modules/a/b/refs/heads/x": true,
		"modules/a/modules/b/index": true, "head": true, "Refs/Heads/X": true,

		"config": false, "config.worktree": false, "hooks/pre-commit": false, "hooks/post-checkout": false,
		"commondir": false, "gitdir": false, "info/exclude": false, "info/attributes": false, "info/sparse-checkout": false,
		"info/grafts": false, "worktrees/w/HEAD": false, "worktrees/w/commondir": false,
		"rebase-merge/git-rebase-todo": false, "rebase-apply/patch": false, "sequencer/todo": false,
		"objects/info/alternates": false, "objects/info/http-alternates": false, "objects/info/Alternates": false,
		"modules/lib/config": false, "modules/lib/hooks/pre-commit": false, "modules/lib/objects/info/alternates": false,
		"modules/lib/commondir": false, "modules/config": false,
		"index.lock": false, "refs/heads/main.lock": false, "HEAD.lock": false, "packed-refs.lock": false,
		"description": false, "rr-cache/x/preimage": false, "BISECT_LOG": false, "gc.log": false,
		"remotes/origin": false, "branches/x": false, "HEAD/x": false, "objects": false, "refs": false, "FETCH_HEAD/x": false,
	}
	for p, want := range files {
		if got := gitFileAllowed(foldPath(p)); got != want {
			t.Errorf("gitFileAllowed(%q) = %v, want %v", p, got, want)
		}
	}
	dirs := map[string]bool{
		"": true, "objects": true, "objects/ab": true, "objects/info": true, "refs": true, "refs/heads": true, "logs": true,
		"modules": true, "modules/a/b": true, "info": true,
		"hooks": false, "worktrees": false, "rebase-merge": false, "sequencer": false, "info/x": false,
		"objects/info/alternates": false, "rr-cache": false,
	}
	for p, want := range dirs {
		if got := gitDirAllowed(foldPath(p)); got != want {
			t.Errorf("gitDirAllowed(%q) = %v, want %v", p, got, want)
		}
	}
}

// hostGit runs git on the host in dir with a clean environment (no global
// or system configuration) and returns its output.
func hostGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, git, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := hostGit(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

func TestCommitGitWork(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, "a.txt", "a\n", 0o644)
	mustGit(t, ws, "init", "-q", "-b", "main")
	mustGit(t, ws, "add", "a.txt")
	mustGit(t, ws, "commit", "-q", "-m", "first")
	upper, m := overlay(t, ws)

	// What an agent does in the sandbox: commits, a branch, a tag, a
	// merge, a stash, and a gc that packs and deletes loose objects.
	write(t, m, "a.txt", "a2\n", 0o644)
	write(t, m, "b.txt", "b\n", 0o644)
	mustGit(t, m, "add", "-A")
	mustGit(t, m, "commit", "-q", "-m", "second")
	mustGit(t, m, "checkout", "-q", "-b", "topic")
	write(t, m, "c.txt", "c\n", 0o644)
	mustGit(t, m, "add", "c.txt")
	mustGit(t, m, "commit", "-q", "-m", "third")
	mustGit(t, m, "checkout", "-q", "main")
	mustGit(t, m, "merge", "-q", "--no-ff", "-m", "merge topic", "topic")
	mustGit(t, m, "tag", "-a", "v1", "-m", "v1")
	write(t, m, "a.txt", "wip\n", 0o644)
	mustGit(t, m, "stash", "-q")
	mustGit(t, m, "gc", "-q")
	want := mustGit(t, m, "log", "--all", "--format=%H %s")

	vs, err := Commit(t.Context(), upper, ws, testOptions(nil))
	must(t, err)
	if len(vs) != 0 {
		t.Errorf("normal git work reported violations: %+v", vs)
	}
	if got := mustGit(t, ws, "log", "--all", "--format=%H %s"); got != want {
		t.Errorf("host history after Commit:\n%s\nwant (the sandbox's):\n%s", got, want)
	}
	mustGit(t, ws, "fsck", "--full", "--strict")
	if st := mustGit(t, ws, "status", "--porcelain"); st != "" {
		t.Errorf("host git status after Commit is not clean:\n%s", st)
	}
	if out := mustGit(t, ws, "stash", "list"); !strings.Contains(out, "stash@{0}") {
		t.Errorf("the stash did not reach the host: %q", out)
	}
}

func TestCommitGitAttacks(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, "a.txt", "a\n", 0o644)
	must(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	mustGit(t, ws, "init", "-q", "-b", "main")
	mustGit(t, ws, "add", "a.txt")
	mustGit(t, ws, "commit", "-q", "-m", "first")
	upper, m := overlay(t, ws)
	marker := filepath.Join(t.TempDir(), "ran")
	evilConfig := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = " + ws + "\n\tfsmonitor = \"touch " + marker + "; false\"\n"
	// A complete git directory under an ordinary name.
	gitdir := func(dir string) {
		write(t, m, dir+"/HEAD", "ref: refs/heads/main\n", 0o644)
		write(t, m, dir+"/config", evilConfig, 0o644)
		must(t, os.MkdirAll(filepath.Join(m, dir, "objects"), 0o755))
		must(t, os.MkdirAll(filepath.Join(m, dir, "refs"), 0o755))
	}
	gitdir("evil")
	gitdir("bare")
	write(t, m, ".git/config", evilConfig, 0o644)
	write(t, m, ".git/hooks/pre-commit", "#!/bin/sh\ntouch "+marker+"\n", 0o755)
	write(t, m, ".git/commondir", "../evil\n", 0o644)
	write(t, m, ".git/info/exclude", "*\n", 0o644)
	write(t, m, ".git/rebase-merge/git-rebase-todo", "exec touch "+marker+"\n", 0o644)
	write(t, m, ".git/objects/info/alternates", "/tmp/evil/objects\n", 0o644)
	write(t, m, ".git/modules/lib/config", evilConfig, 0o644)
	write(t, m, ".git/modules/lib/HEAD", "ref: refs/heads/main\n", 0o644)
	write(t, m, ".git/worktrees/w/commondir", "../../../evil\n", 0o644)
	write(t, m, ".git/index.lock", "", 0o644)
	must(t, os.Symlink("/etc/passwd", filepath.Join(m, ".git/refs/heads/evil")))
	write(t, m, "sub/.git", "gitdir: ../evil\n", 0o644)
	write(t, m, "deep/x/.GIT/config", evilConfig, 0o644)
	write(t, m, "deep/y/.g\u200bit", "gitdir: ../../evil\n", 0o644)
	must(t, os.Symlink(".git/config", filepath.Join(m, "cfg")))
	must(t, os.Symlink("../.Git", filepath.Join(m, "sub/up")))

	vs, err := Commit(t.Context(), upper, ws, testOptions(nil))
	must(t, err)
	got := keys(vs)
	want := []vkey{
		{".git/commondir", detailCreate, "git:commondir"},
		{".git/config", detailChange, "git:config"},
		{".git/hooks/pre-commit", detailCreate, "git:hooks/pre-commit"},
		{".git/index.lock", detailCreate, "git:index.lock"},
		{".git/info/exclude", detailChange, "git:info/exclude"},
		{".git/modules/lib/config", detailCreate, "git:modules/lib/config"},
		{".git/objects/info/alternates", detailCreate, "git:objects/info/alternates"},
		{".git/rebase-merge", detailCreate, "git:rebase-merge"},
		{".git/refs/heads/evil", detailCreate, ruleGitSymlink},
		{".git/worktrees", detailCreate, "git:worktrees"},
		{"bare/HEAD", detailCreate, ruleGitShape},
		{"bare/objects", detailCreate, ruleGitShape},
		{"bare/refs", detailCreate, ruleGitShape},
		{"cfg", detailCreate, ruleSymlinkInGit},
		{"deep/x/.GIT", detailCreate, ruleDotGit},
		{"deep/y/.g\u200bit", detailCreate, ruleDotGit},
		{"evil/HEAD", detailCreate, ruleGitShape},
		{"evil/objects", detailCreate, ruleGitShape},
		{"evil/refs", detailCreate, ruleGitShape},
		{"sub/.git", detailCreate, ruleDotGit},
		{"sub/up", detailCreate, ruleSymlinkInGit},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	// What is data reached the host; nothing of the attacks did.
	if _, err := os.Stat(filepath.Join(ws, ".git/modules/lib/HEAD")); err != nil {
		t.Errorf("an allowlisted submodule HEAD was not applied: %v", err)
	}
	for _, p := range []string{"evil/config", "bare/config"} {
		if _, err := os.Stat(filepath.Join(ws, p)); err != nil {
			t.Errorf("%s (an ordinary file once its directory is no git directory) was not applied: %v", p, err)
		}
	}
	// The host's git, run everywhere the attacks point at, runs nothing
	// the sandbox wrote.
	for _, dir := range []string{ws, filepath.Join(ws, "sub"), filepath.Join(ws, "evil"), filepath.Join(ws, "bare"), filepath.Join(ws, "deep/x")} {
		_, _ = hostGit(t, dir, "status")
		_, _ = hostGit(t, dir, "commit", "-q", "--allow-empty", "-m", "host")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the host's git ran a command the sandbox wrote")
	}
	mustGit(t, ws, "fsck", "--full")
}

func TestCommitGitNotARepository(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, m string)
	}{
		{"git init", func(t *testing.T, m string) { mustGit(t, m, "init", "-q") }},
		{"symlink", func(t *testing.T, m string) {
			must(t, os.MkdirAll(filepath.Join(m, "x"), 0o755))
			must(t, os.Symlink("x", filepath.Join(m, ".git")))
		}},
		{"gitdir file", func(t *testing.T, m string) { write(t, m, ".git", "gitdir: x\n", 0o644) }},
		{"upper case", func(t *testing.T, m string) { write(t, m, ".GIT/HEAD", "ref: refs/heads/main\n", 0o644) }},
		{"fullwidth dot", func(t *testing.T, m string) { write(t, m, "\uff0egit/HEAD", "ref: refs/heads/main\n", 0o644) }},
		{"trailing dot", func(t *testing.T, m string) { write(t, m, ".git./HEAD", "ref: refs/heads/main\n", 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			upper, m := overlay(t, ws)
			tc.plant(t, m)
			vs, err := Commit(t.Context(), upper, ws, testOptions(nil))
			must(t, err)
			var dotgit []string
			for _, v := range vs {
				if v.Rule == ruleDotGit {
					dotgit = append(dotgit, v.Target)
				}
			}
			if len(dotgit) != 1 {
				t.Errorf("violations %+v, want one for the .git entry", vs)
			}
			ents, _ := os.ReadDir(ws)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if slices.ContainsFunc(names, func(n string) bool { return Fold(n) == ".git" }) {
				t.Errorf("a .git reached the host workspace: %v", names)
			}
		})
	}
}

// TestCommitGitSubmoduleNameAmbiguity: a submodule's name may hold
// slashes, so .git/modules/a/refs/config is both a ref named "config" of
// submodule "a" and the config of a submodule named "a/refs". Only a
// directory git takes for a git directory has its config read, so no
// directory inside a git directory's data may become one; where the host
// already has one, its entries are judged as a git directory's.
func TestCommitGitSubmoduleNameAmbiguity(t *testing.T) {
	for _, hostHas := range []bool{false, true} {
		t.Run(fmt.Sprint("host has the layout=", hostHas), func(t *testing.T) {
			ws := t.TempDir()
			write(t, ws, "a.txt", "a\n", 0o644)
			mustGit(t, ws, "init", "-q", "-b", "main")
			mustGit(t, ws, "add", "a.txt")
			mustGit(t, ws, "commit", "-q", "-m", "first")
			inner := filepath.Join(ws, ".git/modules/a/refs")
			if hostHas {
				write(t, ws, ".git/modules/a/refs/HEAD", "ref: refs/heads/main\n", 0o644)
				must(t, os.MkdirAll(filepath.Join(inner, "objects"), 0o755))
				must(t, os.MkdirAll(filepath.Join(inner, "refs"), 0o755))
			}
			upper, m := overlay(t, ws)
			marker := filepath.Join(t.TempDir(), "ran")
			write(t, m, ".git/modules/a/refs/HEAD", "ref: refs/heads/main\n", 0o644)
			write(t, m, ".git/modules/a/refs/objects/info/packs", "\n", 0o644)
			write(t, m, ".git/modules/a/refs/refs/heads/main", "0000000000000000000000000000000000000000\n", 0o644)
			write(t, m, ".git/modules/a/refs/config", "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = "+ws+
				"\n\tfsmonitor = \"touch "+marker+"; false\"\n", 0o644)
			write(t, m, ".git/modules/a/refs/heads/x", "0000000000000000000000000000000000000000\n", 0o644)
			vs, err := Commit(t.Context(), upper, ws, testOptions(nil))
			must(t, err)
			// git, told to use that directory as a repository (as a
			// submodule named "a/refs" would), runs nothing.
			_, _ = hostGit(t, ws, "--git-dir="+inner, "status")
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the host's git used a git directory the sandbox made inside a submodule's refs")
			}
			dropped := map[string]string{}
			for _, v := range vs {
				dropped[v.Target] = v.Rule
			}
			if hostHas {
				// A git directory on the host: judged as one.
				if dropped[".git/modules/a/refs/config"] != "git:config" {
					t.Errorf("config of the host's git directory modules/a/refs not dropped: %+v", vs)
				}
				return
			}
			for _, p := range []string{"HEAD", "objects", "refs"} {
				if dropped[".git/modules/a/refs/"+p] != ruleGitShape {
					t.Errorf(".git/modules/a/refs/%s, which makes it a git directory, not dropped: %+v", p, vs)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, ".git/modules/a/refs/heads/x")); err != nil {
				t.Errorf("a ref of submodule a was not applied: %v", err)
			}
		})
	}
}

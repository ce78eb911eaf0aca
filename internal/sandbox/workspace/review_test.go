package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// reviewer records what it is asked and answers with answer.
type reviewer struct {
	calls   int
	changes []sandbox.Change
	answer  func(sandbox.Change) bool
}

func (r *reviewer) review(_ context.Context, changes []sandbox.Change) []bool {
	r.calls++
	r.changes = append(r.changes, changes...)
	out := make([]bool, len(changes))
	for i, c := range changes {
		out[i] = r.answer(c)
	}
	return out
}

func (r *reviewer) paths() []string {
	var out []string
	for _, c := range r.changes {
		out = append(out, c.Path)
	}
	slices.Sort(out)
	return out
}

// hiddenFixture is a host workspace and an upper layer with changes to
// hidden paths of every kind.
func hiddenFixture(t *testing.T) (ws, upper string) {
	t.Helper()
	ws = t.TempDir()
	write(t, ws, ".prettierrc", "{\"semi\": true}\n", 0o644)
	write(t, ws, ".old", "old\n", 0o644)
	write(t, ws, "docs/a.txt", "a\n", 0o644)
	write(t, ws, "docs/.keep-me", "keep\n", 0o644)
	upper, m := overlay(t, ws)
	write(t, m, ".eslintrc.js", "module.exports = {};\n", 0o644)
	write(t, m, ".prettierrc", "{\"semi\": false}\n", 0o644)
	write(t, m, "src/.env", "A=1\n", 0o644)
	write(t, m, ".cache/a/b.bin", "\x00\x01", 0o644)
	write(t, m, ".cache/c.txt", "c\n", 0o644)
	must(t, os.Symlink("x", filepath.Join(m, ".link")))
	must(t, os.Remove(filepath.Join(m, ".old")))
	must(t, os.RemoveAll(filepath.Join(m, "docs")))
	write(t, m, ".gitignore", "*.o\n", 0o644)
	write(t, m, ".github/workflows/ci.yml", "on: push\n", 0o644)
	write(t, m, "plain.txt", "plain\n", 0o644)
	return ws, upper
}

var heldPaths = []string{".cache", ".eslintrc.js", ".link", ".old", ".prettierrc", "docs/.keep-me", "src/.env"}

func hiddenOptions(r *reviewer) Options {
	o := testOptions(nil)
	o.ReviewExempt = []string{"**/.gitignore", "**/.github/**"}
	if r != nil {
		o.Review = r.review
	}
	return o
}

func TestCommitHiddenWithoutReviewer(t *testing.T) {
	ws, upper := hiddenFixture(t)
	vs, err := Commit(t.Context(), upper, ws, hiddenOptions(nil))
	must(t, err)
	var got []vkey
	for _, v := range vs {
		got = append(got, vkey{v.Target, v.Detail, v.Rule})
	}
	slices.SortFunc(got, func(a, b vkey) int { return strings.Compare(a.Target, b.Target) })
	var want []vkey
	for _, p := range heldPaths {
		want = append(want, vkey{p, detailNobody, "review:hidden:" + filepath.Base(p)})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	wantTree := map[string]string{
		".prettierrc":              "file 644 {\"semi\": true}\n",
		".old":                     "file 644 old\n",
		"docs":                     "dir 755",
		"docs/.keep-me":            "file 644 keep\n",
		".gitignore":               "file 644 *.o\n",
		".github":                  "dir 755",
		".github/workflows":        "dir 755",
		".github/workflows/ci.yml": "file 644 on: push\n",
		"plain.txt":                "file 644 plain\n",
		"src":                      "dir 755",
	}
	if diff := cmp.Diff(wantTree, tree(t, ws)); diff != "" {
		t.Errorf("host workspace (-want +got):\n%s", diff)
	}
}

func TestCommitHiddenReviewed(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(fmt.Sprint("approve=", approve), func(t *testing.T) {
			ws, upper := hiddenFixture(t)
			r := &reviewer{answer: func(sandbox.Change) bool { return approve }}
			vs, err := Commit(t.Context(), upper, ws, hiddenOptions(r))
			must(t, err)
			if r.calls != 1 {
				t.Errorf("Review called %d times, want once per commit", r.calls)
			}
			if diff := cmp.Diff(heldPaths, r.paths()); diff != "" {
				t.Errorf("changes asked about (-want +got):\n%s", diff)
			}
			byPath := map[string]sandbox.Change{}
			for _, c := range r.changes {
				byPath[c.Path] = c
			}
			for p, want := range map[string]sandbox.Change{
				".eslintrc.js":  {Op: "create", Type: "file", Rule: "hidden:.eslintrc.js", Size: 21},
				".prettierrc":   {Op: "modify", Type: "file", Rule: "hidden:.prettierrc", Size: 16},
				".cache":        {Op: "create", Type: "dir", Rule: "hidden:.cache", Size: 4},
				".link":         {Op: "create", Type: "symlink", Rule: "hidden:.link", Diff: "symlink -> x"},
				".old":          {Op: "delete", Rule: "hidden:.old", Diff: "delete file"},
				"docs/.keep-me": {Op: "delete", Rule: "hidden:.keep-me", Diff: "delete file"},
			} {
				got := byPath[p]
				want.Path = p
				if want.Diff == "" {
					want.Diff = got.Diff
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("change %s (-want +got):\n%s", p, diff)
				}
			}
			for p, frag := range map[string]string{
				".eslintrc.js": "--- /dev/null\n+++ b/.eslintrc.js\n@@ -0,0 +1 @@\n+module.exports = {};\n",
				".prettierrc":  "-{\"semi\": true}\n+{\"semi\": false}\n",
				".cache":       "+ .cache/\n+ .cache/a/\n+ .cache/a/b.bin (2 bytes)\n+ .cache/c.txt (2 bytes)",
			} {
				if d := byPath[p].Diff; !strings.Contains(d, frag) {
					t.Errorf("diff of %s = %q, want it to contain %q", p, d, frag)
				}
			}
			tr := tree(t, ws)
			if approve {
				if len(vs) != 0 {
					t.Errorf("approved changes reported violations: %+v", vs)
				}
				for p, want := range map[string]string{
					".eslintrc.js": "file 644 module.exports = {};\n", ".prettierrc": "file 644 {\"semi\": false}\n",
					".cache/c.txt": "file 644 c\n", ".link": "link x", "src/.env": "file 644 A=1\n",
				} {
					if tr[p] != want {
						t.Errorf("host %s = %q, want %q", p, tr[p], want)
					}
				}
				for _, p := range []string{".old", "docs"} {
					if _, ok := tr[p]; ok {
						t.Errorf("host %s still exists; its removal was approved", p)
					}
				}
				return
			}
			for _, v := range vs {
				if v.Detail != detailDenied || !strings.HasPrefix(v.Rule, "review:hidden:") {
					t.Errorf("unexpected violation %+v", v)
				}
			}
			if len(vs) != len(heldPaths) {
				t.Errorf("%d violations, want one per held change (%d)", len(vs), len(heldPaths))
			}
			for _, p := range []string{".eslintrc.js", ".cache", ".link", "src/.env"} {
				if _, ok := tr[p]; ok {
					t.Errorf("denied %s reached the host", p)
				}
			}
			if tr[".old"] != "file 644 old\n" || tr["docs/.keep-me"] != "file 644 keep\n" {
				t.Errorf("denied removals happened: %v", tr)
			}
		})
	}
}

func TestCommitterRemembersReview(t *testing.T) {
	ws := t.TempDir()
	upper, m := overlay(t, ws)
	write(t, m, ".tool.json", "{}\n", 0o644)
	r := &reviewer{answer: func(sandbox.Change) bool { return false }}
	c := &Committer{Upper: upper, Workspace: ws, Options: hiddenOptions(r)}
	vs, err := c.Commit(t.Context())
	must(t, err)
	if r.calls != 1 || len(vs) != 1 || vs[0].Detail != detailDenied {
		t.Fatalf("first commit: %d reviews, violations %+v", r.calls, vs)
	}
	// Unchanged: not asked again, not reported again.
	vs, err = c.Commit(t.Context())
	must(t, err)
	if r.calls != 1 || len(vs) != 0 {
		t.Fatalf("second commit of the same entry: %d reviews (want 1), violations %+v", r.calls, vs)
	}
	// Changed: asked again; this time approved and applied.
	write(t, m, ".tool.json", "{\"a\": 1}\n", 0o644)
	r.answer = func(sandbox.Change) bool { return true }
	vs, err = c.Commit(t.Context())
	must(t, err)
	if r.calls != 2 || len(vs) != 0 {
		t.Fatalf("after a change: %d reviews (want 2), violations %+v", r.calls, vs)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".tool.json")); string(b) != "{\"a\": 1}\n" {
		t.Fatalf("approved file on the host = %q", b)
	}
	// Applied: nothing left to ask.
	if _, err := c.Commit(t.Context()); err != nil || r.calls != 2 {
		t.Fatalf("after applying: %d reviews (want 2), err %v", r.calls, err)
	}
}

func TestCommitHiddenChangedDuringReview(t *testing.T) {
	ws := t.TempDir()
	upper, m := overlay(t, ws)
	write(t, m, ".tool.json", "shown\n", 0o644)
	r := &reviewer{answer: func(sandbox.Change) bool {
		// The sandbox writes again while the user looks at the diff.
		write(t, m, ".tool.json", "swapped in after the review\n", 0o644)
		return true
	}}
	if _, err := Commit(t.Context(), upper, ws, hiddenOptions(r)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".tool.json")); err == nil {
		t.Fatal("a file changed after its review was applied")
	}
}

func TestCommitHiddenReplacedDirectory(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(fmt.Sprint("approve=", approve), func(t *testing.T) {
			ws := t.TempDir()
			write(t, ws, "out/.cache/x", "x\n", 0o644)
			write(t, ws, "out/y", "y\n", 0o644)
			upper, m := overlay(t, ws)
			must(t, os.RemoveAll(filepath.Join(m, "out")))
			write(t, m, "out", "now a file\n", 0o644)
			r := &reviewer{answer: func(sandbox.Change) bool { return approve }}
			vs, err := Commit(t.Context(), upper, ws, hiddenOptions(r))
			must(t, err)
			tr := tree(t, ws)
			if approve {
				if tr["out"] != "file 644 now a file\n" || len(vs) != 0 {
					t.Errorf("approved: host %v, violations %+v", tr, vs)
				}
				return
			}
			if tr["out/.cache/x"] != "file 644 x\n" {
				t.Errorf("denied removal happened: %v", tr)
			}
			var details []string
			for _, v := range vs {
				details = append(details, v.Target+": "+v.Detail)
			}
			slices.Sort(details)
			want := []string{"out: " + detailKept, "out/.cache: " + detailDenied}
			slices.Sort(want)
			if !slices.Equal(details, want) {
				t.Errorf("violations %q, want %q", details, want)
			}
		})
	}
}

func TestCommitHeldBound(t *testing.T) {
	ws := t.TempDir()
	upper, m := overlay(t, ws)
	for i := range maxHeld + 6 {
		write(t, m, fmt.Sprintf(".f%03d", i), "x\n", 0o644)
	}
	r := &reviewer{answer: func(sandbox.Change) bool { return true }}
	vs, err := Commit(t.Context(), upper, ws, hiddenOptions(r))
	must(t, err)
	if len(r.changes) != maxHeld || len(vs) != 6 {
		t.Fatalf("asked about %d changes (want %d), %d violations (want 6)", len(r.changes), maxHeld, len(vs))
	}
	for _, v := range vs {
		if v.Detail != detailTooMany {
			t.Errorf("violation %+v", v)
		}
	}
}

// overlayOnTmpfs is overlay with the upper layer on a tmpfs of its own,
// as the runtimes mount it.
func overlayOnTmpfs(t *testing.T, lower string) (upper, merged string) {
	t.Helper()
	base := t.TempDir()
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(base, unix.MNT_DETACH) })
	upper, work, merged := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{upper, work, merged} {
		must(t, os.Mkdir(d, 0o755))
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount overlayfs here (needs root and the overlay module): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return upper, merged
}

// TestCommitApprovalAppliesOnlyWhatWasShown: the sandbox keeps running
// while its held changes are reviewed and applied. What it writes after
// the reviewer saw a change (after the answer, between a check and the
// copy, through a shared mapping that changes no time stamp) is not part
// of the approval: it is dropped, reported, and asked about next time.
func TestCommitApprovalAppliesOnlyWhatWasShown(t *testing.T) {
	approveAll := func(sandbox.Change) bool { return true }
	t.Run("added to an approved directory after the answer", func(t *testing.T) {
		ws := t.TempDir()
		upper, m := overlay(t, ws)
		for i := range 50 {
			write(t, m, fmt.Sprintf(".cfg/f%03d", i), "shown\n", 0o644)
		}
		r := &reviewer{answer: approveAll}
		opts := hiddenOptions(r)
		opts.hook = func(point, rel string) {
			if point == "approved" && rel == ".cfg" {
				write(t, m, ".cfg/zzz-not-shown", "not shown\n", 0o644)
				write(t, m, ".cfg/f001", "changed after the answer\n", 0o644)
			}
		}
		c := &Committer{Upper: upper, Workspace: ws, Options: opts}
		vs, err := c.Commit(t.Context())
		must(t, err)
		tr := tree(t, ws)
		for _, p := range []string{".cfg/zzz-not-shown", ".cfg/f001"} {
			if got, ok := tr[p]; ok {
				t.Errorf("%s reached the host (%q) although the reviewer never saw it", p, got)
			}
		}
		if tr[".cfg/f000"] != "file 644 shown\n" || tr[".cfg/f049"] != "file 644 shown\n" {
			t.Errorf("what was shown and approved was not applied: %v", tr)
		}
		got := map[string]string{}
		for _, v := range vs {
			got[v.Target] = v.Detail
		}
		for _, p := range []string{".cfg/zzz-not-shown", ".cfg/f001"} {
			if got[p] != detailNotShown {
				t.Errorf("violation of %s: %q, want %q (all: %+v)", p, got[p], detailNotShown, vs)
			}
		}
		// The next commit asks about what is new.
		opts.hook = nil
		c.Options = opts
		r.changes = nil
		_, err = c.Commit(t.Context())
		must(t, err)
		if len(r.changes) != 1 || r.changes[0].Path != ".cfg" || !strings.Contains(r.changes[0].Diff, ".cfg/zzz-not-shown") {
			t.Fatalf("second commit asked about %+v, want .cfg with the new file", r.changes)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, ".cfg/zzz-not-shown")); string(b) != "not shown\n" {
			t.Errorf("after its own approval, .cfg/zzz-not-shown on the host = %q", b)
		}
	})
	t.Run("changed between its check and its copy", func(t *testing.T) {
		ws := t.TempDir()
		upper, m := overlay(t, ws)
		write(t, m, ".tool.json", "shown\n", 0o644)
		opts := hiddenOptions(&reviewer{answer: approveAll})
		opts.hook = func(point, rel string) {
			if point == "open" && rel == ".tool.json" {
				write(t, m, ".tool.json", "swapped in after the check\n", 0o644)
			}
		}
		vs, err := Commit(t.Context(), upper, ws, opts)
		must(t, err)
		if b, err := os.ReadFile(filepath.Join(ws, ".tool.json")); err == nil {
			t.Fatalf("a file changed after its check was applied: %q", b)
		}
		if len(vs) != 1 || vs[0].Detail != detailNotShown {
			t.Errorf("violations %+v, want one %q", vs, detailNotShown)
		}
	})
	t.Run("content changed through a mapping", func(t *testing.T) {
		ws := t.TempDir()
		upper, m := overlayOnTmpfs(t, ws)
		shown, evil := "{\"hooks\": []}\n", "{\"hooks\": [1]}\n"
		write(t, m, ".tool.json", shown, 0o644)
		fd, err := unix.Open(filepath.Join(m, ".tool.json"), unix.O_RDWR, 0)
		must(t, err)
		defer unix.Close(fd)
		mem, err := unix.Mmap(fd, 0, len(shown), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		defer unix.Munmap(mem)
		copy(mem, shown) // the first write through the mapping sets the times
		var before, after unix.Stat_t
		must(t, unix.Lstat(filepath.Join(upper, ".tool.json"), &before))
		r := &reviewer{answer: func(c sandbox.Change) bool {
			if !strings.Contains(c.Diff, "+{\"hooks\": []}") {
				t.Errorf("the reviewer was shown %q", c.Diff)
			}
			return true
		}}
		opts := hiddenOptions(r)
		opts.hook = func(point, rel string) {
			if point == "open" && rel == ".tool.json" {
				copy(mem, evil)
				must(t, unix.Lstat(filepath.Join(upper, ".tool.json"), &after))
				if statFP(&after) != statFP(&before) {
					t.Skip("this kernel updates the times of a file written through a mapping")
				}
			}
		}
		vs, err := Commit(t.Context(), upper, ws, opts)
		must(t, err)
		if b, err := os.ReadFile(filepath.Join(ws, ".tool.json")); err == nil {
			t.Fatalf("bytes the reviewer never saw were applied: %q", b)
		}
		if len(vs) != 1 || vs[0].Detail != detailNotShown {
			t.Errorf("violations %+v, want one %q", vs, detailNotShown)
		}
	})
}

// TestCommitHeldDescribeCostBounded: describing held changes (reading
// files, diffing them) costs memory; a commit spends it only on the
// changes it shows a reviewer, within a bound, never on the changes
// nobody is asked about.
func TestCommitHeldDescribeCostBounded(t *testing.T) {
	ws := t.TempDir()
	// 300 hidden files of 2000 short lines each, every line changed: a
	// full diff of each would need a 16 MB table.
	lines := func(prefix string) string {
		var b strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&b, "%s%07d\n", prefix, i)
		}
		return b.String()
	}
	old, changed := lines("a"), lines("b")
	for i := range 300 {
		write(t, ws, fmt.Sprintf(".f%03d", i), old, 0o644)
	}
	upper, m := overlay(t, ws)
	for i := range 300 {
		write(t, m, fmt.Sprintf(".f%03d", i), changed, 0o644)
	}
	base := hiddenOptions(nil)
	const bound = 256 << 20
	allocated := func(commit func()) uint64 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		commit()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	for _, tc := range []struct {
		name string
		r    *reviewer
	}{{"no reviewer", nil}, {"reviewer", &reviewer{answer: func(sandbox.Change) bool { return false }}}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := base
			if tc.r != nil {
				opts.Review = tc.r.review
			}
			c := &Committer{Upper: upper, Workspace: ws, Options: opts}
			for round := range 2 {
				n := allocated(func() {
					if _, err := c.Commit(t.Context()); err != nil {
						t.Fatal(err)
					}
				})
				if n > bound {
					t.Errorf("commit %d allocated %d MiB, want at most %d MiB", round+1, n>>20, bound>>20)
				}
			}
			if tc.r != nil && len(tc.r.changes) != maxHeld {
				t.Errorf("the reviewer was asked %d times, want %d (the held bound, once)", len(tc.r.changes), maxHeld)
			}
		})
	}
}

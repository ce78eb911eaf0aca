package snapshot

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func paths(d Diff) []string {
	var out []string
	for _, f := range d.Files {
		s := f.Status + " " + f.Path
		if f.Binary {
			s += " (binary)"
		}
		out = append(out, s)
	}
	return out
}

// TestDiff takes a state, changes the workspace and diffs it against the
// state, as a later state and as the workspace now.
func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name         string
		before       map[string]string
		change       func(t *testing.T, ws string)
		files        []string
		text         []string // parts of the diff text
		truncated    bool
		limits       Limits
		wantTextOnly string // the whole text, when set
	}{
		{
			name:   "nothing",
			before: map[string]string{"a": "1\n"},
			change: func(*testing.T, string) {},
		},
		{
			name:   "add modify delete",
			before: map[string]string{"a.txt": "1\n2\n3\n", "b.txt": "gone\n", "d/keep": "k\n"},
			change: func(t *testing.T, ws string) {
				write(t, ws, map[string]string{"a.txt": "1\ntwo\n3\n", "d/new": "n\n"})
				if err := os.Remove(filepath.Join(ws, "b.txt")); err != nil {
					t.Fatal(err)
				}
			},
			files: []string{"modified a.txt", "deleted b.txt", "added d/new"},
			wantTextOnly: "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n" +
				"--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n" +
				"--- /dev/null\n+++ b/d/new\n@@ -0,0 +1 @@\n+n\n",
		},
		{
			name:   "binary listed not diffed",
			before: map[string]string{"x.bin": "a\x00b"},
			change: func(t *testing.T, ws string) { write(t, ws, map[string]string{"x.bin": "a\x00c"}) },
			files:  []string{"modified x.bin (binary)"},
			text:   []string{"Binary files a/x.bin and b/x.bin differ\n"},
		},
		{
			name:   "large file by size only",
			before: map[string]string{"big": strings.Repeat("x", 100)},
			limits: Limits{Blob: 10},
			change: func(t *testing.T, ws string) { write(t, ws, map[string]string{"big": strings.Repeat("y", 101)}) },
			files:  []string{"modified big (binary)"},
			text:   []string{"not diffed: over 10 bytes"},
		},
		{
			name:   "git data skipped",
			before: map[string]string{".git/HEAD": "ref: a\n"},
			change: func(t *testing.T, ws string) { write(t, ws, map[string]string{".git/HEAD": "ref: b\n", ".GIT/x": "y"}) },
		},
		{
			name: "symlink recorded as its target, never followed",
			change: func(t *testing.T, ws string) {
				if err := os.Symlink("/etc/passwd", filepath.Join(ws, "pw")); err != nil {
					t.Fatal(err)
				}
			},
			files:        []string{"added pw"},
			wantTextOnly: "--- /dev/null\n+++ b/pw\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
		},
		{
			name: "fifo and hostile names",
			change: func(t *testing.T, ws string) {
				if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
					t.Fatal(err)
				}
				write(t, ws, map[string]string{"evil\n+++ b/x\x1b[2J": "z\n"})
			},
			files: []string{"added evil\n+++ b/x\x1b[2J"},
			text:  []string{"+++ b/evil\\n+++ b/x\\x1b[2J\n"},
		},
		{
			name:      "file bound",
			before:    map[string]string{"a": "1"},
			limits:    Limits{Files: 2},
			change:    func(t *testing.T, ws string) { write(t, ws, map[string]string{"a": "2", "b": "1", "c": "1"}) },
			files:     []string{"modified a", "added b"},
			truncated: true,
		},
		{
			name:         "diff byte bound",
			limits:       Limits{DiffBytes: 40},
			change:       func(t *testing.T, ws string) { write(t, ws, map[string]string{"a": "1\n", "b": "2\n"}) },
			files:        []string{"added a", "added b"},
			truncated:    true,
			wantTextOnly: "--- /dev/null\n+++ b/a\n@@ -0,0 +1 @@\n+1\n",
		},
		{
			name:      "entry bound",
			limits:    Limits{Entries: 2},
			change:    func(t *testing.T, ws string) { write(t, ws, map[string]string{"a": "1", "b": "1", "c": "1"}) },
			files:     []string{"added a", "added b"},
			truncated: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			write(t, ws, tc.before)
			st, err := New(t.TempDir(), tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			const id = "ses_1"
			if err := st.Take(t.Context(), id, PointStart, ws); err != nil {
				t.Fatal(err)
			}
			tc.change(t, ws)
			now, err := st.Diff(t.Context(), id, PointStart, Now, ws)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Take(t.Context(), id, TurnAfter("turn_1"), ws); err != nil {
				t.Fatal(err)
			}
			later, err := st.Diff(t.Context(), id, PointStart, TurnAfter("turn_1"), ws)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []Diff{now, later} {
				if got := paths(d); !slices.Equal(got, tc.files) || d.Truncated != tc.truncated {
					t.Errorf("files %q truncated %v, want %q %v", got, d.Truncated, tc.files, tc.truncated)
				}
				if tc.wantTextOnly != "" && d.Text != tc.wantTextOnly {
					t.Errorf("diff:\n%s\nwant:\n%s", d.Text, tc.wantTextOnly)
				}
				for _, part := range tc.text {
					if !strings.Contains(d.Text, part) {
						t.Errorf("diff lacks %q:\n%s", part, d.Text)
					}
				}
				if len(tc.files) == 0 && d.Text != "" {
					t.Errorf("diff of nothing: %q", d.Text)
				}
			}
		})
	}
}

// TestStates checks the states a store keeps: missing ones, names that
// could lead out of the store, removal.
func TestStates(t *testing.T) {
	ws, dir := t.TempDir(), t.TempDir()
	st, err := New(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Diff(t.Context(), "ses_1", PointStart, Now, ws); err == nil || !strings.Contains(err.Error(), ErrNoState.Error()) {
		t.Errorf("diff without a start state: %v", err)
	}
	for _, bad := range []struct{ id, point string }{{"../x", PointStart}, {"ses_1", "../../x"}, {"a.b", PointStart}, {"ses_1", ""}} {
		if err := st.Take(t.Context(), bad.id, bad.point, ws); err == nil {
			t.Errorf("Take(%q, %q) accepted", bad.id, bad.point)
		}
	}
	if err := st.Take(t.Context(), "ses_1", PointStart, ws); err != nil {
		t.Fatal(err)
	}
	if !st.Has("ses_1", PointStart) || st.Has("ses_1", TurnBefore("turn_x")) || st.Has("ses_2", PointStart) {
		t.Error("Has is wrong")
	}
	if err := st.Remove("ses_1"); err != nil {
		t.Fatal(err)
	}
	if st.Has("ses_1", PointStart) {
		t.Error("a removed session's state is still there")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in the store: %v", ents)
	}
}

// FuzzDiffPath checks that a path is one line of a diff's text, whatever
// its bytes, and that it can be read back.
func FuzzDiffPath(f *testing.F) {
	for _, s := range []string{"a/b.go", "x\ny", "\x1b[2J", "q\"uote", "\xff", "é", "\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := diffPath(p)
		if strings.ContainsAny(got, "\n\r\x1b") {
			t.Fatalf("diffPath(%q) = %q has a control", p, got)
		}
		if got != p {
			back, err := strconv.Unquote(`"` + got + `"`)
			if err != nil || back != p {
				t.Fatalf("diffPath(%q) = %q does not read back: %q, %v", p, got, back, err)
			}
		}
	})
}

// TestWithhold: content the store withholds (the daemon's credential
// check) is never written under the store's directory, in any state; the
// file's changes are still found, and the diff names it without its text.
func TestWithhold(t *testing.T) {
	const (
		secret = "sk-live-0123456789abcdef"
		later  = "sk-live-fedcba9876543210"
	)
	ws, dir := t.TempDir(), t.TempDir()
	st, err := New(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	st.Withhold = func(b []byte) bool { return strings.Contains(string(b), "sk-live-") }
	write(t, ws, map[string]string{".env": "KEY=" + secret + "\n", "a.txt": "1\n", "gone.env": "OLD=" + secret + "\n"})
	if err := os.Symlink(secret, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	const id = "ses_1"
	if err := st.Take(t.Context(), id, PointStart, ws); err != nil {
		t.Fatal(err)
	}
	write(t, ws, map[string]string{".env": "KEY=" + later + "\n", "a.txt": "2\n", "new.env": later})
	if err := os.Remove(filepath.Join(ws, "gone.env")); err != nil {
		t.Fatal(err)
	}
	if err := st.Take(t.Context(), id, TurnAfter("turn_1"), ws); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{Now, TurnAfter("turn_1")} {
		d, err := st.Diff(t.Context(), id, PointStart, to, ws)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"modified .env (binary)", "modified a.txt", "deleted gone.env (binary)", "added new.env (binary)"}
		if got := paths(d); !slices.Equal(got, want) {
			t.Errorf("%s: files %q, want %q", to, got, want)
		}
		if strings.Contains(d.Text, "sk-live-") || !strings.Contains(d.Text, "-1\n+2\n") || !strings.Contains(d.Text, "not diffed: the content looks like it holds a credential") {
			t.Errorf("%s: diff:\n%s", to, d.Text)
		}
	}
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), "sk-live-") {
			t.Errorf("%s holds the withheld content", p)
		}
		return nil
	})
}

// TestValidName checks validName against the regular expression it
// replaced, ^[A-Za-z0-9_-]{1,100}(\.(before|after))?$.
func TestValidName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}(\.(before|after))?$`)
	for _, name := range []string{
		"", "a", "start", "turn_01-x", "t1.before", "t1.after", ".before", ".after",
		"t1.before.after", "t1.after.before", "t1.bef", "t1.", "t1..before", "a/b", "../x", "..",
		"x y", "é", "t1.Before", "t1.before\n", "t1\n", strings.Repeat("a", 100), strings.Repeat("a", 101),
		strings.Repeat("a", 100) + ".after", strings.Repeat("a", 101) + ".before", "a\x00",
	} {
		if got, want := validName(name), re.MatchString(name); got != want {
			t.Errorf("validName(%q) = %v, the regexp says %v", name, got, want)
		}
	}
}

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDir(t *testing.T) {
	want := filepath.Join(t.TempDir(), "a", "home")
	set := &Dir{Path: want, Prefix: "unused-"}
	if got := set.Made(); got != want {
		t.Errorf("Made(set) before Make = %q, want %q", got, want)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("Made made the directory (%v)", err)
	}
	if got, err := set.Make(); got != want || err != nil {
		t.Fatalf("Make(set) = %q, %v", got, err)
	}
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the set home is not a private directory: %v, %v", fi, err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	unset := &Dir{Prefix: "agentbox-test-home-"}
	if got := unset.Made(); got != "" {
		t.Errorf("Made(unset) before Make = %q", got)
	}
	got, err := unset.Make()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(got) != tmp || !strings.HasPrefix(filepath.Base(got), "agentbox-test-home-") {
		t.Errorf("Make(unset) = %q, want agentbox-test-home-* under %s", got, tmp)
	}
	if again, _ := unset.Make(); again != got || unset.Made() != got {
		t.Errorf("Make again = %q, Made = %q; want %q", again, unset.Made(), got)
	}
	// Another adapter's directory is another one: no path known in
	// advance.
	if other, _ := (&Dir{Prefix: "agentbox-test-home-"}).Make(); other == got {
		t.Errorf("two adapters share %s", got)
	}
	// A base that is not a directory: the temp dir.
	if d, err := (&Dir{TempBase: filepath.Join(tmp, "missing"), Prefix: "x-"}).Make(); err != nil || filepath.Dir(d) != tmp {
		t.Errorf("Make with a missing base = %q, %v", d, err)
	}
}

func TestReadFileIn(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	for name, content := range map[string]string{"a.txt": "hello", "sub/b.txt": "b", "big": strings.Repeat("x", 11)} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string
		ok   bool
	}{
		{filepath.Join(dir, "a.txt"), "hello", true},
		{filepath.Join(dir, "sub/b.txt"), "b", true},
		{filepath.Join(dir, "big"), "", false},     // over max
		{filepath.Join(dir, "missing"), "", false}, // not there
		{outside, "", false},                       // outside dir
		{filepath.Join(dir, "../secret"), "", false},
		{filepath.Join(dir, "link"), "", false}, // a link out of dir
		{dir, "", false},                        // dir itself
	} {
		got, ok := ReadFileIn(dir, tc.path, 10)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ReadFileIn(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestInfoLocated(t *testing.T) {
	base := Info{Name: "x", Title: "X"}
	got := base.Located("/bin/x", "1.2", nil, "x is missing")
	if !got.Available || !got.Installed || got.Path != "/bin/x" || got.Version != "1.2" || got.Reason != "" || got.Name != "x" {
		t.Errorf("found: %+v", got)
	}
	got = base.Located("", "", nil, "x is missing")
	if got.Available || got.Installed || got.Reason != "x is missing" {
		t.Errorf("no path: %+v", got)
	}
	got = base.Located("", "", errors.New("not in PATH"), "x is missing")
	if got.Available || got.Installed || got.Reason != "x is missing: not in PATH" {
		t.Errorf("lookup error: %+v", got)
	}
	// The install hint is given once, by the error when it has it.
	got = base.Located("", "", errors.New("x is not in the agent cache /c (run `agentbox agents install x`)"), "the x CLI is not installed (run `agentbox agents install x`)")
	if want := "the x CLI is not installed: x is not in the agent cache /c (run `agentbox agents install x`)"; got.Reason != want {
		t.Errorf("hint twice: %q, want %q", got.Reason, want)
	}
}

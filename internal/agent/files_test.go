package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHomeDir(t *testing.T) {
	want := filepath.Join(t.TempDir(), "a", "home")
	if got, err := HomeDir(want, "unused-"); got != want || err != nil {
		t.Fatalf("HomeDir(set) = %q, %v", got, err)
	}
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the set home is not a private directory: %v, %v", fi, err)
	}
	got, err := HomeDir("", "agentbox-test-home-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(got)
	if filepath.Dir(got) != filepath.Clean(os.TempDir()) || !strings.HasPrefix(filepath.Base(got), "agentbox-test-home-") {
		t.Errorf("HomeDir(unset) = %q, want agentbox-test-home-* under %s", got, os.TempDir())
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
}

package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPrivateDir: a socket whose mode cannot be set is accepted only in a
// directory closed to group and others.
func TestPrivateDir(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{mk("private", 0o700), true},
		{mk("group-readable", 0o750), false},
		{mk("others-searchable", 0o701), false},
		{mk("open", 0o777), false},
		{file, false},
		{filepath.Join(root, "missing"), false},
	} {
		if got := privateDir(tc.dir); got != tc.want {
			t.Errorf("privateDir(%s) = %v, want %v", filepath.Base(tc.dir), got, tc.want)
		}
	}
}

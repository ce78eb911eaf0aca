package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUsageOf(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/data"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	// A sparse file allocates nothing.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	u, err := UsageOf(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u.Files != 5 || u.Bytes < 1<<20 || u.Bytes > 1<<20+64<<10 {
		t.Errorf("UsageOf = %+v, want 5 entries and about 1 MiB (the symlink's target and the hole not counted)", u)
	}
	// Bounded: it stops past a bound.
	if u, err := UsageOf(dir, 0, 2); err != nil || u.Files != 3 {
		t.Errorf("UsageOf with at most 2 files = %+v, %v; want it to stop at 3", u, err)
	}
	if u, err := UsageOf(filepath.Join(dir, "absent"), 0, 0); err != nil || u != (DirUsage{}) {
		t.Errorf("UsageOf of a missing dir = %+v, %v", u, err)
	}
}

//go:build linux

package files

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWatch: creates, writes (also the API's own, reported as a write of
// the target), renames and removes below the watched directory are
// reported, in a new subdirectory too, and nothing of the package's own
// temporary entries.
func TestWatch(t *testing.T) {
	f := newFixture(t)
	w := open(t, f)
	ch, err := w.Watch(t.Context(), ".")
	if err != nil {
		t.Fatal(err)
	}
	next := func(want Change) {
		t.Helper()
		for c := range ch {
			if c == want {
				return
			}
			if ours(filepath.Base(c.Path)) {
				t.Fatalf("reported a temporary entry: %+v", c)
			}
		}
		t.Fatalf("watch ended before %+v", want)
	}
	must(t, os.WriteFile(filepath.Join(f.ws, "new.txt"), []byte("x"), 0o644))
	next(Change{"new.txt", OpCreate})
	next(Change{"new.txt", OpWrite})
	if _, err := w.Write(t.Context(), "README.md", []byte("bye")); err != nil {
		t.Fatal(err)
	}
	next(Change{"README.md", OpWrite})
	must(t, os.Mkdir(filepath.Join(f.ws, "sub"), 0o755))
	next(Change{"sub", OpCreate})
	must(t, os.WriteFile(filepath.Join(f.ws, "sub", "deep"), nil, 0o644))
	next(Change{"sub/deep", OpCreate})
	must(t, os.Rename(filepath.Join(f.ws, "sub", "deep"), filepath.Join(f.ws, "sub", "deeper")))
	next(Change{"sub/deep", OpRename})
	next(Change{"sub/deeper", OpRename})
	must(t, os.Remove(filepath.Join(f.ws, "sub", "deeper")))
	next(Change{"sub/deeper", OpRemove})
}

func TestWatchSymlinkOut(t *testing.T) {
	f := newFixture(t)
	w := open(t, f)
	if _, err := w.Watch(t.Context(), "dir-out"); err == nil {
		t.Fatal("watched a directory outside the workspace")
	}
}

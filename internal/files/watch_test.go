//go:build linux

package files

import (
	"errors"
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

// TestView: a workspace opened on a view reads the view, not the
// directory it is given; changes without a sandbox to make them in are
// refused (409 sandbox-live) and change nothing; a watch ends when Until
// closes.
func TestView(t *testing.T) {
	f := newFixture(t)
	view := t.TempDir()
	must(t, os.WriteFile(filepath.Join(view, "only-in-view"), []byte("live\n"), 0o644))
	r, err := os.OpenRoot(view)
	must(t, err)
	until := make(chan struct{})
	w, err := Open(f.ws, Options{View: r, Until: until, Judge: protectJudge})
	must(t, err)
	defer w.Close()
	if e, err := w.Stat(t.Context(), "only-in-view"); err != nil || e.Size != 5 {
		t.Fatalf("stat of the view: %+v %v", e, err)
	}
	if _, err := w.Stat(t.Context(), "README.md"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read the host tree under a view: %v", err)
	}
	if _, err := w.Write(t.Context(), "x", []byte("x")); !errors.Is(err, ErrSandboxLive) {
		t.Fatalf("a write through a view: %v", err)
	}
	if err := w.Delete(t.Context(), "only-in-view", false); !errors.Is(err, ErrSandboxLive) {
		t.Fatalf("a delete through a view: %v", err)
	}
	if _, err := os.Stat(filepath.Join(view, "only-in-view")); err != nil {
		t.Fatal(err)
	}
	ch, err := w.Watch(t.Context(), ".")
	must(t, err)
	close(until)
	for range ch {
	}
}

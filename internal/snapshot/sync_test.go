package snapshot

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTakeSyncsBeforeReferring records the syncs of a Take: each blob's
// content, then the blobs' directory, then the session's directory (which
// names blobs and states) come before the state that refers to them, and
// the state and its directory before "last", which names the state.
func TestTakeSyncsBeforeReferring(t *testing.T) {
	var synced []string
	orig := fsync
	fsync = func(f *os.File) error {
		synced = append(synced, f.Name())
		return orig(f)
	}
	t.Cleanup(func() { fsync = orig })

	root, ws := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(root, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Take(t.Context(), "ses_1", PointStart, ws); err != nil {
		t.Fatal(err)
	}
	dir, err := s.sessionDir("ses_1")
	if err != nil {
		t.Fatal(err)
	}
	blobs, states := filepath.Join(dir, "blobs"), filepath.Join(dir, "states")
	at := func(what string, match func(string) bool) int {
		t.Helper()
		i := slices.IndexFunc(synced, match)
		if i < 0 {
			t.Fatalf("no sync of %s in %q", what, synced)
		}
		return i
	}
	inDir := func(d string) func(string) bool {
		return func(n string) bool { return filepath.Dir(n) == d && strings.HasPrefix(filepath.Base(n), ".tmp-") }
	}
	order := []int{
		at("a blob", inDir(blobs)),
		at("the blobs' directory", func(n string) bool { return n == blobs }),
		at("the session's directory", func(n string) bool { return n == dir }),
		at("the state", inDir(states)),
		at("the states' directory", func(n string) bool { return n == states }),
		at("last", inDir(dir)),
	}
	if !slices.IsSorted(order) {
		t.Errorf("syncs in the order %v of %q; want blob, blobs, session dir, state, states, last", order, synced)
	}
	if synced[len(synced)-1] != dir {
		t.Errorf("the last sync is %q, want the session's directory (naming last)", synced[len(synced)-1])
	}
}

//go:build linux

package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// dirtyPages returns the pages of f in the page cache that are dirty or
// under writeback (cachestat, Linux 6.5).
func dirtyPages(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			t.Skipf("cachestat: %v (needs Linux 6.5)", err)
		}
		t.Fatal(err)
	}
	return st.Dirty + st.Writeback
}

// TestWriteBack checks that writeBack leaves none of a file's pages dirty,
// wherever they lie: after clean stretches (where it asks about larger
// ranges), after dirty ranges (where it starts small again) and in the
// last, partial range.
func TestWriteBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(5*writeBackStride + 3*writeBackPiece + 1000)
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	page := []byte("dirty page")
	// A page every 300 KiB, which no range size divides, and the last
	// byte.
	var offsets []int64
	for off := int64(0); off < size; off += 300 << 10 {
		offsets = append(offsets, off)
	}
	offsets = append(offsets, size-1)
	for _, off := range offsets {
		if _, err := f.WriteAt(page[:min(int64(len(page)), size-off)], off); err != nil {
			t.Fatal(err)
		}
	}
	if n := dirtyPages(t, f); n == 0 {
		t.Fatal("no dirty pages after writing")
	}
	r, err := os.Open(path) // as the store does: read-only
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := writeBack(r); err != nil {
		t.Fatal(err)
	}
	if n := dirtyPages(t, f); n != 0 {
		t.Errorf("%d pages dirty after writeBack", n)
	}
}

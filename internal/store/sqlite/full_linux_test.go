package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/errkind"
)

// smallDisk mounts a tmpfs of size bytes for the test: a real file system
// that really fills up.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// reserve writes a file of n bytes in dir, and returns a function that
// removes it.
func reserve(t *testing.T, dir string, n int) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "reserve")
	if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// fill writes a file in dir until the file system is full, and returns a
// function that frees the space again.
func fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	f.Close()
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiskFull: a full disk fails writes with errkind.StorageFull and
// nothing else; reads go on; once space is freed, writes work again and the
// log has no gap, without reopening. A store opened on a full disk serves
// reads, and writes once space is back.
func TestDiskFull(t *testing.T) {
	dir := smallDisk(t, "4m")
	path := filepath.Join(dir, "agentbox.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	createSession(t, s, "ses_full")
	if _, err := s.Append(t.Context(), "ses_full", delta(0), delta(1)); err != nil {
		t.Fatal(err)
	}

	free := fill(t, dir)
	big := event.Event{Type: event.TypeNative, Data: []byte(`"` + strings.Repeat("x", 2000) + `"`)}
	var fullErr error
	for i := 0; i < 2000 && fullErr == nil; i++ { // until the log's preallocated room is gone too
		_, fullErr = s.Append(t.Context(), "ses_full", big, big, big, big, big, big, big, big)
	}
	if !errors.Is(fullErr, errkind.StorageFull) {
		t.Fatalf("append on a full disk: %v, want errkind.StorageFull", fullErr)
	}
	evs, err := s.Events(t.Context(), "ses_full", 0, 0)
	if err != nil || len(evs) < 2 {
		t.Fatalf("read on a full disk: %d events, %v", len(evs), err)
	}
	last := evs[len(evs)-1].Seq
	free()
	// Room for the second half to free: the log takes whatever room it
	// finds ahead (grow.go), and may leave none for fill to take there.
	unreserve := reserve(t, dir, 256<<10)
	got, err := s.Append(t.Context(), "ses_full", delta(2))
	if err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
	if got[0].Seq != last+1 {
		t.Fatalf("seq after the full disk: %d, want %d", got[0].Seq, last+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Started on a full disk.
	free = fill(t, dir)
	s, err = Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	defer s.Close()
	evs, err = s.Events(t.Context(), "ses_full", 0, 0)
	if err != nil || evs[len(evs)-1].Seq != last+1 {
		t.Fatalf("read after opening on a full disk: %d events, %v", len(evs), err)
	}
	// Appends take the room the log file was grown by ahead (grow.go),
	// then fail.
	last, fullErr = evs[len(evs)-1].Seq, nil
	for i := 0; i < 5000 && fullErr == nil; i++ {
		got, fullErr = s.Append(t.Context(), "ses_full", big)
		if fullErr == nil {
			last = got[0].Seq
		}
	}
	if !errors.Is(fullErr, errkind.StorageFull) {
		t.Fatalf("append, opened on a full disk: %v, want errkind.StorageFull", fullErr)
	}
	free()
	unreserve()
	got, err = s.Append(t.Context(), "ses_full", delta(3))
	if err != nil {
		t.Fatalf("append after space came back: %v", err)
	}
	if got[0].Seq != last+1 {
		t.Fatalf("seq: %d, want %d", got[0].Seq, last+1)
	}
}

package sqlite

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// snapshot is the contents of the database's files.
func snapshot(t *testing.T, path string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		files[suffix] = b
	}
	return files
}

// TestStartWritesNothing opens an existing database, reads from it and
// closes it: a start (and a run that writes nothing) leaves its files as
// they were, so that the next start has nothing to sync, and the epoch
// waits for the run's first write.
func TestStartWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{})
	createSession(t, s, "ses_1")
	if _, err := s.Append(t.Context(), "ses_1", delta(0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, path)
	for range 2 {
		s = open(t, path, Options{})
		if _, err := s.GetSession(t.Context(), "ses_1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after := snapshot(t, path)
	for suffix, b := range before {
		if !bytes.Equal(b, after[suffix]) {
			t.Errorf("agentbox.db%s changed by opens that wrote nothing (%d bytes, then %d)", suffix, len(b), len(after[suffix]))
		}
	}
}

// TestEpochWithFirstWrite checks the batch numbers of runs whose epoch is
// written with their first batch: a run after runs that wrote nothing
// still numbers its batches after every earlier run's, so its rows are
// visible, and what it acknowledged is in the files a crash leaves (a copy
// taken before Close) and readable from them.
func TestEpochWithFirstWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{})
	createSession(t, s, "ses_1")
	firstRun := s.synced.Load()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // runs that write nothing
		s = open(t, path, Options{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, path, Options{})
	got, err := s.Append(t.Context(), "ses_1", delta(0), delta(1))
	if err != nil {
		t.Fatal(err)
	}
	if s.synced.Load()>>32 <= firstRun>>32 {
		t.Fatalf("a later run wrote batch %#x, not after the first run's epoch (batch %#x)", s.synced.Load(), firstRun)
	}
	crashed := filepath.Join(t.TempDir(), "agentbox.db")
	for suffix, b := range snapshot(t, path) {
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := open(t, crashed, Options{})
	evs, err := c.Events(t.Context(), "ses_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Seq != got[1].Seq {
		t.Fatalf("after the crash: %d events (seqs %v), want the 2 acknowledged ones", len(evs), seqsOf(evs))
	}
	// The run after the crash writes in a later epoch still.
	if _, err := c.Append(t.Context(), "ses_1", delta(2)); err != nil {
		t.Fatal(err)
	}
	if c.synced.Load()>>32 <= s.synced.Load()>>32 {
		t.Fatalf("the run after the crash wrote batch %#x, not after the crashed run's (%#x)", c.synced.Load(), s.synced.Load())
	}
}

// TestCleanCloseSkipsSyncs checks when a start syncs what an earlier run
// left (clean.go): not after a clean Close, which synced the files itself
// (and then marks the lock file); after a crash (the files as a live store
// has them, lock file included), before anything is read; after a Close
// whose sync failed, too. What a crashed run acknowledged is there.
func TestCleanCloseSkipsSyncs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agentbox.db")
	files := []string{path, path + "-wal"}
	opensWith := func(path string, fail func(string) error) (s *Store, atOpen []string) {
		t.Helper()
		l := &syncLog{fail: fail}
		s = open(t, path, l.options(SyncFull))
		return s, l.get()
	}
	s, _ := opensWith(path, nil)
	createSession(t, s, "ses_1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, synced := opensWith(path, nil)
	if len(synced) != 0 {
		t.Errorf("a start after a clean close synced %q", synced)
	}
	got, err := s.Append(t.Context(), "ses_1", delta(0))
	if err != nil {
		t.Fatal(err)
	}
	// A crash now: the files as they are, the lock file with them.
	crashed := filepath.Join(t.TempDir(), "agentbox.db")
	for _, suffix := range []string{"", "-wal", ".lock"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, synced := opensWith(crashed, nil)
	if want := []string{crashed, crashed + "-wal"}; !slices.Equal(synced, want) {
		t.Errorf("a start after a crash synced %q, want %q", synced, want)
	}
	evs, err := c.Events(t.Context(), "ses_1", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Seq != got[0].Seq {
		t.Errorf("after the crash: %v, seqs %v, want the acknowledged %d", err, seqsOf(evs), got[0].Seq)
	}
	// A close whose sync fails leaves no mark.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = opensWith(path, nil)
	l := &syncLog{fail: func(name string) error {
		if name == path+"-wal" {
			return errors.New("injected")
		}
		return nil
	}}
	s.opts.fileSyncHook = l.options(SyncFull).fileSyncHook
	_ = s.Close()
	if _, synced = opensWith(path, nil); !slices.Equal(synced, files) {
		t.Errorf("a start after a close whose sync failed synced %q, want %q", synced, files)
	}
}

package sqlite

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGrownLogRecovers: the writer extends the log file with zeros ahead of
// what SQLite wrote (grow.go). A copy of the files taken while the store is
// open, as a crash would leave them (no clean close, no shared-memory
// index), must open with every acknowledged event, and the log must be
// longer than what SQLite wrote, or the test proves nothing.
func TestGrownLogRecovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agentbox.db")
	s := open(t, path, Options{})
	createSession(t, s, "ses_1")
	const n = 50
	for i := range n {
		if _, err := s.Append(t.Context(), "ses_1", delta(i)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// 50 small commits write well under a chunk of frames.
	if fi.Size() < growChunk {
		t.Fatalf("log file is %d bytes, want it grown ahead to at least %d", fi.Size(), growChunk)
	}

	crash := filepath.Join(t.TempDir(), "agentbox.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crash+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := open(t, crash, Options{})
	evs, err := c.Events(t.Context(), "ses_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n || evs[n-1].Seq != n {
		t.Fatalf("recovered %d events, want %d", len(evs), n)
	}
	// And the recovered store goes on from there.
	got, err := c.Append(t.Context(), "ses_1", delta(n))
	if err != nil || got[0].Seq != n+1 {
		t.Fatalf("append after recovery: %v %+v", err, got)
	}
}

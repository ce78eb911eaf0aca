package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// syncLog records, in order, the syncs a store makes: each file or
// directory it syncs itself (fileSyncHook) and "log" for each sync of the
// write-ahead log by the syncer (syncHook).
type syncLog struct {
	mu    sync.Mutex
	syncs []string
	fail  func(name string) error // nil: none fails
}

func (l *syncLog) options(sync Sync) Options {
	return Options{
		Sync: sync,
		fileSyncHook: func(name string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.syncs = append(l.syncs, name)
			if l.fail != nil {
				return l.fail(name)
			}
			return nil
		},
		syncHook: func() error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.syncs = append(l.syncs, "log")
			return nil
		},
	}
}

func (l *syncLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.syncs)
}

// TestNewDatabaseSyncedBeforeFirstWrite checks the durability of a new
// database made without syncing (fresh.go): before the first write is
// acknowledged, the database file, the log and the directory have been
// synced, and (SyncFull) the log after the write's commit; with SyncNormal
// too, the first three come before the first write. A database closed
// clean was synced by its close, and is not again when it reopens.
func TestNewDatabaseSyncedBeforeFirstWrite(t *testing.T) {
	for _, sync := range []Sync{SyncFull, SyncNormal} {
		t.Run(map[Sync]string{SyncFull: "full", SyncNormal: "normal"}[sync], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agentbox.db")
			var l syncLog
			s := open(t, path, l.options(sync))
			createSession(t, s, "ses_1") // acknowledged
			settled := []string{path, path + "-wal", filepath.Dir(path)}
			want := settled
			if sync == SyncFull {
				want = append(want, "log")
			}
			if got := l.get(); !slices.Equal(got, want) {
				t.Errorf("syncs before the first write was acknowledged: %q, want %q", got, want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// A clean close syncs the files itself, so that the next
			// start need not (clean.go; TestCleanCloseSkipsSyncs).
			if got := l.get(); !slices.Equal(got[len(got)-2:], settled[:2]) {
				t.Errorf("syncs of the close: %q, want %q last", got, settled[:2])
			}
			var again syncLog
			s = open(t, path, again.options(sync))
			if got := again.get(); len(got) != 0 {
				t.Errorf("syncs opening a database closed clean: %q, want none", got)
			}
			if _, err := s.GetSession(t.Context(), "ses_1"); err != nil {
				t.Errorf("the acknowledged session after a reopen: %v", err)
			}
		})
	}
}

// TestNewDatabaseSyncFailure checks that a new database whose first syncs
// fail takes no write: nothing is acknowledged that a power loss could
// take back.
func TestNewDatabaseSyncFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	l := syncLog{fail: func(name string) error {
		if name == filepath.Dir(path) {
			return errors.New("disk on fire")
		}
		return nil
	}}
	s := open(t, path, l.options(SyncFull))
	for range 2 {
		err := s.CreateSession(t.Context(), store.Session{ID: "ses_1", Agent: "mock", Status: store.StatusIdle})
		if err == nil || !strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("CreateSession on a new database that could not be synced: %v", err)
		}
	}
}

// TestNewDatabaseCrashBeforeSync copies a new database's files as they are
// before the writer synced them (what a crash of the process then leaves:
// everything written is in the files), and checks that the copy opens,
// with its schema, and takes writes.
func TestNewDatabaseCrashBeforeSync(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agentbox.db")
	hold, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := open(t, path, Options{fileSyncHook: func(string) error {
		once.Do(func() { close(held); <-hold })
		return nil
	}})
	select { // the writer is about to sync: nothing is synced yet
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never synced the new database")
	}
	crashed := filepath.Join(t.TempDir(), "agentbox.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(hold)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := open(t, crashed, Options{})
	createSession(t, c, "ses_1")
	if _, err := c.GetSession(t.Context(), "ses_1"); err != nil {
		t.Fatal(err)
	}
}

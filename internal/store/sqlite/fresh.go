package sqlite

import (
	"fmt"
	"path/filepath"
)

// A new database. Made with synchronous=NORMAL, a new database costs six
// syncs before the store can serve anything: the rollback journal of the
// switch to WAL (twice), the database file, the log's header, then the
// database file and the log again (openEpoch). None of them protects
// anything acknowledged, as a new database holds nothing yet; on a loaded
// host they were most of the daemon's start.
//
// So a new database (an empty file) is made with synchronous=OFF, which
// syncs nothing, and switched to NORMAL once its schema is in.
// The writer then syncs, before it writes its first batch (so before any
// write is acknowledged, with SyncFull or SyncNormal): the database file
// (page 1, which the switch to WAL wrote: SQLite discards a log beside an
// empty database file), the log (its header, the schema) and
// the directory (the files' names). A power loss before that loses nothing
// anyone was told is stored, and leaves a database the next start opens:
//   - an empty file, or a hot journal that rolls back to one: made again;
//   - page 1 of an empty database, in whole: all it holds (the 100-byte
//     header and an empty table's 8-byte page header) lies in the first
//     sector, the rest of the page is zeros;
//   - a log cut anywhere: SQLite reads a log only up to its first frame
//     whose checksum fails, so the schema (one transaction, migrate) and
//     the epoch are in whole or not at all, and migrate makes what is
//     missing.
// If the syncs fail, the store is broken: every write fails with the
// error, as after a failed sync of the log.

// settle syncs a new database before the writer's first batch.
func (w *writer) settle() {
	w.settlePending = false
	s := w.s
	for _, name := range []string{s.path, s.path + "-wal", filepath.Dir(s.path)} {
		if err := s.syncPath(name); err != nil {
			err = fmt.Errorf("sync new database: %w", err)
			s.broken.CompareAndSwap(nil, &err)
			return
		}
	}
}

// syncPath syncs the file or directory name; a missing one has nothing to
// sync.
func (s *Store) syncPath(name string) error {
	if s.opts.fileSyncHook != nil {
		if err := s.opts.fileSyncHook(name); err != nil {
			return err
		}
	}
	return syncFile(name)
}

package sqlite

import (
	"bytes"
	"os"
)

// A clean close. Before a start exposes what an earlier run left in the
// files, it syncs them (openEpoch): a run that crashed may have left rows
// committed but not synced, still in the page cache, which must not be
// read and then lost to a power failure. That is two syncs of files with
// nothing dirty after a clean close, and each still costs a flush of the
// disk's cache (ext4 issues one for an fsync with nothing to write): on a
// busy host, milliseconds each, most of a restart.
//
// So Close, once every connection is closed, syncs the database file and
// the log itself and, only if both syncs succeed and the store is not
// broken, writes cleanMark into the lock file (lockFile). Open reads the
// lock file and empties it before anything else touches the database: a
// start skips the syncs only when the mark is there. Why that is enough:
//   - a process crash leaves the page cache as it is, so the next start
//     sees the emptied lock file (no mark) and syncs;
//   - a power failure (or a kernel crash) loses the page cache: whatever
//     the files then hold is on the disk, synced, whether the mark survived
//     or not;
//   - a lock file without the mark (a crash, a failed sync, a new lock
//     file, an older version's) means "sync", the safe default; the mark is
//     never synced itself for the same reason.
const cleanMark = "closed clean\n"

// takeCleanMark reports whether the lock file holds the clean-close mark,
// and empties it.
func takeCleanMark(lock *os.File) bool {
	if lock == nil {
		return false
	}
	var b [len(cleanMark) + 1]byte
	n, _ := lock.ReadAt(b[:], 0)
	if lock.Truncate(0) != nil {
		return false // the mark may still be there: do not trust it
	}
	return bytes.Equal(b[:n], []byte(cleanMark))
}

// putCleanMark syncs the closed database's files and, if that worked,
// marks the lock file. Failures leave no mark: the next start syncs.
func (s *Store) putCleanMark() {
	if s.lock == nil || s.broken.Load() != nil {
		return
	}
	for _, name := range []string{s.path, s.path + "-wal"} {
		if s.syncPath(name) != nil {
			return
		}
	}
	_, _ = s.lock.WriteAt([]byte(cleanMark), 0) // no mark written is the safe default
}

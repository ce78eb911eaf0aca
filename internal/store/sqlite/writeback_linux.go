//go:build linux

package sqlite

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// writeBack writes f's dirty pages to the device a range at a time, each
// range waited for before the next is started, and after a range that took
// d (it had pages to write) rests for d: the checkpointer's write-back then
// occupies the disk at most about half the time (checkpoint.go). A range
// found clean doubles the next one, up to writeBackStride, so that a large
// file with few dirty pages costs few calls.
//
// Errors are the caller's to drop: the database file's writeback errors are
// reported to SQLite's own file description too (Linux reports a failed
// writeback once per file description), so its sync fails as it would
// have without this.
func writeBack(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	n := int64(writeBackPiece)
	for off := int64(0); off < fi.Size(); {
		start := time.Now()
		var serr error
		if err := rc.Control(func(fd uintptr) {
			for {
				if serr = unix.SyncFileRange(int(fd), off, n, flags); serr != unix.EINTR {
					return
				}
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
		}
		off += n
		if d := time.Since(start); d >= writeBackIdle {
			n = writeBackPiece
			time.Sleep(d)
		} else {
			n = min(2*n, writeBackStride)
		}
	}
	return nil
}

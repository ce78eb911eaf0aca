package sqlite

import (
	"errors"
	"syscall"

	"modernc.org/sqlite"

	"github.com/agentbox/agentbox/internal/errkind"
)

// sqliteFull is SQLite's primary result code for "database or disk is full".
const sqliteFull = 13

// classify marks err as errkind.StorageFull when it says the disk (or the
// quota) is full, so that callers can tell a write that may work again once
// space is freed from one that will not. A full disk is never sticky here:
// the failed transaction is rolled back and the next one is tried afresh.
// (A failed sync of the log is another matter; see syncLog.)
func classify(err error) error {
	if err == nil || errors.Is(err, errkind.StorageFull) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqliteFull ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errkind.Wrap(errkind.StorageFull, err)
	}
	return err
}

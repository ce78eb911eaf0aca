//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock next to the database: seqs are
// assigned in this process's memory, so two processes writing one database
// would hand out the same seq twice. The lock dies with the process.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another agentbox process has it open (lock %s.lock)", ErrInUse, path)
		}
		return nil, fmt.Errorf("lock %s.lock: %w", path, err)
	}
	return f, nil
}

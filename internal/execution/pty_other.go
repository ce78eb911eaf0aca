//go:build !linux

package execution

import (
	"fmt"
	"os"
	"syscall"
)

func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	return nil, nil, fmt.Errorf("%w: pseudo-terminals need Linux", ErrInvalid)
}

func resizePTY(master *os.File, rows, cols uint16) error {
	return fmt.Errorf("%w: pseudo-terminals need Linux", ErrInvalid)
}

func signalPTY(master *os.File, sig syscall.Signal) error {
	return fmt.Errorf("%w: pseudo-terminals need Linux", ErrInvalid)
}

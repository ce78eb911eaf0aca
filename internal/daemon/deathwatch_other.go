//go:build !linux

package daemon

import (
	"errors"
	"os"
)

// startDeathwatch: sandboxes exist only on Linux.
func startDeathwatch() (*os.File, error) {
	return nil, errors.New("deathwatch: only on Linux")
}

func stopDeathwatch(*os.File) error { return nil }

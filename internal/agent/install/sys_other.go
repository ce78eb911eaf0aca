//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package install

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
)

// Agents are installed on Linux (and the other systems with flock) only.

func tryLock(*os.File) (bool, error) {
	return false, errors.New("installing agents needs flock, which this system lacks")
}

func unlockFile(*os.File) {}

func diskFile(fi fs.FileInfo) ([2]uint64, int64, bool) { return [2]uint64{}, fi.Size(), false }

func setProcessGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}

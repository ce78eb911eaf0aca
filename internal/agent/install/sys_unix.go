//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package install

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
)

// tryLock takes an exclusive flock on f without blocking; false means
// another open file (another process, or another install in this one)
// holds it. The kernel releases it when the holder dies.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		}
		return false, err
	}
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// diskFile identifies a file across hard links and says how much disk it
// takes (its allocated blocks).
func diskFile(fi fs.FileInfo) (id [2]uint64, size int64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, fi.Size(), false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, int64(st.Blocks) * 512, true // Dev is not uint64 everywhere
}

// setProcessGroup runs cmd in its own process group, killed as a whole
// when cmd's context ends.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
}

// killGroup kills whatever is left of cmd's process group after it exited.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

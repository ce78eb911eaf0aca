//go:build unix

package codex

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ownGroup makes the process the leader of a new process group, so that
// signals reach everything it started.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends sig to the process's group.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return nil
	}
	return syscall.Kill(-p.Pid, sig)
}

// exitStatus returns the exit code (128+n for a signal) and a description.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, "is gone"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return ps.ExitCode(), fmt.Sprintf("exited with code %d", ps.ExitCode())
}

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

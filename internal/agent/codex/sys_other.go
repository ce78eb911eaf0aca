//go:build !unix

package codex

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func ownGroup(*exec.Cmd) {}

// signalGroup kills the process alone: there are no process groups here.
func signalGroup(p *os.Process, _ syscall.Signal) error {
	if p == nil {
		return nil
	}
	return p.Kill()
}

func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return -1, "is gone"
	}
	return ps.ExitCode(), fmt.Sprintf("exited with code %d", ps.ExitCode())
}

const (
	sigTerm = syscall.Signal(15)
	sigKill = syscall.Signal(9)
)

//go:build !unix

package claude

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func ownGroup(*exec.Cmd) {}

// signalGroup kills the process alone: there are no process groups here.
func signalGroup(p *os.Process, _ syscall.Signal) error { return p.Kill() }

func exitStatus(ps *os.ProcessState) (int, string) {
	return ps.ExitCode(), fmt.Sprintf("exited with code %d", ps.ExitCode())
}

const (
	sigTerm = syscall.Signal(15)
	sigKill = syscall.Signal(9)
)

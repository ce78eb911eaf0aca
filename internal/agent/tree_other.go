//go:build !linux

package agent

import (
	"errors"
	"os/exec"
	"syscall"
)

// Tree is a process started with StartTree. Only Linux has the mechanism
// (a child subreaper) that keeps an agent's whole tree together.
type Tree struct{}

// StartTree refuses: without a child subreaper an agent's descendants
// could outlive its session and the daemon.
func StartTree(*exec.Cmd) (*Tree, error) {
	return nil, errors.New("agent: cannot keep the agent's processes together: the child subreaper (PR_SET_CHILD_SUBREAPER, Linux) is missing")
}

// Pid is the agent process's pid.
func (*Tree) Pid() int { return 0 }

// Signal sends sig to every process of the tree.
func (*Tree) Signal(syscall.Signal) error { return errors.ErrUnsupported }

// Wait waits for the tree to end.
func (*Tree) Wait() error { return errors.ErrUnsupported }

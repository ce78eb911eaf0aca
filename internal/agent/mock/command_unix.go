//go:build unix

package mock

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel runs the command in its own process group and kills the
// whole group when its context ends, so children of the shell die too.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
